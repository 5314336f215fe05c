"""The browser probe's page, sans-IO: the fetch it makes (built from a ProbeConfig), the script that makes it, and
what the script hands back, turned into the probe's own Trace.

The script streams the request with `fetch` + `ReadableStream`, as a web app does, and stamps every chunk with
`performance.now()` as `read()` resolves: a chunk is the browser's arrival (what one wake-up of the page got). The
response is decoded by the browser (it sent its own Accept-Encoding, which a page cannot set), so the chunks are the
decoded body; they are fed, after the fact, to the same TraceRecorder (and wire/reader.py frame reader) as the raw
probe's reads, so frames, arrivals, bursts, TTFT and first-token follow the same rules for every format.

Times: the page's clock is `performance.timeOrigin + performance.now()` (ms, wall clock at a 0.1 ms grain); every
figure is a difference on it (TTFT = first content chunk - `requestStart`, the resource timing's "request about to be
sent"), so none depends on the wall clock. To join the stub's write log the page's times are moved onto the host's
monotonic clock by the wall-minus-monotonic offset read in Python (good to about a millisecond).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from tokenpath.errors import (
    BAD_REQUEST_STATUSES,
    BadRequest,
    ConnectError,
    ContentTypeError,
    DNSError,
    FirstByteTimeout,
    HTTPStatusError,
    IdleTimeout,
    InstrumentError,
    NetworkError,
    PeerError,
    ResponseTooLarge,
    TLSError,
    TotalTimeout,
    UsageError,
)
from tokenpath.probe.client import ProbeConfig, request_parts
from tokenpath.probe.h3figures import DEFAULT_H3_WINDOW
from tokenpath.probe.trace import DEFAULT_LIMITS, ERROR_BODY_PREVIEW, Trace, TraceLimits, TraceRecorder
from tokenpath.wire.apis import SPECS
from tokenpath.wire.httpversion import HttpVersion

PAGE_PATH = "/__tokenpath_browser_probe__"  # served by the driver on the target's origin (never sent to it)
# The page itself: no favicon request (a data: icon), nothing else loaded.
PAGE_HTML = '<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><title>tokenpath probe</title>'

# A page may not set these (the Fetch standard's forbidden request headers): the browser sends its own or drops them.
FORBIDDEN_HEADERS = frozenset(
    {
        "accept-charset",
        "accept-encoding",
        "access-control-request-headers",
        "access-control-request-method",
        "connection",
        "content-length",
        "cookie",
        "cookie2",
        "date",
        "dnt",
        "expect",
        "host",
        "keep-alive",
        "origin",
        "referer",
        "set-cookie",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "via",
    }
)

# The most body the page keeps (the trace's own frame_bytes limit): past it the fetch is aborted, ResponseTooLarge.
MAX_BODY_BYTES = DEFAULT_LIMITS.frame_bytes
MAX_CHUNKS = DEFAULT_LIMITS.reads  # one record per read(), like the trace's reads
TIMING_WAITS = 300  # 10 ms apart: how long the page waits for the request's resource timing entry (3 s at most)


@dataclass(frozen=True, slots=True)
class FetchSpec:
    """The argument of the page script: what it fetches and its bounds (ms)."""

    url: str  # the endpoint, same origin as the page
    headers: tuple[tuple[str, str], ...]
    body: str
    first_byte_ms: float
    idle_ms: float
    total_ms: float
    max_bytes: int = MAX_BODY_BYTES
    max_chunks: int = MAX_CHUNKS

    def to_js(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "headers": [list(h) for h in self.headers],  # a list keeps order and repeats
            "body": self.body,
            "firstByteMs": self.first_byte_ms,
            "idleMs": self.idle_ms,
            "totalMs": self.total_ms,
            "maxBytes": self.max_bytes,
            "maxChunks": self.max_chunks,
            "timingWaits": TIMING_WAITS,
        }


def fetch_spec(cfg: ProbeConfig, stream_id: str) -> FetchSpec:
    """The raw probe's request (client.request_bytes) as a fetch: the same body, the stream id, the key and the
    user's headers; Host, Content-Length and Accept-Encoding are the browser's."""
    if cfg.accept_encoding is not None:
        raise UsageError("`accept_encoding` with the chromium client: the browser sends its own Accept-Encoding")
    if cfg.http_version is HttpVersion.HTTP2:
        raise UsageError("`http2` with the chromium client: the browser negotiates h2 by itself (ALPN over TLS)")
    if cfg.h3_window != DEFAULT_H3_WINDOW:
        raise UsageError("`h3_window` with the chromium client: the browser keeps its own QUIC windows")
    for name, _ in cfg.headers:
        low = name.lower()
        if low in FORBIDDEN_HEADERS or low.startswith(("proxy-", "sec-")):
            raise UsageError(f"header {name}: a page may not set it (the browser sends its own or drops it)")
    target = cfg.target
    headers, body = request_parts(cfg, stream_id)
    headers = [("Content-Type", "application/json"), ("Accept", SPECS[cfg.api].content_type), *headers]
    return FetchSpec(
        url=target.origin + target.path,
        headers=tuple(headers),
        body=json.dumps(body, separators=(",", ":")),
        first_byte_ms=cfg.first_byte_timeout_s * 1000,
        idle_ms=cfg.idle_timeout_s * 1000,
        total_ms=cfg.total_timeout_s * 1000,
    )


# Starts the fetch and returns at once; the result lands in window.__tokenpath (polled by the driver, which bounds
# the wait on its side too). Chunks are base64: the body may be binary (Bedrock's event stream). The idle timer is
# reset per chunk (the page cannot see frames; the raw probe's is per frame).
PAGE_SCRIPT = r"""
(spec) => {
  const b64 = (u8) => {
    let s = "";
    for (let i = 0; i < u8.length; i += 0x8000) s += String.fromCharCode.apply(null, u8.subarray(i, i + 0x8000));
    return btoa(s);
  };
  const run = async () => {
    const out = {timeOrigin: performance.timeOrigin, tCall: performance.now(), chunks: [], bytes: 0, why: null};
    const ctl = new AbortController();
    let timer = null;
    const arm = (why, ms) => {
      clearTimeout(timer);
      timer = setTimeout(() => { out.why = why; ctl.abort(); }, ms);
    };
    const total = setTimeout(() => { out.why = "total"; ctl.abort(); }, spec.totalMs);
    try {
      arm("first_byte", spec.firstByteMs);
      const r = await fetch(spec.url, {method: "POST", headers: spec.headers, body: spec.body, signal: ctl.signal,
                                       cache: "no-store", credentials: "omit", redirect: "manual"});
      out.tHead = performance.now();
      out.status = r.status;
      out.redirected = r.type === "opaqueredirect";
      out.contentType = r.headers.get("content-type");
      out.contentEncoding = r.headers.get("content-encoding");
      arm("idle", spec.idleMs);
      const reader = r.body ? r.body.getReader() : null;
      while (reader) {
        const {value, done} = await reader.read();
        const t = performance.now();
        if (done) { out.tEnd = t; break; }
        arm("idle", spec.idleMs);
        out.bytes += value.length;
        if (out.bytes > spec.maxBytes || out.chunks.length >= spec.maxChunks) {
          out.why = "too_large";
          ctl.abort();
          break;
        }
        out.chunks.push([t, b64(value)]);
      }
      if (!reader) out.tEnd = out.tHead;
    } catch (e) {
      out.error = String((e && e.message) || e);
    }
    clearTimeout(timer);
    clearTimeout(total);
    // The resource timing entry is queued once the network side reports the end, which can come after the body's
    // last read() on a busy box: wait for it, a bounded while.
    let entry;
    for (let i = 0; i < spec.timingWaits; i++) {
      entry = performance.getEntriesByType("resource").filter((e) => e.name === spec.url).pop();
      if (entry) break;
      await new Promise((done) => setTimeout(done, 10));
    }
    if (entry) {
      out.resource = {requestStart: entry.requestStart, responseStart: entry.responseStart,
                      fetchStart: entry.fetchStart, connectEnd: entry.connectEnd,
                      nextHopProtocol: entry.nextHopProtocol};
    }
    return out;
  };
  window.__tokenpath = undefined;
  run().then((r) => { window.__tokenpath = r; }, (e) => { window.__tokenpath = {error: String(e), chunks: []}; });
}
"""
RESULT_READY = "() => window.__tokenpath"


@dataclass(frozen=True, slots=True)
class Chunk:
    t_ms: float  # performance.now() when read() resolved
    data: bytes


@dataclass(frozen=True, slots=True)
class PageResult:
    """What the page script returned, checked."""

    time_origin_ms: float
    t_call_ms: float  # just before fetch()
    chunks: tuple[Chunk, ...]
    t_head_ms: float | None = None  # fetch() resolved: the head arrived
    t_end_ms: float | None = None  # read() said done
    status: int | None = None
    redirected: bool = False
    content_type: str | None = None
    content_encoding: str | None = None
    error: str | None = None  # fetch() or read() rejected (a network error, or the abort below)
    why: str | None = None  # the page's own bound that aborted it: first_byte, idle, total, too_large
    request_start_ms: float | None = None  # resource timing (same origin: always exposed)
    response_start_ms: float | None = None
    protocol: str | None = None  # nextHopProtocol: "http/1.1", "h2", "h3"

    @property
    def sent_at(self) -> str:
        """What TTFB and TTFT count from: `requestStart`, or `fetch()` (then including the connect) without it."""
        return "requestStart" if self.request_start_ms else "fetch()"

    @property
    def t_sent_ms(self) -> float:
        """The request left: resource timing's requestStart, else the call (it then includes the connect)."""
        return self.request_start_ms if self.request_start_ms else self.t_call_ms


