"""What one probe asks and how it reads the answer: ProbeConfig, the request written by hand, and the read loop
every client shares over one seam (ReadSource: the next read, over TCP, QUIC or WebSocket messages; each read waits
until the nearest deadline; the head checked; an error body previewed). probe/stream.py runs a stream with them
(HTTP/1.1 there, HTTP/2 in probe/h2stream.py, HTTP/3 in probe/h3stream.py, WebSocket in probe/wsstream.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from tokenpath.clock import Clock
from tokenpath.errors import (
    BAD_REQUEST_STATUSES,
    BadRequest,
    ContentEncodingError,
    ContentTypeError,
    FirstByteTimeout,
    HTTPStatusError,
    IdleTimeout,
    NetworkError,
    PeerError,
    ProtocolError,
    TotalTimeout,
    UsageError,
)
from tokenpath.probe.h3figures import DEFAULT_H3_WINDOW, H3Window
from tokenpath.probe.trace import ERROR_BODY_PREVIEW, PARTIAL_TRACE, TraceRecorder
from tokenpath.probe.transport import Target, TLSOptions, Transport, parse_target
from tokenpath.probe.wsfallback import NO_FALLBACK, WsFallback
from tokenpath.riders import handed_on
from tokenpath.wire.acceptencoding import BROWSER_ACCEPT_ENCODING as BROWSER_ACCEPT_ENCODING  # re-exported
from tokenpath.wire.acceptencoding import expand_accept_encoding
from tokenpath.wire.apis import SPECS, Api, Framing
from tokenpath.wire.carrier import SSE, TRANSPORTS, WEBSOCKET
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.ending import STREAM_END
from tokenpath.wire.h2client import DEFAULT_WINDOW, H2Window
from tokenpath.wire.httpversion import HttpVersion
from tokenpath.wire.reader import apis_for_content_type
from tokenpath.wire.request import (
    DEFAULT_PROMPT,
    api_headers,
    build_json_request,
    endpoint_target,
    refuse_second_credential,
    stream_body,
)


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    url: str
    model: str = "tokenpath-stub"
    prompt: str = DEFAULT_PROMPT
    max_tokens: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    api_key: str | None = field(default=None, repr=False)  # from an env var; never printed
    tls: TLSOptions = field(default_factory=TLSOptions)
    connect_timeout_s: float = 10.0
    first_byte_timeout_s: float = 30.0
    idle_timeout_s: float = 30.0
    total_timeout_s: float = 600.0
    keep_alive: bool = False
    extra_body: tuple[tuple[str, Any], ...] = ()  # merged into the JSON body (e.g. the stub's "tokenpath" pacing)
    api: Api = Api.OPENAI  # the streaming format: its route, request body, Content-Type and frames
    # The Accept-Encoding header sent (None: none, as curl sends; "browser" expands to BROWSER_ACCEPT_ENCODING). The
    # response's Content-Encoding is decoded and frames are counted in the decoded stream.
    accept_encoding: str | None = None
    # HTTP/2 (probe --http2): ALPN h2 over TLS, h2c with prior knowledge in clear text; never a fallback to 1.1.
    # `h2_window` is the client's receive windows (wire/h2client.py: default 65,535, `browser` = Chromium's).
    http_version: HttpVersion = HttpVersion.HTTP11
    h2_window: H2Window = DEFAULT_WINDOW
    # HTTP/3 (probe --http3, probe/h3stream.py): QUIC over UDP, always TLS; `h3_window` its initial receive windows.
    h3_window: H3Window = DEFAULT_H3_WINDOW
    # "websocket" (probe --transport websocket): the format's WebSocket mode over an HTTP/1.1 upgrade
    # (probe/wsstream.py); "sse": the format's own HTTP stream.
    transport: str = SSE
    # Over WebSocket: the client's policy when the upgrade fails (probe/wsfallback.py: N failed upgrades, then the
    # same request over SSE, the cost reported); NO_FALLBACK: a refused upgrade is the result.
    ws_fallback: WsFallback = NO_FALLBACK
    # Over WebSocket: a ping every this many seconds while the stream runs (an agent's keep-alive; None: none).
    ws_ping_s: float | None = None

    def __post_init__(self) -> None:
        h2 = self.http_version is HttpVersion.HTTP2
        if self.transport not in TRANSPORTS:
            raise UsageError(f"`transport` {self.transport!r}: choose {' or '.join(TRANSPORTS)}")
        if self.http_version is not HttpVersion.HTTP11 and self.transport == WEBSOCKET:  # never ignored for h2 or h3
            raise UsageError(
                f"`transport` websocket is an HTTP/1.1 upgrade: it does not run over {self.http_version.label}"
            )
        if self.transport == WEBSOCKET and not SPECS[self.api].websocket:  # refused before anything runs
            modes = ", ".join(a.value for a, spec in SPECS.items() if spec.websocket)
            raise UsageError(
                f"`transport` websocket: the {self.api.value} API has no WebSocket mode (`api` {modes} has)"
            )
        if self.transport != WEBSOCKET and SPECS[self.api].websocket_only:
            raise UsageError(
                f"`transport` {self.transport}: the {self.api.value} API is WebSocket only (no HTTP stream); "
                "pass `transport` websocket"
            )
        if self.ws_fallback.enabled and SPECS[self.api].websocket_only:
            raise UsageError(
                f"`ws_fallback`: the {self.api.value} API is WebSocket only: there is no SSE to fall back to"
            )
        if self.ws_ping_s is not None and self.transport != WEBSOCKET:
            raise UsageError("`ws_ping_s` is the WebSocket client's keep-alive: pass `transport` websocket with it")
        if self.ws_ping_s is not None and not 0 < self.ws_ping_s < float("inf"):
            raise UsageError(f"`ws_ping_s` must be a number of seconds > 0, not {self.ws_ping_s}")
        if self.ws_fallback.enabled and self.transport != WEBSOCKET:
            raise UsageError("`ws_fallback` is the WebSocket transport's policy: pass `transport` websocket with it")
        if self.tls.http2 is not h2:  # every connector's TLS context offers h2 (and insists) or not at all,
            object.__setattr__(self, "tls", dataclasses.replace(self.tls, http2=h2))  # also after replace()
        if self.accept_encoding is not None:
            object.__setattr__(self, "accept_encoding", expand_accept_encoding(self.accept_encoding))
            if any(name.lower() == "accept-encoding" for name, _ in self.headers):
                raise UsageError("Accept-Encoding is given twice: as `accept_encoding` and as a header; keep one")
        if self.api_key:  # the key's header and a --header of the same name: both were sent, two credentials
            refuse_second_credential(self.headers, (self.api,))
        if self.max_tokens is not None and not (isinstance(self.max_tokens, int) and self.max_tokens >= 1):
            raise UsageError(f"`max_tokens` must be a whole number >= 1, not {self.max_tokens}")
        for name in ("connect_timeout_s", "first_byte_timeout_s", "idle_timeout_s", "total_timeout_s"):
            value = getattr(self, name)
            if not value > 0 or value == float("inf"):
                field_name = name.removesuffix("_s")
                raise UsageError(f"`{field_name}` must be a number of seconds > 0, not {value}")

    @property
    def target(self) -> Target:
        """The URL as given when it is a full endpoint; a base URL gets the format's route (wire/apis.py)."""
        if self.api is Api.OPENAI:
            return parse_target(self.url)  # a base URL gets /chat/completions, as it always has
        base = parse_target(self.url, default_path="")  # host and port checked, the path and query as given
        return dataclasses.replace(base, path=endpoint_target(base.path, self.api, self.model))

    @property
    def connect_deadline_s(self) -> float:
        """What connecting (TCP and TLS) may take: --connect-timeout, and never past --total-timeout."""
        return min(self.connect_timeout_s, self.total_timeout_s)


