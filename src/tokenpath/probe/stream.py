"""The probe: writes one request by hand on a raw socket and timestamps every recv() as it returns. probe_stream
runs one stream to its end over HTTP/1.1 (here), HTTP/2 (probe/h2stream.py) or HTTP/3 (probe/h3stream.py), with
probe/client.py's config, request and read loop; over WebSocket (probe/wsstream.py) under the client's fallback
policy (probe/wsfallback.py), here too since its fallback is this module's HTTP/1.1 stream."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tokenpath.clock import Clock, monotonic_ns, ns_to_ms
from tokenpath.errors import ConnectTimeout, UsageError
from tokenpath.probe.client import (
    ProbeConfig,
    SocketReads,
    network_error,
    new_stream_id,
    read_until_done,
    request_bytes,
    timeout_error,
)
from tokenpath.probe.h2stream import probe_h2
from tokenpath.probe.trace import DEFAULT_LIMITS, Trace, TraceLimits, TraceRecorder
from tokenpath.probe.transport import Target, Transport, open_connection
from tokenpath.probe.wsfallback import NO_FALLBACK
from tokenpath.wire.carrier import SSE, WEBSOCKET
from tokenpath.wire.httpversion import HttpVersion

Connector = Callable[[Target, ProbeConfig], Transport]


def _connect(target: Target, cfg: ProbeConfig) -> Transport:
    return open_connection(target, connect_timeout_s=cfg.connect_deadline_s, tls=cfg.tls)


def probe_stream(
    cfg: ProbeConfig,
    *,
    stream_id: str | None = None,
    clock: Clock = monotonic_ns,
    connect: Connector = _connect,
    limits: TraceLimits = DEFAULT_LIMITS,
) -> Trace:
    """Run one streamed request to completion and return its trace. Raises a PeerError subclass on failure.

    --total-timeout counts from here: connecting, the TLS handshake, the head and the body all fall inside it."""
    if cfg.transport == WEBSOCKET:
        return _websocket(cfg, stream_id or new_stream_id(), clock, connect, limits)
    target = cfg.target
    stream_id = stream_id or new_stream_id()
    h2 = cfg.http_version is HttpVersion.HTTP2
    payload = b"" if h2 else request_bytes(cfg, target, stream_id)
    started = clock()
    if cfg.http_version is HttpVersion.HTTP3:  # its own UDP socket and handshake: probe/h3stream.py
        if connect is not _connect:  # a namespace's or a test's TCP connector: HTTP/3 would bypass it unseen
            raise UsageError("HTTP/3 opens its own UDP socket on the host: no other connector (a link) takes it yet")
        from tokenpath.probe.h3stream import probe_h3  # aioquic (~0.3 s, ~10 MB) is no cost to a TCP probe

        return probe_h3(cfg, stream_id, clock, limits, started)
    try:
        transport = connect(target, cfg)
    except ConnectTimeout:
        if cfg.total_timeout_s < cfg.connect_timeout_s:  # the total's deadline was the one that passed
            timeout_error(None, cfg, first=True, total=True)
        raise
    deadline = started + int(cfg.total_timeout_s * 1e9)
    try:
        if h2:
            return probe_h2(transport, cfg, target, stream_id, clock, limits, deadline)
        sent = clock()  # before the write (probe/trace.py SENT_RULE)
        transport.sendall(payload)
        recorder = TraceRecorder(stream_id, sent, limits, api=cfg.api)
        read_until_done(recorder, SocketReads(transport, H1Reads(recorder), recorder, clock), cfg, clock, deadline)
        return recorder.trace
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as exc:  # its end and the trace so far go with it
        raise network_error(exc) from None
    finally:
        transport.close()


def _websocket(
    cfg: ProbeConfig,
    stream_id: str,
    clock: Clock,
    connect: Connector,
    limits: TraceLimits,
    sleep: Callable[[float], None] = time.sleep,
) -> Trace:
    """--transport websocket under the client's fallback policy (probe/wsfallback.py): up to its attempts upgrades,
    its waits between them; when every one failed, the same request (the same stream id, so the stub's audit joins
    it) over SSE, whose trace carries the last refusal's WsFigures and the cost: the first attempt -> the SSE
    stream's first content event. A stream that upgraded and then failed is never retried: the agents surface it."""
    from tokenpath.probe.wsstream import probe_ws  # wsproto is no cost to an HTTP probe

    policy = cfg.ws_fallback
    if not policy.enabled:
        return probe_ws(cfg, stream_id=stream_id, clock=clock, connect=connect, limits=limits)
    started = clock()
    for attempt in range(1, policy.attempts + 1):
        if attempt > 1:
            sleep(policy.delay_s(attempt - 1))
        trace = probe_ws(
            cfg,
            stream_id=stream_id,
            clock=clock,
            connect=connect,
            limits=limits,
            upgrade_timeout_s=policy.upgrade_timeout_s,
        )
        assert trace.ws is not None
        if trace.ws.upgraded:
            trace.ws = replace(trace.ws, attempts=attempt)
            return trace
    refused = trace.ws
    assert refused is not None
    sse = probe_stream(
        replace(cfg, transport=SSE, ws_fallback=NO_FALLBACK),
        stream_id=stream_id,
        clock=clock,
        connect=connect,
        limits=limits,
    )
    first = sse.t_first_content_ns
    cost = ns_to_ms(first - started) if first is not None else None
    sse.ws = replace(refused, attempts=policy.attempts, fell_back=True, fallback_ms=cost)
    return sse


@dataclass(slots=True)
class H1Reads:
    """HTTP/1.1: the recorder parses the bytes itself."""

    rec: TraceRecorder

    def feed(self, t_ns: int, data: bytes) -> int:
        return self.rec.on_read(t_ns, data)

    def closed(self, t_ns: int) -> None:
        self.rec.on_eof(t_ns)

    def preview_feed(self, data: bytes) -> tuple[bytes, bool]:
        parser = self.rec.response
        return parser.feed(data), parser.complete
