"""One probe of one route, and one cycle of a target (its routes back to back), as outcomes: what was measured, or
the reason it could not be. The probe is `tokenpath probe`'s own (same raw socket, same arrivals, TLS drain
included); nothing here raises for a peer's fault.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise

from tokenpath.clock import ns_to_ms
from tokenpath.errors import ConnectError, TokenpathError
from tokenpath.monitor.config import Target
from tokenpath.probe.client import ProbeConfig, new_stream_id
from tokenpath.probe.metrics import RunMetrics, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace, TraceLimits
from tokenpath.probe.transport import SocketTransport, Transport, open_connection
from tokenpath.probe.transport import Target as Endpoint
from tokenpath.wire.ending import STREAM_END, StreamEnd
from tokenpath.wire.httpversion import HttpVersion

log = logging.getLogger("tokenpath.monitor")

OK = "ok"
NO_CONTENT = "no_content"  # the stream ended cleanly without a content frame: no TTFT to report
# ... and its frames were JSON in another API format (Anthropic, Responses): no TTFT until that format is read
UNSUPPORTED_FORMAT = "unsupported_format"
INTERNAL = "internal"  # a bug of ours, logged with its traceback; the monitor goes on
INVALID_UTF8 = "invalid_utf8"  # frames that are not UTF-8: an event stream always is, so the peer is broken
WEBSOCKET_NOT_CARRIED = "websocket_not_carried"  # transport = "websocket": the path answered the upgrade, not 101


def reason_of(exc: BaseException) -> str:
    """The outcome label of a failure: the error class's name in snake case, as the exit-code table lists it
    (ConnectError -> connect, HTTPStatusError -> http_status, FirstByteTimeout -> first_byte_timeout)."""
    if not isinstance(exc, TokenpathError):
        return INTERNAL
    name = type(exc).__name__.removesuffix("Error") or type(exc).__name__
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    target: str
    route: str
    stream_id: str
    outcome: str  # OK, NO_CONTENT or a reason_of() label
    message: str  # the failure, one line; "" when ok
    metrics: RunMetrics | None  # None when the probe failed
    gaps_s: tuple[float, ...]  # between consecutive arrivals
    started_unix: float
    http_version: str = "1.1"  # "2" / "3" for an HTTP/2 / HTTP/3 probe: the trace's, or what was asked if it failed
    # How the stream ended (wire/ending.py), also when the probe failed on it (a reset, a body cut short, an error
    # status); None when no stream began. A cut stream is never OK: its outcome is its kind (or its error's reason).
    end: StreamEnd | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == OK


class Aborter:
    """The transports of probes in flight, and the sockets of probes still connecting (a TLS handshake a peer never
    answers), so a stopping monitor can end them at once instead of waiting out their timeouts. Thread-safe: probes
    register from worker threads, stop() comes from the main thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[_Tracked] = set()
        self._connecting: set[socket.socket] = set()
        self.stopped = threading.Event()

    def connect(self, target: Endpoint, cfg: ProbeConfig) -> Transport:
        mine: list[socket.socket] = []

        def watch(sock: socket.socket) -> None:
            with self._lock:
                self._connecting.add(sock)
                mine.append(sock)
                if self.stopped.is_set():
                    _shutdown(sock)

        try:
            inner = open_connection(
                target,
                connect_timeout_s=cfg.connect_deadline_s,
                tls=cfg.tls,
                watch=watch,
                drain_max_bytes=MONITOR_DRAIN_BYTES,
            )
        finally:
            with self._lock:
                self._connecting.difference_update(mine)
        transport = _Tracked(inner, self)
        with self._lock:
            self._open.add(transport)
            if self.stopped.is_set():
                transport.abort()
        return transport

    def forget(self, transport: _Tracked) -> None:
        with self._lock:
            self._open.discard(transport)

    def stop(self) -> None:
        with self._lock:
            self.stopped.set()
            for transport in self._open:
                transport.abort()
            for sock in self._connecting:
                _shutdown(sock)

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._open)


