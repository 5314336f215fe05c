"""probe --transport websocket: one response over a format's WebSocket mode (OpenAI's Responses WebSocket mode), on
the probe's own socket, every recv() timestamped as it returns.

The upgrade is timed apart (its status and time; a path that answers anything but 101 is a result, WsFigures with
`upgraded` false, not an error), then one `response.create` goes out and TTFT counts from its last byte. Each text
message is handed to the same TraceRecorder as the SSE stream's events would be, re-framed as the SSE event it
mirrors (`event: TYPE` / `data: JSON`: the Responses stream names its events by their type), so frames, first
content, frames per read (here: messages per read, the coalescing of WebSocket frames), gaps and the join to the
stub's write log mean what they mean over SSE. The stream ends at the format's final event (the client then closes
1000) or at the server's close: a close before the final event is a cut, recorded with its code.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.errors import ConnectTimeout, FirstByteTimeout, NetworkError
from tokenpath.probe.client import ProbeConfig, new_stream_id, request_parts, timeout_error
from tokenpath.probe.trace import DEFAULT_LIMITS, ERROR_BODY_PREVIEW, Trace, TraceLimits, TraceRecorder
from tokenpath.probe.transport import Target, Transport, open_connection
from tokenpath.probe.wsfigures import WsFigures
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import Framing
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import frame_reader
from tokenpath.wire.websocket import (
    CLOSE_NORMAL,
    CLOSED_UNANSWERED,
    Closed,
    MessageReceived,
    PingReceived,
    Upgraded,
    UpgradeRefused,
    WebSocketEndpoint,
    WebSocketLimits,
    WsEvent,
)

__all__ = ["CREATE_EVENT", "probe_ws", "sse_event"]

CREATE_EVENT = "response.create"
CLOSE_WAIT_S = 1.0  # how long our close waits for the server's (the figures are in already)
REFUSAL_BODY_S = 1.0  # how long a refused upgrade's body is read for its first bytes

Connector = Callable[[Target, ProbeConfig], Transport]


def _connect(target: Target, cfg: ProbeConfig) -> Transport:
    return open_connection(target, connect_timeout_s=cfg.connect_deadline_s, tls=cfg.tls)


def sse_event(text: str) -> bytes:
    """A message as the SSE event it mirrors: its JSON `type` as the event name, the message as its data."""
    kind = None
    try:
        obj = json.loads(text)
        kind = obj.get("type") if isinstance(obj, dict) else None
    except (ValueError, RecursionError):
        pass
    head = f"event: {kind}\n" if isinstance(kind, str) and "\n" not in kind else ""
    return (head + "data: " + text.replace("\n", "\ndata: ") + "\n\n").encode("utf-8")


def probe_ws(
    cfg: ProbeConfig,
    *,
    stream_id: str | None = None,
    clock: Clock = monotonic_ns,
    connect: Connector = _connect,
    limits: TraceLimits = DEFAULT_LIMITS,
    ws_limits: WebSocketLimits | None = None,
    upgrade_timeout_s: float | None = None,
) -> Trace:
    """Upgrade, one response, its end. Raises a PeerError subclass when the network or a deadline fails it.

    `upgrade_timeout_s` (a fallback policy's): no answer to the offer within it is a failed upgrade (status 0), not
    a FirstByteTimeout."""
    target = cfg.target
    stream_id = stream_id or new_stream_id()
    headers, body = request_parts(cfg, stream_id)
    body.pop("stream", None)  # implied over WebSocket (OpenAI: "should not be sent")
    create = json.dumps({"type": CREATE_EVENT, **body}, separators=(",", ":"))
    # One message is one event: the trace's bound on one event is the bound on one message (response.completed
    # carries the whole answer, larger than a request's 1 MiB).
    ws_limits = ws_limits or WebSocketLimits(max_message_bytes=limits.event_bytes)
    ws = WebSocketEndpoint.client(target.host_header, target.path, headers, ws_limits)
    started = clock()
    try:
        transport = connect(target, cfg)
    except ConnectTimeout:
        if cfg.total_timeout_s < cfg.connect_timeout_s:
            timeout_error(None, cfg, first=True, total=True)
        raise
    deadline = started + int(cfg.total_timeout_s * 1e9)
    try:
        recorder = TraceRecorder(stream_id, 0, limits, api=cfg.api)
        return _WsRun(transport, ws, cfg, clock, deadline, recorder, upgrade_timeout_s).run(create)
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise NetworkError(f"the connection was reset: {exc.strerror}") from None
    except ssl.SSLError as exc:
        raise NetworkError(f"the TLS connection failed: {getattr(exc, 'reason', None) or exc}") from None
    finally:
        transport.close()


class _WsRun:
    """One probe's state: the upgrade, then the messages into the recorder."""

    def __init__(
        self,
        transport: Transport,
        ws: WebSocketEndpoint,
        cfg: ProbeConfig,
        clock: Clock,
        deadline: int,
        rec: TraceRecorder,
        upgrade_timeout_s: float | None = None,
    ) -> None:
        self.transport = transport
        self.upgrade_timeout_s = upgrade_timeout_s
        self.ws = ws
        self.cfg = cfg
        self.clock = clock
        self.deadline = deadline
        self.rec = rec
        self.reader = frame_reader(cfg.api)  # the format's own rule for its final event
        self.messages = 0
        self.message_reads = 0
        self.pings = 0
        self.pings_sent = 0
        self.final = False
        self.ended = False
        self.closed: Closed | None = None
        self.closed_by = ""

    def run(self, create: str) -> Trace:
        self.transport.sendall(self.ws.data_to_send())
        upgrade_sent = self.clock()
        answer, answered_at, after = self._upgrade(upgrade_sent)
        upgrade_ms = (answered_at - upgrade_sent) / 1e6
        trace = self.rec.trace
        if not isinstance(answer, Upgraded):
            return self._refused(answer, upgrade_sent, upgrade_ms)
        trace.head = ResponseHead(101, "1.1", answer.headers, Framing.NONE, keep_alive=False)
        message = self.ws.send_text(create)
        trace.t_sent_ns = self.clock()  # before the write: a stub in this process may answer before it returns
        self.transport.sendall(message)
        if after:
            self._events(answered_at, 0, after)
        self._stream()
        trace.ws = WsFigures(
            upgraded=True,
            upgrade_status=101,
            upgrade_ms=upgrade_ms,
            messages=self.messages,
            message_reads=self.message_reads,
            final_event=self.final,
            close_code=self.closed.code if self.closed is not None else None,
            closed_by=self.closed_by,
            pings=self.pings,
            pings_sent=self.pings_sent,
            pongs=self.ws.pongs,
        )
        return trace

    def _refused(self, answer: UpgradeRefused | None, sent: int, upgrade_ms: float) -> Trace:
        """The path answered the offer with something else than a valid 101 (or closed without an answer): the
        trace carries that answer's status and head, and no frame."""
        refused = answer or UpgradeRefused(0, (), CLOSED_UNANSWERED)
        trace = self.rec.trace
        trace.head = ResponseHead(refused.status, "1.1", refused.headers, Framing.NONE, keep_alive=False)
        trace.t_sent_ns = sent
        trace.t_end_ns = self.clock()
        body = refused.body[:ERROR_BODY_PREVIEW].decode("utf-8", "replace").strip()
        trace.ws = WsFigures(False, refused.status, upgrade_ms, refused_body=body)
        return trace

    def _upgrade(self, sent: int) -> tuple[Upgraded | UpgradeRefused | None, int, list[WsEvent]]:
        """Reads until the answer to the offer: it (None when the socket ended first), when the read that brought
        its head returned, and the events after it in that read. A refusal's body is read for REFUSAL_BODY_S."""
        wait_s = self.upgrade_timeout_s or self.cfg.first_byte_timeout_s
        phase_by = sent + int(wait_s * 1e9)
        refused_at: int | None = None
        while True:
            try:
                data, t = self._recv(phase_by, first=refused_at is None)
            except TimeoutError:  # the refusal's body took longer than REFUSAL_BODY_S: what came of it will do
                data, t = b"", self.clock()
            except FirstByteTimeout:
                if self.upgrade_timeout_s is None:
                    raise
                return UpgradeRefused(0, (), f"no answer within {wait_s:g} s".encode()), self.clock(), []
            events = self.ws.receive(data, t) if data or refused_at is None else []
            for i, event in enumerate(events):
                if isinstance(event, Upgraded | UpgradeRefused):
                    return event, refused_at or t, events[i + 1 :]
            held = self.ws.pending_refusal()
            if held is not None and refused_at is None:
                refused_at = t
                phase_by = min(phase_by, t + int(REFUSAL_BODY_S * 1e9))
            if not data or (held is not None and self.clock() >= phase_by):
                return held, refused_at or t, []

    def _stream(self) -> None:
        idle_ns = int(self.cfg.idle_timeout_s * 1e9)
        first_by = self.rec.trace.t_sent_ns + int(self.cfg.first_byte_timeout_s * 1e9)
        last = self.rec.trace.t_sent_ns
        ping_ns = int(self.cfg.ws_ping_s * 1e9) if self.cfg.ws_ping_s else 0
        next_ping = last + ping_ns
        while not self.ended:
            first = self.rec.trace.t_first_byte_ns is None
            phase_by = first_by if first else last + idle_ns
            if ping_ns and self.clock() >= next_ping:  # the keep-alive an agent sends while it waits
                self.transport.sendall(self.ws.ping())
                self.pings_sent += 1
                next_ping += ping_ns * max(1, (self.clock() - next_ping) // ping_ns + 1)  # never a burst
            got = self._read(phase_by, first, next_ping if ping_ns else None)
            if got is None:
                continue  # a ping is due
            data, t = got
            if self._events(t, len(data), self.ws.receive(data, t)):
                last = t
            if not data:
                self._end(t, "server")
        if self.closed is None:
            self._close_ours()

    def _events(self, t: int, nbytes: int, events: list[WsEvent]) -> int:
        text = [e for e in events if isinstance(e, MessageReceived)]
        body = b"".join(sse_event(m.text) for m in text)
        ends = False
        for frame in self.reader.feed(body):
            if self.reader.ends(frame):
                ends = True
                self.final = self.final or self.reader.kind(frame) is not FrameKind.ERROR
        self.messages += len(text)
        self.message_reads += 1 if text else 0
        self.pings += sum(1 for e in events if isinstance(e, PingReceived))
        out = self.ws.data_to_send()  # pongs, or our answer to the server's close
        if out:
            self.transport.sendall(out)
        frames = self.rec.on_h2_read(t, nbytes, None, body, False) if (body or nbytes) else 0
        closed = next((e for e in events if isinstance(e, Closed)), None)
        if closed is not None:
            self.closed = closed
            self._end(t, "server" if closed.by_peer else "client")
        elif ends:
            self._end(t, "client")
        return frames

    def _end(self, t: int, by: str) -> None:
        if not self.ended:
            self.ended = True
            self.closed_by = by
            self.rec.on_h2_read(t, 0, None, b"", True)

    def _close_ours(self) -> None:
        """The final event came: close 1000 and wait briefly for the server's close (its code is recorded)."""
        self.transport.sendall(self.ws.close(CLOSE_NORMAL))
        until = min(self.clock() + int(CLOSE_WAIT_S * 1e9), self.deadline)
        try:
            while self.closed is None:
                left = until - self.clock()
                if left <= 0:
                    break
                data = self.transport.recv(left / 1e9)
                for event in self.ws.receive(data, self.clock()):
                    if isinstance(event, Closed):
                        self.closed = event
                if not data:
                    break
        except (TimeoutError, OSError):
            pass
        if self.closed is None:
            self.closed = Closed(CLOSE_NORMAL, "", by_peer=False)

    def _recv(self, phase_by: int, first: bool) -> tuple[bytes, int]:
        got = self._read(phase_by, first, None)
        assert got is not None
        return got

    def _read(self, phase_by: int, first: bool, wake_by: int | None) -> tuple[bytes, int] | None:
        """One read by `phase_by` (past it: the phase's timeout error; `first` false while a refusal's body is
        read: TimeoutError, the caller's to take); None at `wake_by` (our next ping) when nothing came first."""
        while True:
            now = self.clock()
            if now >= self.deadline or now >= phase_by:
                if self.ws.pending_refusal() is not None and now < self.deadline:
                    raise TimeoutError
                timeout_error(self.rec, self.cfg, first, total=now >= self.deadline)
            if wake_by is not None and now >= wake_by:
                return None
            until = min(phase_by, self.deadline, wake_by if wake_by is not None else phase_by)
            try:
                data = self.transport.recv((until - now) / 1e9)
            except TimeoutError:
                continue
            t = self.clock()
            if data:
                data += self.transport.drain()
            return data, t