def new_stream_id() -> str:
    return "tp-" + os.urandom(8).hex()  # 16 random hex digits, as uuid4().hex[:16] gave, without the UUID object


def request_parts(cfg: ProbeConfig, stream_id: str) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The format's smallest streaming request (wire/request.py): its headers, with the stream id and the API key,
    and its JSON body."""
    api = cfg.api
    body = stream_body(api, model=cfg.model, prompt=cfg.prompt, max_tokens=cfg.max_tokens, stream_id=stream_id)
    body.update(cfg.extra_body)
    key_headers = api_headers(api, stream_id, cfg.api_key)
    headers = [key_headers[0], *cfg.headers, *key_headers[1:]]  # the stream id first, the key last, as always
    if cfg.accept_encoding is not None:
        headers.insert(1, ("Accept-Encoding", cfg.accept_encoding))
    return headers, body


def request_bytes(cfg: ProbeConfig, target: Target, stream_id: str) -> bytes:
    """The HTTP/1.1 request, written by hand."""
    headers, body = request_parts(cfg, stream_id)
    accept = SPECS[cfg.api].content_type
    return build_json_request(
        target.host_header, target.path, body, headers=headers, keep_alive=cfg.keep_alive, accept=accept
    )


class StreamRequests:
    """`request_bytes(cfg, cfg.target, stream_id)` for every stream of one config, built once: the request made
    with a placeholder id of a stream id's length, the stream's id swapped in by one bytes.replace (the load client
    sends one per stream: ~60 µs of JSON and headers each, the URL parsed again, otherwise). Used only where two
    sample ids prove the swap gives the bytes request_bytes builds (an id that needs no escaping and changes no
    length: none in a prompt that holds the placeholder, say); otherwise, and for an id of another length, each
    request is built."""

    def __init__(self, cfg: ProbeConfig) -> None:
        self.cfg = cfg
        self.target = cfg.target  # parsed once
        self._placeholder = b""
        self._template: bytes | None = None
        self._tried = False  # the template is made on the first request (a WebSocket or HTTP/3 worker asks none)

    def of(self, stream_id: str) -> bytes:
        """The request of the stream `stream_id`."""
        if not self._tried:
            self._tried = True
            self._template = self._made()
        if self._template is None or len(stream_id) != len(self._placeholder):
            return request_bytes(self.cfg, self.target, stream_id)
        return self._template.replace(self._placeholder, stream_id.encode())

    def _made(self) -> bytes | None:
        placeholder = new_stream_id()
        self._placeholder = placeholder.encode()
        template = request_bytes(self.cfg, self.target, placeholder)
        for sample in (new_stream_id(), new_stream_id()):
            if template.replace(self._placeholder, sample.encode()) != request_bytes(self.cfg, self.target, sample):
                return None
        return template


@dataclass(frozen=True, slots=True)
class Woke:
    """One wake-up of the client that read something: when the read returned, how many frames of the stream it
    completed, and whether the peer ended the connection (the recorder has made of that what it means)."""

    t_ns: int
    frames: int
    closed: bool = False


class ReadSource(Protocol):
    """The read loop's transport seam: the next wake-up, whatever carries the bytes (TCP or TLS: SocketReads, for
    HTTP/1.1 and HTTP/2; QUIC: probe/h3stream.py; WebSocket messages: probe/wsstream.py). A source records what it
    reads into the stream's TraceRecorder; read_until_done holds the deadlines and the head check, the same for all."""

    def next_read(self, now_ns: int, until_ns: int) -> Woke | None:
        """Wait from `now_ns` at most until `until_ns` for the next read and record it. None: none came (the wait
        ran out, or woke for the transport's own timers): the loop checks its deadlines and asks again."""
        ...

    def error_preview(self, deadline: int) -> str:
        """The first bytes of an error answer's body (read within PREVIEW_S and `deadline`, or what came)."""
        ...