def _shutdown(sock: socket.socket) -> None:
    """Ends a connect or handshake blocked in another thread (SocketTransport.abort's way: the plain socket's
    shutdown, which an SSLSocket's own would refuse before its handshake)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Tracked:
    """A probe's transport that leaves the aborter's set when the probe closes it."""

    def __init__(self, inner: SocketTransport, aborter: Aborter) -> None:
        self._inner = inner
        self._aborter = aborter

    def sendall(self, data: bytes) -> None:
        self._inner.sendall(data)

    def recv(self, timeout_s: float) -> bytes:
        return self._inner.recv(timeout_s)

    def drain(self) -> bytes:
        return self._inner.drain()

    def abort(self) -> None:
        self._inner.abort()

    def close(self) -> None:
        self._aborter.forget(self)
        self._inner.close()


def unshown(text: str, cfg: ProbeConfig) -> str:
    """`text` (a failure's message: a peer's error body among it) with the probe's key masked: a page that echoes the
    request's headers back, as debug and WAF pages do, put the key in the log line."""
    return text.replace(cfg.api_key, "***") if cfg.api_key else text


Prober = Callable[[ProbeConfig, str], Trace]  # (config, stream id) -> trace; raises a TokenpathError


def probe_route(target: str, route: str, cfg: ProbeConfig, prober: Prober) -> ProbeOutcome:
    stream_id = new_stream_id()
    started = time.time()
    try:
        trace = prober(cfg, stream_id)
    except Exception as exc:
        outcome = reason_of(exc)
        if outcome == INTERNAL:
            log.exception("probe of %s (%s) failed inside tokenpath", target, route)
        message = " ".join(unshown(str(exc), cfg).split())[:300] or type(exc).__name__
        end = STREAM_END.of(exc)
        return ProbeOutcome(target, route, stream_id, outcome, message, None, (), started, asked_version(cfg), end)
    metrics = run_metrics(trace)
    arrivals = [r.t_ns for r in trace.reads if r.frames > 0]  # the kept ones: MONITOR_LIMITS
    gaps = tuple(ns_to_ms(b - a) / 1000 for a, b in pairwise(arrivals))
    if trace.ws is not None and not trace.ws.upgraded:  # a result of the path, not a stream: no figures
        outcome, message = WEBSOCKET_NOT_CARRIED, trace.ws.note
    elif trace.invalid_utf8_frames:
        outcome = INVALID_UTF8
        message = f"{trace.invalid_utf8_frames} of {metrics.frames} frames were not UTF-8 (an event stream always is)"
    elif metrics.ttft_ms is None and trace.foreign_frames:  # its end is a format's this reader does not know
        outcome, message = UNSUPPORTED_FORMAT, metrics.ttft_note
    elif trace.end is not None and trace.end.cut:  # a short stream, whatever it measured: never a whole one
        outcome, message = trace.end.kind.value, trace.end.describe()
    elif metrics.ttft_ms is not None:
        outcome, message = OK, ""
    else:
        outcome, message = NO_CONTENT, f"the stream ended after {metrics.frames} frames without a content frame"
    return ProbeOutcome(
        target, route, stream_id, outcome, message, metrics, gaps, started, trace.http_version, trace.end
    )


def asked_version(cfg: ProbeConfig) -> str:
    """The HTTP version a probe speaks (`--http2` and `--http3` never fall back: a refusal fails the probe)."""
    return cfg.http_version.value


