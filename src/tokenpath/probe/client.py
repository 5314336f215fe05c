"""The probe: writes one request by hand on a raw socket and timestamps every recv() as it returns."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.errors import (
    BAD_REQUEST_STATUSES,
    BadRequest,
    ConnectTimeout,
    ContentEncodingError,
    ContentTypeError,
    FirstByteTimeout,
    HTTPStatusError,
    IdleTimeout,
    NetworkError,
    ProtocolError,
    TotalTimeout,
    UsageError,
)
from tokenpath.probe.trace import DEFAULT_LIMITS, ERROR_BODY_PREVIEW, Trace, TraceLimits, TraceRecorder
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

    @property
    def connect_deadline_s(self) -> float:
        """What connecting (TCP and TLS) may take: --connect-timeout, and never past --total-timeout."""
        return min(self.connect_timeout_s, self.total_timeout_s)


Connector = Callable[[Target, ProbeConfig], Transport]


def _connect(target: Target, cfg: ProbeConfig) -> Transport:
    return open_connection(target, connect_timeout_s=cfg.connect_deadline_s, tls=cfg.tls)


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
    limits: TraceLimits = DEFAULT_LIMITS,
) -> Trace:
    """Run one streamed request to completion and return its trace. Raises a PeerError subclass on failure.

    --total-timeout counts from here: connecting, the TLS handshake, the head and the body all fall inside it."""
    target = cfg.target
    stream_id = stream_id or new_stream_id()
    payload = request_bytes(cfg, target, stream_id)
    started = clock()
    try:
        transport = connect(target, cfg)
    except ConnectTimeout:
        if cfg.total_timeout_s < cfg.connect_timeout_s:  # the total's deadline was the one that passed
            _timeout(None, cfg, first=True, total=True)
        raise
    try:
        transport.sendall(payload)
        recorder = TraceRecorder(stream_id, clock(), limits)
        _read_until_done(transport, recorder, cfg, clock, started + int(cfg.total_timeout_s * 1e9))
        return recorder.trace
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise NetworkError(f"the connection was reset: {exc.strerror}") from None
    finally:
        transport.close()


def _read_until_done(transport: Transport, rec: TraceRecorder, cfg: ProbeConfig, clock: Clock, deadline: int) -> None:
    """Reads until the response ends. Each read waits at most until the nearest deadline (first byte or idle, and
    total), so no peer, however it spaces its bytes, keeps the probe past one."""
    sent = rec.trace.t_sent_ns
    last_frame = sent
    checked_head = False
    idle_ns = int(cfg.idle_timeout_s * 1e9)
    first_byte_by = sent + int(cfg.first_byte_timeout_s * 1e9)
    while not rec.complete:
        first = rec.trace.t_first_byte_ns is None
        phase_by = first_byte_by if first else last_frame + idle_ns
        now = clock()
        if now >= deadline or now >= phase_by:
            _timeout(rec, cfg, first, total=now >= deadline)
        try:
            data = transport.recv((min(phase_by, deadline) - now) / 1e9)
        except TimeoutError:
            continue  # the loop's head names the deadline that passed (a transport may wake early)
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
            _check_head(transport, rec, cfg, clock, deadline)


# Codings the probe reads as they are: none, and HTTP/1.1's own chunked framing (de-framed by the parser).
READABLE_CODINGS = frozenset({"", "identity", "chunked"})


def _check_head(transport: Transport, rec: TraceRecorder, cfg: ProbeConfig, clock: Clock, deadline: int) -> None:
    head = rec.trace.head
    assert head is not None
    if not 200 <= head.status < 300:
        preview = _body_preview(transport, rec, clock, deadline)
        error = BadRequest if head.status in BAD_REQUEST_STATUSES else HTTPStatusError
        raise error(f"HTTP {head.status} from {cfg.target.origin}: {preview}")
    if head.content_type != "text/event-stream":
        shown = head.content_type or "none"
        raise ContentTypeError(f"expected Content-Type text/event-stream, got {shown} (is 'stream' honoured?)")
    for name in ("Content-Encoding", "Transfer-Encoding"):
        codings = [c.strip().lower() for c in (head.header(name) or "").split(",")]
        unread = [c for c in codings if c not in READABLE_CODINGS]
        if unread:
            raise ContentEncodingError(
                f"the response is {name}: {', '.join(unread)}, which tokenpath does not decode yet, so its frames "
                "and arrivals cannot be counted (was Accept-Encoding sent? drop that header)"
            )


PREVIEW_S = 1.0  # how long an error body is read for its first bytes


def _body_preview(transport: Transport, rec: TraceRecorder, clock: Clock, deadline: int) -> str:
    """The first bytes of an error body, read for at most PREVIEW_S in all (and never past --total-timeout):
    enough to show the server's reason, however slowly it sends it."""
    parser = rec.response
    body = bytearray(rec.body_preview)
    until = min(clock() + int(PREVIEW_S * 1e9), deadline)
    try:
        while not parser.complete and len(body) < ERROR_BODY_PREVIEW:
            left = until - clock()
            if left <= 0:
                break
            data = transport.recv(left / 1e9)
            if not data:
                break
            body += parser.feed(data)[:ERROR_BODY_PREVIEW]
    except (TimeoutError, OSError, ProtocolError):
        pass
    text = bytes(body[:ERROR_BODY_PREVIEW]).decode("utf-8", "replace").strip()
    return text or "(empty body)"


def _timeout(rec: TraceRecorder | None, cfg: ProbeConfig, first: bool, total: bool) -> NoReturn:
    frames = rec.trace.frame_count if rec is not None else 0
    if total:
        raise TotalTimeout(f"the stream did not end within `total_timeout` {cfg.total_timeout_s} s ({frames} frames)")
    if first:
        raise FirstByteTimeout(f"no response byte within `first_byte_timeout` {cfg.first_byte_timeout_s} s")
    raise IdleTimeout(f"no frame for `idle_timeout` {cfg.idle_timeout_s} s after {frames} frames")