class StreamReads(Protocol):
    """What one protocol makes of the probe's reads over a Transport: HTTP/1.1 (probe/stream.py's H1Reads) or HTTP/2
    (probe/h2stream.py). SocketReads and read_body_preview hold the socket and the bounds, the same for both."""

    def feed(self, t_ns: int, data: bytes) -> int:
        """Record one arrival's bytes; returns how many frames of the stream they completed."""
        ...

    def closed(self, t_ns: int) -> None:
        """The peer closed the connection: the end of the response, or an error if that cut it short."""
        ...

    def preview_feed(self, data: bytes) -> tuple[bytes, bool]:
        """One read of an error response: its body bytes, and whether the response has ended."""
        ...


@dataclass(slots=True)
class SocketReads:
    """The ReadSource over a Transport: one recv() and, over TLS, the rest of its wake-up (SocketTransport.drain);
    `reads` makes the protocol's sense of the bytes."""

    transport: Transport
    reads: StreamReads
    rec: TraceRecorder
    clock: Clock

    def next_read(self, now_ns: int, until_ns: int) -> Woke | None:
        try:
            data = self.transport.recv((until_ns - now_ns) / 1e9)
        except TimeoutError:
            return None  # the loop names the deadline that passed (a transport may wake early)
        t = self.clock()  # the arrival's time: when the first read returned
        if not data:
            self.reads.closed(t)
            return Woke(t, 0, closed=True)
        data += self.transport.drain()
        return Woke(t, self.reads.feed(t, data))

    def error_preview(self, deadline: int) -> str:
        return read_body_preview(self.transport, self.rec, self.reads, self.clock, deadline)


