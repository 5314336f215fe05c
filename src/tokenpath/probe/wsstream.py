"""probe --transport websocket: one response over a format's WebSocket mode (OpenAI's Responses WebSocket mode), on
the probe's own socket, every recv() timestamped as it returns.

The upgrade is timed apart (its status and time; a path that answers anything but 101 is a result, WsFigures with
`upgraded` false, not an error), then the format's client events for one response go out in one write (its spec's
ws_request: Responses' `response.create`; the Realtime API's `conversation.item.create` + `response.create`, its
`session.created` a control frame before them) and TTFT counts from their last byte. Each text
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
from tokenpath.errors import ConnectTimeout, FirstByteTimeout
from tokenpath.probe.client import (
    ProbeConfig,
    Woke,
    network_error,
    new_stream_id,
    read_until_done,
    request_parts,
    timeout_error,
)
from tokenpath.probe.trace import DEFAULT_LIMITS, ERROR_BODY_PREVIEW, Trace, TraceLimits, TraceRecorder
from tokenpath.probe.transport import Target, Transport, open_connection
from tokenpath.probe.wsfigures import WsFigures
from tokenpath.wire.apis import SPECS
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.ending import BodyEnd, LastWord, classify_end
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

__all__ = ["event_type", "probe_ws", "sse_event"]

CLOSE_WAIT_S = 1.0  # how long our close waits for the server's (the figures are in already)
REFUSAL_BODY_S = 1.0  # how long a refused upgrade's body is read for its first bytes

Connector = Callable[[Target, ProbeConfig], Transport]


def _connect(target: Target, cfg: ProbeConfig) -> Transport:
    return open_connection(target, connect_timeout_s=cfg.connect_deadline_s, tls=cfg.tls)


def event_type(text: str) -> str | None:
    """A message's JSON `type`, or None."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    kind = obj.get("type") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) else None


def sse_event(text: str, kind: str | None) -> bytes:
    """A message as the SSE event it mirrors: `kind`, its event_type, as the event name, the message as its data.
    The caller parses the message once (event_type) and uses its type twice (the event name, the session's events;
    load/wsconn.py: whether it ends the stream), so no message is parsed twice."""
    head = f"event: {kind}\n" if kind is not None and "\n" not in kind else ""
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
    ask = SPECS[cfg.api].ws_request
    assert ask is not None, "ProbeConfig refuses a format without a WebSocket mode"
    # The client events that ask for one response (Responses: response.create; Realtime: a user item, then it).
    create = [json.dumps(event, separators=(",", ":")) for event in ask(body)]
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
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as exc:  # its end and the trace so far go with it
        raise network_error(exc) from None
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
        self.session_events = SPECS[cfg.api].ws_session_events
        self.messages = 0
        self.message_reads = 0
        self.pings = 0
        self.pings_sent = 0
        self.ping_ns = int(cfg.ws_ping_s * 1e9) if cfg.ws_ping_s else 0
        self.next_ping = 0
        self.final = False
        self.ended = False
        self.closed: Closed | None = None
        self.closed_by = ""

    def run(self, create: list[str]) -> Trace:
        upgrade_sent = self.clock()  # before the write (probe/trace.py SENT_RULE)
        self.transport.sendall(self.ws.data_to_send())
        answer, answered_at, after = self._upgrade(upgrade_sent)
        upgrade_ms = (answered_at - upgrade_sent) / 1e6
        trace = self.rec.trace
        if not isinstance(answer, Upgraded):
            return self._refused(answer, upgrade_sent, upgrade_ms, answered_at)
        trace.head = ResponseHead(101, "1.1", answer.headers, Framing.NONE, keep_alive=False)
        message = b"".join(self.ws.send_text(event) for event in create)
        trace.t_sent_ns = self.clock()  # before the write (probe/trace.py SENT_RULE)
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

    def _refused(self, answer: UpgradeRefused | None, sent: int, upgrade_ms: float, answered_at: int) -> Trace:
        """The path answered the offer with something else than a valid 101 (or closed without an answer): the
        trace carries that answer's status and head, no frame, and its end (an error status: no stream at all; a
        close without an answer: the stream broke before it began)."""
        refused = answer or UpgradeRefused(0, (), CLOSED_UNANSWERED)
        trace = self.rec.trace
        trace.head = ResponseHead(refused.status, "1.1", refused.headers, Framing.NONE, keep_alive=False)
        trace.t_sent_ns = sent
        trace.t_end_ns = self.clock()
        how, detail = (
            (BodyEnd.STATUS, f"no WebSocket: the upgrade was answered HTTP {refused.status}")
            if refused.status
            else (BodyEnd.TRUNCATED, "the connection closed before the WebSocket upgrade was answered")
        )
        trace.end = classify_end(
            LastWord.NOTHING,
            how,
            sent_ns=sent,
            end_ns=trace.t_end_ns,
            last_byte_ns=answered_at if refused.status else None,
            detail=detail,
        )
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
        """probe/client.py's read loop (deadlines, the end and the trace so far on an error), this run its source;
        --ws-ping-s's pings go out from it (next_read) while the stream waits."""
        self.next_ping = self.rec.trace.t_sent_ns + self.ping_ns
        if not self.ended:  # the final event may have come with the 101
            read_until_done(self.rec, self, self.cfg, self.clock, self.deadline, head_checked=True)
        if self.closed is None:
            self._close_ours()

    def next_read(self, now_ns: int, until_ns: int) -> Woke | None:
        """One read of messages (the ReadSource seam): re-framed into the recorder; the socket's end is the server's.
        With --ws-ping-s, a ping when one is due (the keep-alive an agent sends while it waits), and no read past
        the next one."""
        if self.ping_ns:
            if now_ns >= self.next_ping:
                self.transport.sendall(self.ws.ping())
                self.pings_sent += 1
                self.next_ping += self.ping_ns * max(1, (now_ns - self.next_ping) // self.ping_ns + 1)  # never a burst
            until_ns = min(until_ns, self.next_ping)
        try:
            data = self.transport.recv((until_ns - now_ns) / 1e9)
        except TimeoutError:
            return None
        t = self.clock()
        if data:
            data += self.transport.drain()
        frames = self._events(t, len(data), self.ws.receive(data, t))
        if not data:
            self._end(t, "server")
            return Woke(t, frames, closed=True)
        return Woke(t, frames)

    def error_preview(self, deadline: int) -> str:
        return ""  # never asked: the head was the upgrade's 101

    def _events(self, t: int, nbytes: int, events: list[WsEvent]) -> int:
        text = [e for e in events if isinstance(e, MessageReceived)]
        typed = [(m.text, event_type(m.text)) for m in text]
        body = b"".join(sse_event(t, kind) for t, kind in typed if not self._session_event(kind))
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

    def _session_event(self, kind: str | None) -> bool:
        """A message of this type is the session's own event (ApiSpec.ws_session_events): none of the response's
        frames."""
        prefixes = self.session_events
        return bool(prefixes) and kind is not None and kind.startswith(prefixes)

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
        """One read of the upgrade's answer by `phase_by` (past it: the phase's timeout error; `first` false while
        a refusal's body is read: TimeoutError, the caller's to take)."""
        while True:
            now = self.clock()
            if now >= self.deadline or now >= phase_by:
                if self.ws.pending_refusal() is not None and now < self.deadline:
                    raise TimeoutError
                timeout_error(self.rec, self.cfg, first, total=now >= self.deadline)
            until = min(phase_by, self.deadline)
            try:
                data = self.transport.recv((until - now) / 1e9)
            except TimeoutError:
                continue
            t = self.clock()
            if data:
                data += self.transport.drain()
            return data, t