class PageResultError(InstrumentError):
    """The page's result is not the script's shape (a page that was navigated away, or a bug of ours)."""


def _num(obj: Mapping[str, Any], key: str, required: bool = False) -> float | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PageResultError(f"`{key}` is {value!r}, not a number")
    return float(value)


def _str(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise PageResultError(f"`{key}` is {value!r}, not a string")
    return value


def parse_result(obj: object) -> PageResult:
    """The script's result, type-checked; chunks decoded and in time order (raises PageResultError)."""
    if not isinstance(obj, dict):
        raise PageResultError(f"the page returned {type(obj).__name__}, not an object")
    raw_chunks = obj.get("chunks")
    if not isinstance(raw_chunks, list):
        raise PageResultError("`chunks` is not a list")
    chunks = []
    for item in raw_chunks:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], str)):
            raise PageResultError(f"a chunk is {item!r:.80}, not [time, base64]")
        t = _num({"t": item[0]}, "t", required=True)
        try:
            data = base64.b64decode(item[1], validate=True)
        except ValueError:
            raise PageResultError("a chunk is not base64") from None
        chunks.append(Chunk(float(t or 0.0), data))
    if any(b.t_ms < a.t_ms for a, b in pairwise(chunks)):
        raise PageResultError("chunk times go backwards")
    resource = obj.get("resource")
    resource = {} if resource is None else resource
    if not isinstance(resource, dict):
        raise PageResultError("`resource` is not an object")
    status = _num(obj, "status")
    return PageResult(
        time_origin_ms=float(_num(obj, "timeOrigin", required=True) or 0.0),
        t_call_ms=float(_num(obj, "tCall", required=True) or 0.0),
        chunks=tuple(chunks),
        t_head_ms=_num(obj, "tHead"),
        t_end_ms=_num(obj, "tEnd"),
        status=None if status is None else int(status),
        redirected=obj.get("redirected") is True,
        content_type=_str(obj, "contentType"),
        content_encoding=_str(obj, "contentEncoding"),
        error=_str(obj, "error"),
        why=_str(obj, "why"),
        request_start_ms=_num(resource, "requestStart"),
        response_start_ms=_num(resource, "responseStart"),
        protocol=_str(resource, "nextHopProtocol") or None,
    )