def network_error(exc: ConnectionResetError | BrokenPipeError | ssl.SSLError) -> NetworkError:
    """The probe's error for a socket's: a reset, or a TLS session the peer (or a stopping monitor) ended after the
    handshake; it carries what `exc` carried (the stream's end, the trace so far: riders.py)."""
    if isinstance(exc, ssl.SSLError):
        return handed_on(exc, NetworkError(f"the TLS connection failed: {getattr(exc, 'reason', None) or exc}"))
    return handed_on(exc, NetworkError(f"the connection was reset: {exc.strerror}"))


def read_until_done(
    rec: TraceRecorder, source: ReadSource, cfg: ProbeConfig, clock: Clock, deadline: int, *, head_checked: bool = False
) -> None:
    """Reads until the response ends, every client's loop (HTTP/1.1, HTTP/2, HTTP/3, WebSocket). Each read waits at
    most until the nearest deadline (first byte or idle, and total), so no peer, however it spaces its bytes, keeps
    the probe past one. A read that completes no frame (over HTTP/2: none of this stream's) is silence. What a
    stream's end raises (a reset, a body cut short, an error status) carries the end (wire/ending.py STREAM_END;
    the trace's `end` too) and the trace so far (probe/trace.py PARTIAL_TRACE). `head_checked`: the head was
    checked before (a WebSocket's 101)."""
    try:
        _read_until_done(rec, source, cfg, clock, deadline, head_checked)
    except (PeerError, OSError) as exc:
        now = clock()
        if STREAM_END.of(exc) is None:
            STREAM_END.attach(exc, rec.cut(exc, now))
        rec.trace.t_end_ns = rec.trace.t_end_ns or now  # the stream so far goes with the error, ended now
        PARTIAL_TRACE.attach(exc, rec.trace)
        raise


def _read_until_done(
    rec: TraceRecorder, source: ReadSource, cfg: ProbeConfig, clock: Clock, deadline: int, checked_head: bool
) -> None:
    sent = rec.trace.t_sent_ns
    last_frame = sent
    idle_ns = int(cfg.idle_timeout_s * 1e9)
    first_byte_by = sent + int(cfg.first_byte_timeout_s * 1e9)
    while not rec.complete:
        first = rec.trace.t_first_byte_ns is None
        phase_by = first_byte_by if first else last_frame + idle_ns
        now = clock()
        if now >= deadline or now >= phase_by:
            timeout_error(rec, cfg, first, total=now >= deadline)
        woke = source.next_read(now, min(phase_by, deadline))
        if woke is None:
            continue
        if woke.closed:
            break
        t = woke.t_ns
        if woke.frames:
            last_frame = t
        elif not first and t - last_frame > idle_ns:
            timeout_error(rec, cfg, first=False, total=False)  # bytes, but no frame completes: still silence
        if t >= deadline:
            timeout_error(rec, cfg, first, total=True)
        if not checked_head and rec.trace.head is not None:
            checked_head = True
            check_head(rec, cfg, lambda: source.error_preview(deadline))


# Transfer codings the probe reads: none, and HTTP/1.1's own chunked framing (de-framed by the parser). Content
# codings are decoded by the trace (wire/contentcoding.py); one it cannot decode was raised there.
READABLE_TRANSFER_CODINGS = frozenset({"", "identity", "chunked"})


