"""HTTP/2 on the server side: the asyncio shell around the `h2` library's state machine, with the same Handler
interface as serve.http.HTTPConnection, so the stub and the gateway serve HTTP/2 with no change in their code.

Each stream becomes a Request and an H2Response (a serve.http.Response with the same methods: start/start_stream/
frame/write/end_bytes/close_connection, client_gone, on_abort/on_pause/on_resume). What the apps hand it:

- the "head" bytes that `start*` return are empty: the HEADERS frame is held until the first `write`, and leaves in
  the same socket write as the first DATA (the stub's head + role delta, the gateway's head + first read);
- every `write` becomes DATA at once, split only by the peer's SETTINGS_MAX_FRAME_SIZE and the stream's and the
  connection's windows (the relay rule: no added buffering). What a window does not admit waits on that stream
  alone, and the stream's producer is paused (`on_pause`, the signal a full socket buffer gives on HTTP/1.1); a
  WINDOW_UPDATE sends it and resumes the producer. A full socket buffer pauses every stream of the connection.
- a streamed body has no chunks: its framing is CLOSE (the body ends with the stream, END_STREAM); `close_connection`
  ends the stream cleanly after `end_bytes`, else resets it (a body cut short: INTERNAL_ERROR), never the connection.
- a stream the client resets (RST_STREAM) is `client_gone` at once and its `on_abort` runs, as a closed socket does;
  a client's GOAWAY ends the connection's open streams the same way (h2 sends nothing after reading one).
- a response the app has finished whose tail still waits for a window is held while the client takes it, and reset
  (CANCEL) after a request timeout without progress.
- a request body is read into the stream's window only once admission has said yes (an async JWT check holds at
  most one initial window of body per stream, as HTTP/1.1 stops reading the socket meanwhile); cookie crumbs are
  joined into one field for the HTTP/1.1 side (RFC 9113 8.2.3).

Admission (`handler.admit`, sync or async) runs per stream on the request head, exactly as on HTTP/1.1.

Limits (H2Limits; the floods closed by wire.h2guard before h2 parses them, GOAWAY ENHANCE_YOUR_CALM): streams past
SETTINGS_MAX_CONCURRENT_STREAMS are refused (RST_STREAM REFUSED_STREAM, which a client may retry elsewhere: RFC 9113
8.7), never the connection; oversized header lists (SETTINGS_MAX_HEADER_LIST_SIZE = the HTTP/1.1 head limit),
CONTINUATION floods, PING/SETTINGS floods and RST_STREAM floods (rapid reset) close the connection; a stream whose
request does not arrive whole within the request timeout is reset; an idle connection is closed after it.

Drain (`start_drain(handler)` when the server stops; RFC 9113 6.8): from then on a connection's new streams are
refused (REFUSED_STREAM: safe to retry elsewhere, where HTTP/1.1 gets the app's 503) and its open streams run to their
end. Once none is open it sends a PING and GOAWAY(2^31-1), then, on the PING's ACK (one measured RTT: streams the
client sent before it saw the first GOAWAY have arrived by then; capped at GOAWAY_RTT_CAP_S, h2o's fixed interval,
for a client that never answers), GOAWAY(the last stream it took) and closes. The GOAWAYs wait for the open streams to
end because the `h2` library (httpx, the openai SDK) fails every stream it still reads once a GOAWAY has come
(python-hyper/h2#1181): an early GOAWAY would cut their streams short, where a deferred one costs RFC clients only
a refused (and retried) stream.

Which connections get here: serve/listener.py (ALPN over TLS, the preface in clear text).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, cast

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import GoAwayFrame

from tokenpath.serve.admission import Admission, Admitted, BodyBudget, BodyCharge, Refusal
from tokenpath.serve.h2limits import DEFAULT_LIMITS, H2Limits, ServerFrameGuard
from tokenpath.serve.http import Handler, Response, _release
from tokenpath.serve.timerwheel import TimerWheel, WheelTimer, loop_wheel
from tokenpath.wire.apis import Api
from tokenpath.wire.errorshape import error_reply
from tokenpath.wire.framing import Framing, bodiless
from tokenpath.wire.limits import ServerLimits
from tokenpath.wire.server import Request

__all__ = ["PREFACE", "H2Response", "H2ServerConnection", "finish_drain", "start_drain"]

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Fields that are connection-specific in HTTP/1.1 and forbidden in HTTP/2 (RFC 9113 8.2.2): dropped from responses
NOT_IN_H2 = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"})
ErrorCodes = h2.errors.ErrorCodes
MAX_STREAM_ID = 2**31 - 1  # the first GOAWAY of a graceful shutdown: no new streams (those in flight: REFUSED_STREAM)
GOAWAY_RTT_CAP_S = 1.0  # the longest wait for the drain PING's ACK before the final GOAWAY (h2o's fixed 1 s)
DRAIN_PING = b"tp-drain"  # 8 bytes: tells our drain PING's ACK from any other


def start_drain(handler: Handler) -> int:
    """The server stops: every HTTP/2 connection serving `handler` refuses new streams and says GOAWAY once its open
    streams have ended (the module docstring). Returns how many connections were told."""
    conns = _serving(handler)
    for conn in conns:
        conn.drain()
    return len(conns)


async def finish_drain(handler: Handler, wait_s: float = GOAWAY_RTT_CAP_S + 0.1) -> int:
    """After the app's drain: waits up to `wait_s` for `handler`'s connections to end their two-step GOAWAY, then sends
    the final GOAWAY on those left and closes them. Returns how many were closed so."""
    for _ in range(max(1, int(wait_s / 0.01))):  # bounded: wait_s at most
        if not _serving(handler):
            return 0
        await asyncio.sleep(0.01)
    left = _serving(handler)
    for conn in left:
        conn.final_goaway(force=True)
    return len(left)


class H2Response(Response):
    """One stream's response, with serve.http.Response's interface (see the module docstring)."""

    def __init__(self, conn: H2ServerConnection, stream_id: int, request: Request) -> None:
        # Response.__init__ wants an HTTPConnection; its state is the same.
        self._h2 = conn
        self.stream_id = stream_id
        self._init_state(request)
        self.head: list[tuple[bytes, bytes]] | None = None  # HEADERS held until the first write
        self.head_sent = False
        self.pending = bytearray()  # DATA the windows have not admitted yet
        self.end_pending = False  # END_STREAM goes with the last pending byte
        self.out_closed = False  # END_STREAM (or RST_STREAM) sent
        self.gone = False  # the client reset the stream, or the connection is closed
        self.body_complete = False  # end_bytes() was called: the body is whole
        self.paused = False  # on_pause was signalled (and not yet on_resume)

    @property
    def chunked(self) -> bool:
        return False

    @property
    def client_gone(self) -> bool:
        return self.gone

    def send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.start(status, headers, len(body))
        self.write(body if self.framing is Framing.LENGTH else b"", last=True)

    def start(self, status: int, headers: list[tuple[str, str]], content_length: int | None) -> bytes:
        if bodiless(self.request.method, status):
            self.framing = Framing.NONE
        else:
            self.framing = Framing.CLOSE if content_length is None else Framing.LENGTH
        self.head = _h2_headers(status, headers, None if status in (204, 304) else content_length)
        return b""

    def start_stream(self, status: int, headers: list[tuple[str, str]], *, http10_chunked: bool = False) -> bytes:
        return self.start(status, headers, None)  # no HTTP/1.0 here: DATA frames whatever the origin's habit

    def start_without_body(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        self.framing = Framing.NONE
        self.head = _h2_headers(status, headers, None)
        return b""

    def frame(self, data: bytes) -> bytes:
        return data

    def end_bytes(self) -> bytes:
        self.framing = None
        self.body_complete = True
        return b""

    def close_connection(self) -> None:
        """Ends this stream only: cleanly when the body is whole (END_STREAM after what the window still holds back),
        else with RST_STREAM: a body cut short (the gateway giving up on a stalled client is one)."""
        if self.finished:
            return
        if self.body_complete or self.framing is Framing.NONE:
            self._h2.send(self, b"", True)
        else:
            self._h2.reset(self, ErrorCodes.INTERNAL_ERROR)
        self._finish()

    @property
    def writing_paused(self) -> bool:
        """The stream's window or the connection's socket is full (a stream opened on a paused connection too)."""
        return self._h2.stream_paused(self)

    def abort_connection(self) -> None:
        """This stream only (RST_STREAM CANCEL), what its window still holds back with it: the others go on."""
        if self.finished:
            return
        self._h2.reset(self, ErrorCodes.CANCEL)
        self.gone = True
        if self.on_abort is not None:
            self.on_abort()
        self._finish()

    def write(self, wire_bytes: bytes, last: bool = False) -> None:
        self._h2.send(self, wire_bytes if self.framing is not Framing.NONE else b"", last)
        if last:
            self.framing = None
            self._finish()

    def _done(self) -> None:
        self._h2.response_done(self)


def _h2_headers(status: int, headers: list[tuple[str, str]], length: int | None) -> list[tuple[bytes, bytes]]:
    out = [(b":status", str(status).encode())]
    for name, value in headers:
        lname = name.lower()
        if lname in NOT_IN_H2 or (length is not None and lname == "content-length"):
            continue
        out.append((lname.encode("latin-1"), value.encode("latin-1")))
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    return out


class _Stream:
    """A request being received: its head, its body so far, what admission said."""

    __slots__ = (
        "admission",
        "admitting",
        "body",
        "body_bytes",
        "charge",
        "ended",
        "head",
        "response",
        "timer",
        "unacked",
    )

    def __init__(self, head: Request, charge: BodyCharge | None) -> None:
        self.head = head
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.charge = charge  # the body bytes held, against the handler's BodyBudget
        self.ended = False  # the client's END_STREAM arrived
        self.admitting = False
        self.admission: Admitted | None = None
        self.response: H2Response | None = None  # once dispatched (or refused)
        self.timer: WheelTimer | None = None  # the request (head and body) is due within the request timeout
        self.unacked = 0  # body bytes received before admission said yes: the stream's window stays shut on them


class _Conn(h2.connection.H2Connection):
    """h2's connection, except that a stream past our SETTINGS_MAX_CONCURRENT_STREAMS is not a connection error:
    h2 raises TooManyStreamsError (GOAWAY, and every other stream's events in that read lost); RFC 9113 5.1.2 lets
    us refuse the one stream instead, which H2ServerConnection does (REFUSED_STREAM)."""

    closed_stream_data = 0  # DATA frames on streams already closed, each answered with RST_STREAM (no event)

    @property
    def open_inbound_streams(self) -> int:
        count = self._open_streams(1)  # also forgets closed streams, as h2's own count does
        return min(count, self.local_settings.max_concurrent_streams - 1)

    def _handle_data_on_closed_stream(self, events: Any, exc: Any, frame: Any) -> Any:
        # h2 answers DATA on a closed stream with RST_STREAM itself, with an event only the first time (a StreamReset
        # the connection counts): the rest are counted here, as resets the client made us send (MadeYouReset)
        if not exc._events:
            self.closed_stream_data += 1
        return super()._handle_data_on_closed_stream(events, exc, frame)


class H2ServerConnection(asyncio.Protocol):
    """One HTTP/2 client connection (cleartext with prior knowledge, or TLS after ALPN `h2`)."""

    def __init__(
        self,
        handler: Handler,
        limits: ServerLimits,
        h2limits: H2Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handler = handler
        self._admit: Callable[[Request], Admission | Awaitable[Admission]] | None = getattr(handler, "admit", None)
        self._budget: BodyBudget | None = getattr(handler, "body_budget", None)
        self._error_api: Callable[[str], Api | None] | None = getattr(handler, "error_api", None)
        self._wheel: TimerWheel | None = getattr(handler, "timer_wheel", None)  # else the loop's (loop_wheel)
        self.limits = limits
        self.h2limits = h2limits
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = _Conn(config=config)
        self.h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: h2limits.max_concurrent_streams,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_head_bytes,
                h2.settings.SettingCodes.MAX_FRAME_SIZE: h2limits.max_frame_size,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.guard = ServerFrameGuard(clock, h2limits, limits.max_head_bytes)
        self._preface_left = len(PREFACE)  # the client's preface is not a frame: the guard skips it
        self._transport: asyncio.Transport | None = None
        self._streams: dict[int, _Stream] = {}
        self._blocked: dict[int, H2Response] = {}  # streams with DATA waiting for a window
        self._ready: list[_Stream] = []  # requests complete in this read, dispatched once the read is processed
        self._transport_paused = False
        self._idle_timer: WheelTimer | None = None
        self._goaway = False  # the client said it opens no more streams
        self.draining = False  # the server stops: new streams refused, GOAWAY once the open ones end
        self.goaways_sent = 0  # of the drain's two: GOAWAY(2^31-1), then GOAWAY(last stream taken)
        self._last_taken = 0  # the highest stream handed to the app (or answered): the final GOAWAY's last stream id
        self._goaway_timer: asyncio.TimerHandle | None = None
        self.peer = ""
        self.closed = False
        self.refused_streams = 0  # REFUSED_STREAM resets sent (past the concurrency limit)
        self._doomed: set[int | None] = set()  # streams the client reset in the read being processed

    # asyncio protocol -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        _LIVE.add(self)
        peername = transport.get_extra_info("peername")
        self.peer = str(peername[0]) if isinstance(peername, tuple) else ""
        # TCP_NODELAY is the loop's: uvloop and asyncio set it on every TCP transport (tests/serve/test_nodelay.py),
        # so no socket object per connection (a dup's getsockname calls) and no second setsockopt.
        self._transport.set_write_buffer_limits(high=self.limits.write_buffer_high)
        self.h2.initiate_connection()
        extra = self.h2limits.connection_window - 65_535
        if extra > 0:
            self.h2.increment_flow_control_window(extra)
        self._flush()
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        guarded = data
        if self._preface_left:
            skip = min(self._preface_left, len(data))
            self._preface_left -= skip
            guarded = data[skip:]
        why = self.guard.feed(guarded) if guarded else None
        if why is not None:
            self._calm(why, self.guard.error_code)
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:  # h2 has queued its GOAWAY
            log.info("h2 client %s broke the protocol: %s", self.peer, exc)
            self._flush()
            self._close()
            return
        why = self._provoked_resets(events)
        if why is not None:
            self._calm(why, h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            return
        # h2 has read every frame of this read before we see its events: a stream reset later in the read is already
        # closed in h2 when its request event comes (the rapid-reset pattern); it is skipped, not answered
        self._doomed = {e.stream_id for e in events if isinstance(e, h2.events.StreamReset)}
        for event in events:
            self._event(event)
            if self._is_closed():  # a GOAWAY, or a flood, ended the connection: the rest of the read is moot
                return
        ready, self._ready = self._ready, []
        for stream in ready:
            if stream.response is None and self._streams.get(stream.head.seq) is stream:
                self._dispatch(stream)
        self._flush()

    def _provoked_resets(self, events: list[h2.events.Event]) -> str | None:
        """Spend the reset allowance on each stream this read made h2 reset for the client (MadeYouReset): a stream
        error of the client's (a WINDOW_UPDATE past 2^31-1, DATA after END_STREAM, DATA on a closed stream)."""
        provoked, self.h2.closed_stream_data = self.h2.closed_stream_data, 0
        for event in events:
            if type(event) is h2.events.StreamReset and not event.remote_reset:
                provoked += 1
        for _ in range(provoked):
            why = self.guard.provoked_reset()
            if why is not None:
                return why
        return None

    def eof_received(self) -> bool | None:
        return None

    def pause_writing(self) -> None:
        self._transport_paused = True
        for stream in list(self._streams.values()):
            if stream.response is not None:
                self._signal(stream.response)

    def resume_writing(self) -> None:
        self._transport_paused = False
        for stream in list(self._streams.values()):
            if stream.response is not None:
                self._signal(stream.response)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        _LIVE.discard(self)
        self._cancel(self._idle_timer)
        self._idle_timer = None
        if self._goaway_timer is not None:
            self._goaway_timer.cancel()
        streams, self._streams = self._streams, {}
        self._blocked.clear()
        for stream in streams.values():
            self._drop(stream)

    # used by H2Response -----------------------------------------------------------------------------
    def send(self, response: H2Response, data: bytes, end: bool) -> None:
        if response.gone or response.out_closed or self.closed:
            return
        h2c = self.h2
        try:
            if data and response.head_sent and not response.pending and not response.paused:
                # the hot path (a relayed read): _send_data inlined (its comments say why), no call between; tests/
                # serve/test_h2.py holds the two equal
                try:
                    h2c.send_data(response.stream_id, data, end_stream=end)
                except (h2.exceptions.FlowControlError, h2.exceptions.FrameTooLargeError):
                    self._queue(response, data, end)
                else:
                    self.guard.window_updates_owed += 2 * max(1, len(data) >> 10)
                    if end:
                        self._sent_end(response)
            else:
                self._send(response, data, end)
        except h2.exceptions.ProtocolError:
            # closed in h2 by a frame of the client's that we have not handled yet (its RST_STREAM, its GOAWAY): gone
            self._blocked.pop(response.stream_id, None)
            response.gone = True
            response.pending.clear()
            self._forget(response.stream_id)
        out = h2c.data_to_send()  # _flush inlined
        if out and self._transport is not None and not self.closed:
            self._transport.write(out)

    def _send(self, response: H2Response, data: bytes, end: bool) -> None:
        sid = response.stream_id
        if response.head is not None:
            only_head = end and not data and not response.pending
            self.h2.send_headers(sid, response.head, end_stream=only_head)
            response.head, response.head_sent = None, True
            if only_head:
                self._sent_end(response)
                return
        if data and not response.pending and not response.paused:
            self._send_data(response, data, end)
            return
        self._queue(response, data, end)

    def _send_data(self, response: H2Response, data: bytes, end: bool) -> None:
        """One DATA frame, no copy (the hot path: once per relayed read). h2 checks the windows and the frame size
        before it changes any state, so asking it is the cheapest test of whether they admit the write whole."""
        try:
            self.h2.send_data(response.stream_id, data, end_stream=end)
        except (h2.exceptions.FlowControlError, h2.exceptions.FrameTooLargeError):
            self._queue(response, data, end)  # split, as the windows and the peer's frame size allow
            return
        # the client may give this frame back on its stream and on the connection, even a KiB at a time
        self.guard.window_updates_owed += 2 * max(1, len(data) >> 10)
        if end:
            self._sent_end(response)

    def _queue(self, response: H2Response, data: bytes, end: bool) -> None:
        if data:
            response.pending += data
        if end:
            response.end_pending = True
        self._pump(response)

    def reset(self, response: H2Response, code: ErrorCodes) -> None:
        if response.gone or response.out_closed or self.closed:
            return
        response.pending.clear()
        response.out_closed = True
        self._blocked.pop(response.stream_id, None)
        self._rst(response.stream_id, code)
        self._flush()
        self._forget(response.stream_id)

    def response_done(self, response: H2Response) -> None:
        """The app is done with the response. Its last bytes may still wait for a window: the stream is held while
        the client takes them, and reset if it takes none for a request timeout (a client that never opens its
        window would otherwise hold the stream, its slot and the connection for ever)."""
        if response.pending and not response.out_closed:
            self._watch_tail(response, -1)

    def _watch_tail(self, response: H2Response, last: int) -> None:
        if response.out_closed or response.gone or self.closed:
            return
        left = len(response.pending)
        if left == last:  # no progress for a whole timeout
            self.reset(response, ErrorCodes.CANCEL)
            return
        loop = asyncio.get_running_loop()
        loop.call_later(self.limits.request_timeout_s, self._watch_tail, response, left)

    # internals --------------------------------------------------------------------------------------
    def _event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            self._data(event)
        elif isinstance(event, h2.events.RequestReceived):
            self._open(event)
        elif isinstance(event, h2.events.StreamEnded):
            self._ended(event.stream_id)
        elif isinstance(event, h2.events.WindowUpdated):
            self._window(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self._reset_by_client(event.stream_id)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            if h2.settings.SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings:
                self._window(0)
        elif isinstance(event, h2.events.PingAckReceived):
            if event.ping_data == DRAIN_PING and self.goaways_sent == 1:  # ours (an unasked ACK changes nothing)
                self.final_goaway()
        elif isinstance(event, h2.events.TrailersReceived):
            pass  # request trailers carry nothing a handler reads; StreamEnded follows
        elif isinstance(event, h2.events.ConnectionTerminated):
            # h2 sends nothing more once it has read a GOAWAY (its connection state is CLOSED): the streams still
            # open end here, as on a closed socket (their producers get on_abort)
            self._goaway = True
            self._close()

    def _open(self, event: h2.events.RequestReceived) -> None:
        sid = event.stream_id
        assert sid is not None  # h2 sets both on this event
        assert event.headers is not None
        if sid in self._doomed:
            return
        if len(self._streams) >= self.h2limits.max_concurrent_streams or self._goaway or self.draining:
            self.refused_streams += 1
            self._rst(sid, ErrorCodes.REFUSED_STREAM)
            return
        self._last_taken = max(self._last_taken, sid)
        head = self._head(sid, event.headers)
        stream = _Stream(head, self._budget.charge() if self._budget is not None else None)
        self._streams[sid] = stream
        self._cancel(self._idle_timer)
        self._idle_timer = None
        wheel = self._timer_wheel()
        stream.timer = wheel.arm(wheel.clock() + self.limits.request_timeout_s, self._request_timeout, sid)
        admission: Admission | Awaitable[Admission] = Admitted() if self._admit is None else self._admit(head)
        if isinstance(admission, (Admitted, Refusal)):
            self._apply(stream, admission)
            return
        stream.admitting = True
        task = asyncio.ensure_future(admission)
        task.add_done_callback(lambda t: self._admission_done(stream, t))

    def _head(self, sid: int, raw: list[Any]) -> Request:
        method = target = authority = ""
        headers: list[tuple[str, str]] = []
        has_host = False
        cookies: list[str] = []
        for name, value in raw:
            key = name.decode("latin-1") if isinstance(name, bytes) else name
            val = value.decode("latin-1") if isinstance(value, bytes) else value
            if key.startswith(":"):
                if key == ":method":
                    method = val
                elif key == ":path":
                    target = val
                elif key == ":authority":
                    authority = val
                continue
            if key == "cookie":  # HTTP/2 may split it in crumbs; one field again for HTTP/1.1 (RFC 9113 8.2.3)
                cookies.append(val)
                continue
            has_host = has_host or key == "host"
            headers.append((key, val))
        if cookies:
            headers.append(("cookie", "; ".join(cookies)))
        if authority and not has_host:
            headers.insert(0, ("host", authority))
        path, _, query = target.partition("?")
        return Request(method, target, path, query, "2", True, tuple(headers), b"", self.peer, sid)

    def _admission_done(self, stream: _Stream, task: asyncio.Future[Admission]) -> None:
        stream.admitting = False
        ok = not task.cancelled() and task.exception() is None
        if self.closed or self._streams.get(stream.head.seq) is not stream:
            if ok:
                _release(task.result())  # admitted after the client left
            return
        if ok:
            admission = task.result()
        else:
            if not task.cancelled():
                log.error("admission of %s %s failed", stream.head.method, stream.head.path, exc_info=task.exception())
            admission = Refusal(500, "internal error while admitting the request", "internal_error")
        self._apply(stream, admission)
        if stream.response is None and stream.ended and stream.admission is not None:
            self._dispatch(stream)
        self._flush()

    def _apply(self, stream: _Stream, admission: Admission) -> None:
        if stream.unacked:  # admitted or refused, the body bytes held back are credited now (the connection's window)
            unacked, stream.unacked = stream.unacked, 0
            self.h2.acknowledge_received_data(unacked, stream.head.seq)
        if isinstance(admission, Admitted):
            stream.admission = admission
            if stream.ended:
                self._ready.append(stream)
            return
        self._refuse(stream, admission)

    def _refuse(self, stream: _Stream, refusal: Refusal) -> None:
        """Answer on the head (the body, if any, is not read: the stream is reset once the answer is out)."""
        _release(stream.admission)
        stream.admission = None
        self._release_body(stream)
        response = H2Response(self, stream.head.seq, stream.head)
        stream.response = response
        api = refusal.api
        if api is None and self._error_api is not None:
            api = self._error_api(stream.head.path)
        response.send_error(error_reply(api, refusal.status, refusal.message, refusal.code), refusal.headers)

    def _release_body(self, stream: _Stream) -> None:
        stream.body = []
        if stream.charge is not None:
            stream.charge.release()
            stream.charge = None

    def _data(self, event: h2.events.DataReceived) -> None:
        sid = event.stream_id
        assert sid is not None  # h2 sets it on this event
        stream = self._streams.get(sid)
        size = event.flow_controlled_length or 0
        if stream is not None and stream.admission is None and stream.response is None:
            # Not admitted yet (an async JWT check): the window is not reopened, so an unadmitted stream holds at
            # most one initial window (64 KiB) of body here, as HTTP/1.1 stops reading the socket meanwhile
            stream.unacked += size
        else:
            self.h2.acknowledge_received_data(size, sid)
        if stream is None or stream.response is not None or event.data is None:
            return  # a refused stream's body, or bytes after the request was answered: read and dropped
        stream.body_bytes += len(event.data)
        if stream.body_bytes > self.limits.max_body_bytes:
            limit = self.limits.max_body_bytes
            self._refuse(stream, Refusal(413, f"request body over {limit} bytes", "request_too_large"))
            return
        if stream.charge is not None and not stream.charge.take(len(event.data)):
            assert self._budget is not None
            self._refuse(stream, self._budget.refusal)  # its own bytes crossed the worker's budget
            return
        stream.body.append(event.data)

    def _ended(self, sid: int | None) -> None:
        stream = self._streams.get(sid or 0)
        if stream is None:
            return
        stream.ended = True
        self._cancel(stream.timer)
        stream.timer = None
        response = stream.response
        if response is not None:
            if response.out_closed:
                self._forget(stream.head.seq)
            return
        if stream.admission is not None:
            self._ready.append(stream)

    def _dispatch(self, stream: _Stream) -> None:
        request = replace(stream.head, body=b"".join(stream.body))
        stream.body = []
        response = H2Response(self, request.seq, request)
        admission, stream.admission = stream.admission, None
        if admission is not None:
            response.context = admission.context
            response.release = admission.release
        response.charge, stream.charge = stream.charge, None
        stream.response = response
        try:
            self._handler(request, response)
        except Exception:  # a handler bug must cost one request, never the server
            log.exception("handler failed on %s %s", request.method, request.path)
            if not response.finished and not response.head_sent:
                self._refuse_after_bug(response)

    def _refuse_after_bug(self, response: H2Response) -> None:
        api = self._error_api(response.request.path) if self._error_api is not None else None
        response.send_error(error_reply(api, 500, "internal server error"))

    def _pump(self, response: H2Response) -> None:
        """Send what the windows admit, in frames of at most the peer's maximum size."""
        sid = response.stream_id
        h2c = self.h2
        pending = response.pending
        while pending:
            room = min(h2c.local_flow_control_window(sid), h2c.max_outbound_frame_size)
            if room <= 0:
                break
            if room >= len(pending):
                chunk = bytes(pending)
                pending.clear()
            else:
                chunk = bytes(pending[:room])
                del pending[:room]
            last = response.end_pending and not pending
            h2c.send_data(sid, chunk, end_stream=last)
            self.guard.window_updates_owed += 2 * max(1, len(chunk) >> 10)
            if last:
                self._blocked.pop(sid, None)
                self._sent_end(response)
                return
        if pending:
            self._blocked[sid] = response
        else:
            self._blocked.pop(sid, None)
            if response.end_pending:
                h2c.end_stream(sid)  # an empty DATA frame with END_STREAM
                self._sent_end(response)
                return
        self._signal(response)

    def _sent_end(self, response: H2Response) -> None:
        response.out_closed = True
        response.end_pending = False
        self._signal(response)
        stream = self._streams.get(response.stream_id)
        if stream is None:
            return
        if stream.ended:
            self._forget(response.stream_id)
        else:  # answered before the request was whole (a refusal): the rest of its body is not wanted
            self._rst(response.stream_id, ErrorCodes.NO_ERROR)
            self._forget(response.stream_id)

    def stream_paused(self, response: H2Response) -> bool:
        """Whether `response`'s producer must wait now (asked by one that starts on a paused connection); if so it is
        marked paused, so the resume that comes signals it as it signals the streams the pause reached."""
        paused = (response.stream_id in self._blocked or self._transport_paused) and not response.out_closed
        if paused:
            response.paused = True
        return paused

    def _signal(self, response: H2Response) -> None:
        """Pause the stream's producer while its window or the socket is full; resume it when both have room."""
        full = (response.stream_id in self._blocked or self._transport_paused) and not response.out_closed
        if full and not response.paused:
            response.paused = True
            if response.on_pause is not None:
                response.on_pause()
        elif not full and response.paused:
            response.paused = False
            if response.on_resume is not None:
                response.on_resume()

    def _window(self, sid: int | None) -> None:
        if not sid:
            for blocked in list(self._blocked.values()):
                self.send(blocked, b"", False)
            return
        response = self._blocked.get(sid)
        if response is not None:
            self.send(response, b"", False)

    def _reset_by_client(self, sid: int | None) -> None:
        stream = self._streams.pop(sid or 0, None)
        if stream is None:
            return
        self._blocked.pop(sid or 0, None)
        self._drop(stream)
        self._after_stream()

    def _request_timeout(self, sid: int) -> None:
        stream = self._streams.get(sid)
        if stream is None or stream.response is not None or self.closed:
            return
        stream.timer = None
        self._rst(sid, ErrorCodes.CANCEL)
        self._forget(sid)
        self._drop(stream)
        self._flush()

    def _drop(self, stream: _Stream) -> None:
        """The stream ended without its response finishing: tell the app, give back what admission reserved."""
        self._cancel(stream.timer)
        stream.timer = None
        _release(stream.admission)
        stream.admission = None
        self._release_body(stream)
        response = stream.response
        if response is None:
            return
        response.gone = True
        response.pending.clear()
        if not response.finished and response.on_abort is not None:
            response.on_abort()
        response.release_admission()

    def _forget(self, sid: int) -> None:
        stream = self._streams.pop(sid, None)
        if stream is not None:
            self._cancel(stream.timer)
            stream.timer = None
        self._after_stream()

    def _after_stream(self) -> None:
        if self._streams:
            return
        if self._goaway:
            self._close()
        elif self.draining:
            if self.goaways_sent == 0:
                self._first_goaway()
            elif self.goaways_sent == 2:
                self._close()
        else:
            self._arm_idle()

    # drain (RFC 9113 6.8) ---------------------------------------------------------------------------
    def drain(self) -> None:
        """New streams are refused from now on; the two GOAWAYs follow once no stream is open."""
        if self.draining or self.closed:
            return
        self.draining = True
        if not self._streams:
            self._first_goaway()

    def _first_goaway(self) -> None:
        if self.closed:
            return
        self.goaways_sent = 1
        # the PING first: an h2-library client reads no frame after a GOAWAY (it would fail on the PING)
        self.h2.ping(DRAIN_PING)
        self._flush()
        self._write_goaway(MAX_STREAM_ID)
        self._goaway_timer = asyncio.get_running_loop().call_later(GOAWAY_RTT_CAP_S, self.final_goaway)

    def final_goaway(self, force: bool = False) -> None:
        """GOAWAY(the last stream taken), then close once no stream is open (at once with `force`)."""
        if self.closed or self.goaways_sent == 2:
            return
        if self._goaway_timer is not None:
            self._goaway_timer.cancel()
            self._goaway_timer = None
        self.goaways_sent = 2
        self._flush()  # what h2 holds goes first
        self._write_goaway(self._last_taken)
        if force or not self._streams:
            self._close()

    def _write_goaway(self, last_stream_id: int) -> None:
        """A GOAWAY(NO_ERROR) written past h2: h2's own close_connection() would move it to CLOSED, after which it
        neither reads nor sends another frame, and the streams still open need both."""
        if self._transport is not None and not self.closed:
            frame = GoAwayFrame(0, last_stream_id=last_stream_id, error_code=ErrorCodes.NO_ERROR)
            self._transport.write(frame.serialize())

    def _rst(self, sid: int, code: ErrorCodes) -> None:
        """RST_STREAM, unless h2 already holds the stream closed (the client's END_STREAM crossed our answer)."""
        with contextlib.suppress(h2.exceptions.StreamClosedError, h2.exceptions.StreamIDTooLowError):
            self.h2.reset_stream(sid, code)

    def _calm(self, why: str, code: ErrorCodes) -> None:
        log.warning(json.dumps({"event": "h2_client_flood", "peer": self.peer, "reason": why}))
        self.h2.close_connection(error_code=code, additional_data=why.encode()[:256])
        self._flush()
        self._close()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self._transport is not None and not self.closed:
            self._transport.write(data)

    def _arm_idle(self) -> None:
        if self.closed:
            return
        wheel = self._timer_wheel()
        self._cancel(self._idle_timer)
        self._idle_timer = wheel.arm(wheel.clock() + self.limits.request_timeout_s, self._idle)

    def _timer_wheel(self) -> TimerWheel:
        """The handler's timer wheel (the gateway's, one per worker), else the running loop's: a stream's request
        timer and the connection's idle timer fire within its resolution after they are due, never before."""
        wheel = self._wheel
        if wheel is None:
            wheel = self._wheel = loop_wheel()
        return wheel

    def _cancel(self, timer: WheelTimer | None) -> None:
        """Cancel `timer` if armed (the caller forgets it)."""
        if timer is not None and self._wheel is not None:
            self._wheel.cancel(timer)

    def _idle(self, _: object = None) -> None:
        self._idle_timer = None
        if self._streams or self.closed:
            return
        self.h2.close_connection(error_code=ErrorCodes.NO_ERROR)
        self._flush()
        self._close()

    def _is_closed(self) -> bool:
        return self.closed

    def _close(self) -> None:
        _LIVE.discard(self)
        if self._transport is not None and not self.closed:
            self.closed = True
            self._transport.close()  # what is queued (a GOAWAY, the last DATA) is written first


# The open connections of this process: what start_drain() reaches (one per event loop and thread, as the servers run)
_LIVE: set[H2ServerConnection] = set()


def _serving(handler: Handler) -> list[H2ServerConnection]:
    # tuple() copies the set in one step: another thread's server may add to it meanwhile (tests run several)
    return [conn for conn in tuple(_LIVE) if conn._handler is handler and not conn.closed]