def http_version(protocol: str | None) -> str | None:
    """nextHopProtocol ("http/1.1", "h2", "h3", ALPN ids) as the probe's http_version ("1.1", "2", "3")."""
    if not protocol:
        return None
    return {"http/1.0": "1.0", "http/1.1": "1.1", "h2": "2", "h2c": "2", "h3": "3"}.get(protocol.lower(), protocol)


class PageClock:
    """Page times (ms since timeOrigin) onto the host's monotonic clock (ns), given wall - monotonic (ns)."""

    def __init__(self, time_origin_ms: float, wall_minus_mono_ns: int) -> None:
        # timeOrigin (~1.8e12 ms) in µs stays exact in a double; the page's own times are added in ns.
        self._origin_ns = round(time_origin_ms * 1000) * 1000 - wall_minus_mono_ns

    def ns(self, t_ms: float) -> int:
        return self._origin_ns + round(t_ms * 1_000_000)


def _preview(result: PageResult) -> str:
    body = b"".join(c.data for c in result.chunks)[:ERROR_BODY_PREVIEW]
    return body.decode("utf-8", "replace").strip() or "(empty body)"


def check_outcome(result: PageResult, cfg: ProbeConfig, failure: str | None = None) -> None:
    """Raises the probe's own error for a page that did not get a 2xx stream in the format's Content-Type, in the
    raw probe's words. `failure`: the browser's net error for the request (net::ERR_...), when it told one."""
    frames_note = f" ({len(result.chunks)} chunks)"
    if result.why == "total":
        raise TotalTimeout(f"the stream did not end within `total_timeout` {cfg.total_timeout_s} s{frames_note}")
    if result.why == "first_byte":
        raise FirstByteTimeout(f"no response byte within `first_byte_timeout` {cfg.first_byte_timeout_s} s")
    if result.why == "idle":
        raise IdleTimeout(f"no chunk for `idle_timeout` {cfg.idle_timeout_s} s after {len(result.chunks)} chunks")
    if result.why == "too_large":
        raise ResponseTooLarge(
            f"the response passed the browser probe's limit ({MAX_BODY_BYTES} bytes or {MAX_CHUNKS} chunks)"
        )
    if result.error is not None:
        raise net_error(failure, result.error, result.status is not None)
    if result.redirected:
        raise HTTPStatusError(f"a redirect from {cfg.target.origin} (not followed; the page cannot see where to)")
    status = result.status or 0
    if not 200 <= status < 300:
        error = BadRequest if status in BAD_REQUEST_STATUSES else HTTPStatusError
        raise error(f"HTTP {status} from {cfg.target.origin}: {_preview(result)}")
    expected = SPECS[cfg.api].content_type
    got = (result.content_type or "").split(";", 1)[0].strip().lower()
    if got != expected:
        raise ContentTypeError(f"expected Content-Type {expected}, got {got or 'none'}")