def check_head(rec: TraceRecorder, cfg: ProbeConfig, body_preview: Callable[[], str]) -> None:
    """A 2xx answer in the format's Content-Type and a transfer coding we read, or the error that says which not
    (a non-2xx with the first bytes of its body: `body_preview` reads them)."""
    head = rec.trace.head
    assert head is not None
    if not 200 <= head.status < 300:
        preview = body_preview()
        error = BadRequest if head.status in BAD_REQUEST_STATUSES else HTTPStatusError
        raise error(f"HTTP {head.status} from {cfg.target.origin}{_redirect_note(head)}: {preview}")
    expected = SPECS[cfg.api].content_type
    if head.content_type != expected:
        shown = head.content_type or "none"
        raise ContentTypeError(f"expected Content-Type {expected}, got {shown}{_format_hint(cfg.api, shown)}")
    codings = [c.strip().lower() for c in (head.header("Transfer-Encoding") or "").split(",")]
    unread = [c for c in codings if c not in READABLE_TRANSFER_CODINGS]
    if unread:
        raise ContentEncodingError(
            f"the response is Transfer-Encoding: {', '.join(unread)}, a transfer coding tokenpath does not decode "
            "(only chunked), so its frames and arrivals cannot be counted",
            reason="unsupported",
        )


def _format_hint(api: Api, content_type: str) -> str:
    """Why the Content-Type may differ: another format's (say which --api reads it), or no stream at all."""
    others = [a for a in apis_for_content_type(content_type) if a is not api]
    if not others:
        return " (is 'stream' honoured?)"
    if SPECS[others[0]].framing is Framing.SSE:
        names = " or ".join(a.value for a in others)
        return f" (an SSE stream, which --api {api.value} does not read: pass --api {names})"
    return f" (the {others[0].value} format: pass --api {others[0].value})"


def _redirect_note(head: ResponseHead) -> str:
    """A 3xx is never followed (the probe measures the URL it was given; following could also reach an address
    the user never named): the message says where it pointed, without credentials or query (a signed URL's token)
    and printable, cut short."""
    location = head.header("location") if 300 <= head.status < 400 else None
    if location is None:
        return ""
    bare = re.sub(r"//[^/?#]*@", "//", re.split(r"[?#]", location, maxsplit=1)[0])
    shown = "".join(c if c.isprintable() else "?" for c in bare[:200])
    return f" (a redirect to {shown!r}, not followed)"


PREVIEW_S = 1.0  # how long an error body is read for its first bytes


def read_body_preview(transport: Transport, rec: TraceRecorder, reads: StreamReads, clock: Clock, deadline: int) -> str:
    """The first bytes of an error body, read for at most PREVIEW_S in all (and never past --total-timeout):
    enough to show the server's reason, however slowly it sends it."""
    body = bytearray(rec.body_preview)
    ended = rec.complete
    until = min(clock() + int(PREVIEW_S * 1e9), deadline)
    with contextlib.suppress(TimeoutError, OSError, ProtocolError, NetworkError):
        while not ended and len(body) < ERROR_BODY_PREVIEW:
            left = until - clock()
            if left <= 0:
                break
            data = transport.recv(left / 1e9)
            if not data:
                break
            chunk, ended = reads.preview_feed(data)
            body += chunk[:ERROR_BODY_PREVIEW]
    text = bytes(body[:ERROR_BODY_PREVIEW]).decode("utf-8", "replace").strip()
    return text or "(empty body)"


def timeout_error(rec: TraceRecorder | None, cfg: ProbeConfig, first: bool, total: bool) -> NoReturn:
    frames = rec.trace.frame_count if rec is not None else 0
    if total:
        raise TotalTimeout(f"the stream did not end within `total_timeout` {cfg.total_timeout_s} s ({frames} frames)")
    if first:
        raise FirstByteTimeout(f"no response byte within `first_byte_timeout` {cfg.first_byte_timeout_s} s")
    raise IdleTimeout(f"no frame for `idle_timeout` {cfg.idle_timeout_s} s after {frames} frames")