# A probe's figures come from the trace's counts; the monitor reads no frame and only the arrivals' times (for the
# gaps), so each of its probes keeps at most this much of a stream, however much a target sends. One event may
# hold 256 KB (a chat chunk is a few hundred bytes, a tool-call delta a few KB): the probe command's 8 MB suits a
# stream a user reads once, but the monitor holds max_concurrency of them for as long as it runs, and an allocator
# keeps what a process once held: 100 endless events at 8 MB would be 800 MB.
MONITOR_LIMITS = TraceLimits(reads=4096, frames=0, frame_bytes=0, event_bytes=256 << 10)
# What a probe's answer may take in all: a target that floods frames was parsed at a core's speed until its total
# timeout. A token is one frame of well under a KB in every format (a Responses event with its ids, a Bedrock
# message in base64: ~0.5 KB); 64 KB per token asked for is room for the stub's largest padded frame too
# (stub/config.py MAX_FRAME_BYTES), and a flood's 32 tokens' worth is parsed in a fraction of a second.
RESPONSE_BYTES_PER_TOKEN = 64 << 10
MIN_RESPONSE_BYTES = 1 << 20  # the head, a role frame, keep-alives, a usage frame: whatever max_tokens says
UNASKED_RESPONSE_BYTES = 64 << 20  # no max_tokens sent: the server's own default length, bounded all the same


def monitor_limits(cfg: ProbeConfig) -> TraceLimits:
    """MONITOR_LIMITS with the answer's bound for what this probe asked for."""
    if cfg.max_tokens is None:
        bound = UNASKED_RESPONSE_BYTES
    else:
        bound = max(MIN_RESPONSE_BYTES, cfg.max_tokens * RESPONSE_BYTES_PER_TOKEN)
    return replace(MONITOR_LIMITS, response_bytes=bound)


# The most one TLS wake-up takes (transport.DRAIN_MAX_BYTES, 1 MB, for the probe command). What one read holds is
# parsed into frames at once, ~200 B of objects per frame whatever its size: 1 MB of a flood's 9-byte frames is
# ~25 MB per probe, times max_concurrency. A held burst worth measuring is a few KB, so 64 KB loses nothing.
MONITOR_DRAIN_BYTES = 64 << 10


def default_prober(aborter: Aborter) -> Prober:
    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        if cfg.http_version is HttpVersion.HTTP3:
            return quic_probe(cfg, stream_id, aborter)
        return probe_stream(cfg, stream_id=stream_id, connect=aborter.connect, limits=monitor_limits(cfg))

    return prober


def quic_probe(cfg: ProbeConfig, stream_id: str, aborter: Aborter) -> Trace:
    """An HTTP/3 target's probe: QUIC opens its own UDP socket (probe/h3stream.py), which the aborter's TCP
    connector cannot hand it, so a stopping monitor cannot end it early: it ends within the target's own total
    timeout (the probe's deadline). A probe asked for after the stop is not started."""
    if aborter.stopped.is_set():
        raise ConnectError("the monitor is stopping: probe not started")
    return probe_stream(cfg, stream_id=stream_id, limits=monitor_limits(cfg))


def browser_prober(cfg: ProbeConfig, stream_id: str) -> Trace:
    """A `client = "chromium"` target's probe: one stream in a headless Chromium of its own (probe/browser.py),
    bounded by the target's total timeout."""
    from tokenpath.probe.browser import browser_trace

    return browser_trace(cfg, stream_id, monitor_limits(cfg))


def probe_cycle(target: Target, prober: Prober, direct_first: bool) -> list[ProbeOutcome]:
    """The target's routes one after the other (one stream at a time per target), in the order given: the caller
    alternates it so neither route always probes a warmer upstream."""
    if target.spec.client == "chromium":
        prober = browser_prober
    routes = list(target.routes.items())
    if direct_first:
        routes.reverse()
    return [probe_route(target.name, route, cfg, prober) for route, cfg in routes]


def added_ttft_s(cycle: list[ProbeOutcome]) -> float | None:
    """TTFT through the path minus TTFT around it, from one cycle; None unless both routes were whole streams (ok:
    a cut stream's TTFT is no measurement, whatever it saw before the cut)."""
    by_route = {o.route: o for o in cycle}
    via, direct = by_route.get("via"), by_route.get("direct")
    if via is None or direct is None or not (via.ok and direct.ok):
        return None
    if via.metrics is None or direct.metrics is None:
        return None
    if via.metrics.ttft_ms is None or direct.metrics.ttft_ms is None:
        return None
    return (via.metrics.ttft_ms - direct.metrics.ttft_ms) / 1000