def net_error(failure: str | None, message: str, had_head: bool) -> PeerError:
    """The browser's net error as the probe's error class (ERR_CERT_* is TLS, ERR_NAME_* DNS...)."""
    reason = failure or message
    said = f"the browser's fetch failed: {reason}"
    if "ERR_NAME_NOT_RESOLVED" in reason:
        return DNSError(said)
    if "ERR_CERT_" in reason or "ERR_SSL_" in reason:
        return TLSError(said)
    if not had_head and any(
        s in reason for s in ("ERR_CONNECTION_REFUSED", "ERR_ADDRESS_UNREACHABLE", "ERR_CONNECTION_TIMED_OUT")
    ):
        return ConnectError(said)
    return NetworkError(said)


def to_trace(
    result: PageResult, stream_id: str, cfg: ProbeConfig, wall_minus_mono_ns: int, limits: TraceLimits = DEFAULT_LIMITS
) -> Trace:
    """The page's stream as the probe's Trace: the head as a read at fetch()'s resolution, each chunk a read at its
    read(), the end at done. The recorder is fed an HTTP/1.1 head carrying the response's status and Content-Type
    (the browser decoded the body: no Content-Encoding) and then the chunks, close-delimited, so every frame rule is
    the raw probe's own. The trace's content_encoding is the one the browser decoded."""
    clock = PageClock(result.time_origin_ms, wall_minus_mono_ns)
    recorder = TraceRecorder(stream_id, clock.ns(result.t_sent_ms), limits, api=cfg.api)
    content_type = (result.content_type or "").replace("\r", " ").replace("\n", " ")
    head = f"HTTP/1.1 {result.status or 0} -\r\nContent-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    t_head = result.t_head_ms if result.t_head_ms is not None else result.t_sent_ms
    recorder.on_read(clock.ns(t_head), head)
    for chunk in result.chunks:
        recorder.on_read(clock.ns(chunk.t_ms), chunk.data)
    t_end = result.t_end_ms if result.t_end_ms is not None else (result.chunks[-1].t_ms if result.chunks else t_head)
    recorder.on_eof(clock.ns(t_end))
    trace = recorder.trace
    trace.content_encoding = (result.content_encoding or "identity").strip().lower() or "identity"
    trace.http_version = http_version(result.protocol) or trace.http_version  # what the browser negotiated
    return trace
