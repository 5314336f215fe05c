"""The probe: writes one request by hand on a raw socket and timestamps every recv() as it returns."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.errors import (
    ContentTypeError,
    FirstByteTimeout,
    HTTPStatusError,
    IdleTimeout,
    NetworkError,
    ProtocolError,
    TotalTimeout,
    UsageError,
)
from tokenpath.probe.trace import ERROR_BODY_PREVIEW, Trace, TraceRecorder
from tokenpath.probe.transport import Target, TLSOptions, Transport, open_connection, parse_target
from tokenpath.wire.request import DEFAULT_PROMPT, STREAM_HEADER, build_json_request, chat_body


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

    def __post_init__(self) -> None:
        for name in ("connect_timeout_s", "first_byte_timeout_s", "idle_timeout_s", "total_timeout_s"):
            value = getattr(self, name)
            if not value > 0 or value == float("inf"):
                field_name = name.removesuffix("_s")
                raise UsageError(f"`{field_name}` must be a number of seconds > 0, not {value}")

    @property
    def target(self) -> Target:
        return parse_target(self.url)


Connector = Callable[[Target, ProbeConfig], Transport]


def _connect(target: Target, cfg: ProbeConfig) -> Transport:
    return open_connection(target, connect_timeout_s=cfg.connect_timeout_s, tls=cfg.tls)


def new_stream_id() -> str:
    return "tp-" + uuid.uuid4().hex[:16]


def request_bytes(cfg: ProbeConfig, target: Target, stream_id: str) -> bytes:
    body = chat_body(model=cfg.model, prompt=cfg.prompt, max_tokens=cfg.max_tokens, stream_id=stream_id)
    body.update(cfg.extra_body)
    headers = [(STREAM_HEADER, stream_id), *cfg.headers]
    if cfg.api_key:
        headers.append(("Authorization", f"Bearer {cfg.api_key}"))
    return build_json_request(target.host_header, target.path, body, headers=headers, keep_alive=cfg.keep_alive)


def probe_stream(
    cfg: ProbeConfig,
    *,
    stream_id: str | None = None,
    clock: Clock = monotonic_ns,
    connect: Connector = _connect,
) -> Trace:
    """Run one streamed request to completion and return its trace. Raises a PeerError subclass on failure."""
    target = cfg.target
    stream_id = stream_id or new_stream_id()
    payload = request_bytes(cfg, target, stream_id)
    transport = connect(target, cfg)
    try:
        transport.sendall(payload)
        recorder = TraceRecorder(stream_id, clock())
        _read_until_done(transport, recorder, cfg, clock)
        return recorder.trace
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise NetworkError(f"the connection was reset: {exc.strerror}") from None
    finally:
        transport.close()


def _read_until_done(transport: Transport, rec: TraceRecorder, cfg: ProbeConfig, clock: Clock) -> None:
    sent = rec.trace.t_sent_ns
    deadline = sent + int(cfg.total_timeout_s * 1e9)
    last_frame = sent
    checked_head = False
    idle_ns = int(cfg.idle_timeout_s * 1e9)
    while not rec.complete:
        first = rec.trace.t_first_byte_ns is None
        # A constant per phase, so the transport sets it once: bytes silent for this long end the wait.
        limit_s = min(cfg.first_byte_timeout_s if first else cfg.idle_timeout_s, cfg.total_timeout_s)
        try:
            data = transport.recv(limit_s)
        except TimeoutError:
            _timeout(rec, cfg, first, total=clock() >= deadline)
        t = clock()  # the arrival's time: when the first read returned
        if not data:
            rec.on_eof(t)
            break
        data += transport.drain()  # over TLS, the rest of the same wake-up (see SocketTransport.drain)
        if rec.on_read(t, data):
            last_frame = t
        elif not first and t - last_frame > idle_ns:
            _timeout(rec, cfg, first=False, total=False)  # bytes, but no frame completes: still silence
        if t >= deadline:
            _timeout(rec, cfg, first, total=True)
        if not checked_head and rec.trace.head is not None:
            checked_head = True
            _check_head(transport, rec, cfg)


def _check_head(transport: Transport, rec: TraceRecorder, cfg: ProbeConfig) -> None:
    head = rec.trace.head
    assert head is not None
    if not 200 <= head.status < 300:
        preview = _body_preview(transport, rec)
        raise HTTPStatusError(f"HTTP {head.status} from {cfg.target.origin}: {preview}")
    if head.content_type != "text/event-stream":
        shown = head.content_type or "none"
        raise ContentTypeError(f"expected Content-Type text/event-stream, got {shown} (is 'stream' honoured?)")


def _body_preview(transport: Transport, rec: TraceRecorder) -> str:
    """The first bytes of an error body, read for at most a second: enough to show the server's reason."""
    parser = rec.response
    body = bytearray(rec.body_preview)
    try:
        while not parser.complete and len(body) < ERROR_BODY_PREVIEW:
            data = transport.recv(1.0)
            if not data:
                break
            body += parser.feed(data)
    except (TimeoutError, OSError, ProtocolError):
        pass
    text = bytes(body[:ERROR_BODY_PREVIEW]).decode("utf-8", "replace").strip()
    return text or "(empty body)"


def _timeout(rec: TraceRecorder, cfg: ProbeConfig, first: bool, total: bool) -> None:
    frames = len(rec.trace.frames)
    if total:
        raise TotalTimeout(f"the stream did not end within --total-timeout {cfg.total_timeout_s} s ({frames} frames)")
    if first:
        raise FirstByteTimeout(f"no response byte within --first-byte-timeout {cfg.first_byte_timeout_s} s")
    raise IdleTimeout(f"no frame for --idle-timeout {cfg.idle_timeout_s} s after {frames} frames")
