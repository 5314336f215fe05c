"""WebSocket for the load client (`load --transport websocket`): one upgrade per stream, then one `response.create`,
each message recorded as the lean recorder records an SSE stream's bytes.

One asyncio protocol per stream drives a sans-IO endpoint (wire/websocket.py over wsproto): every `data_received` is
one socket read, handed to the endpoint with its time, in that call (no task per read, no stream reader). The
upgrade is timed apart (request written -> the answer's head); an answer other than a valid 101 is a result (the
status, `upgraded` false), never a stream. After the 101 the read's whole messages, re-framed as the SSE events they
mirror (probe/wsstream.py's sse_event: the same bytes the SSE stream carries, so the integrity check and the join
to the stub's writes hold), go to the recorder as one read's body: an arrival is a read that completed a message,
and the messages per read are counted (the coalescing of WebSocket frames), never merged. The format's final event
(Responses: `response.completed`) ends the stream (we close 1000); a close before it is a cut: a normal close (1000,
1001) ends the body as HTTP's normal end would (cut_silent), any other code or a socket that ends without a close
frame (1006) as a reset (cut_error).

Each message is parsed once (probe/wsstream.py's event_type, for its `type`: the event name of its SSE mirror, whether
it is the session's own event, and whether it ends the stream); whether a type ends the stream is asked of the
format's reader once per type and kept.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.errors import NetworkError, PeerError
from tokenpath.load.lean import H2LeanRecorder, LeanTrace
from tokenpath.probe.aio import ClosingProtocol, open_stream, run_stream
from tokenpath.probe.wsstream import event_type, sse_event
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.ending import STREAM_END, BodyEnd, LastWord, classify_end
from tokenpath.wire.framing import Framing
from tokenpath.wire.reader import FrameReader, frame_reader
from tokenpath.wire.sse import SSEParser
from tokenpath.wire.websocket import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    Closed,
    MessageReceived,
    Upgraded,
    UpgradeRefused,
    WebSocketEndpoint,
    WebSocketLimits,
    WsEvent,
)

NOT_CARRIED = "WebSocket upgrade not carried"  # how a stream whose upgrade was refused is reported (its error)
NORMAL_CLOSES = frozenset({CLOSE_NORMAL, CLOSE_GOING_AWAY})  # a close before the final event with these: cut_silent
# One message is one event: the SSE client's bound on one event (wire/sse.py MAX_EVENT_BYTES) is the bound here
# (`response.completed` carries the whole answer, larger than a request's 1 MiB).
MAX_MESSAGE_BYTES = 8 << 20
MAX_TYPES_KNOWN = 256  # message types remembered per format (Responses has ~50); past it, asked each time


@dataclass(frozen=True, slots=True)
class WsRequest:
    """One stream's upgrade offer and the message sent once it is answered."""

    host: str  # the Host header
    path: str
    headers: tuple[tuple[str, str], ...]
    create: tuple[str, ...]  # the format's client events for one response (ApiSpec.ws_request), sent in one write
    session_events: tuple[str, ...] = ()  # the `type` prefixes of the session's own events (never a frame)


def ws_request(api: Api, host: str, path: str, headers: list[tuple[str, str]], body: dict[str, Any]) -> WsRequest:
    """The request as probe/wsstream.py sends it: the format's client events (Responses' `response.create`, `stream`
    implied; Realtime's user item and `response.create`)."""
    spec = SPECS[api]
    assert spec.ws_request is not None, "the load options refuse a format without a WebSocket mode"
    create = tuple(json.dumps(event, separators=(",", ":")) for event in spec.ws_request(body))
    return WsRequest(host, path, tuple(headers), create, spec.ws_session_events)


@dataclass(frozen=True, slots=True)
class WsStreamFigures:
    """A stream's WebSocket figures, as plain data (they cross a process boundary in the worker's report)."""

    upgraded: bool  # answered 101 with the right Sec-WebSocket-Accept
    upgrade_status: int  # 101, what came instead (404, 426, 200 ...), or 0: no valid answer
    upgrade_ns: int  # the offer written -> the read that brought the answer's head
    messages: int = 0  # text messages received
    message_reads: int = 0  # reads that completed at least one
    final_event: bool = False  # the format's final event arrived
    close_code: int | None = None  # a close before the final event (the peer's, 1006, or ours for a limit), else None


class WsLeanRecorder(H2LeanRecorder):
    """H2LeanRecorder fed with a WebSocket stream's messages as SSE bytes, one call per read. Its trace's status is
    the upgrade's 101; its body is framed as the format's SSE stream (the head it is given says so)."""

    def on_upgraded(self, headers: tuple[tuple[str, str], ...]) -> None:
        # 200 in the format's event-stream type: the frames are read as the SSE stream's would be (LeanRecorder
        # reads frames from a 2xx answer only); the trace says 101 (result()).
        self.on_head(ResponseHead(200, "1.1", (*headers, ("content-type", "text/event-stream")), Framing.NONE, False))

    def on_closed(self, t_ns: int, code: int) -> None:
        """The peer closed (or the socket ended: 1006) before the final event: a normal close ends the body as
        HTTP's normal end would, any other as a reset."""
        self.complete = True
        self._ended(t_ns, BodyEnd.END_STREAM if code in NORMAL_CLOSES else BodyEnd.RESET)

    def result(self) -> LeanTrace:
        trace = super().result()
        return replace(trace, status=101) if trace.status == 200 else trace


RecorderFactory = Callable[[str, int], WsLeanRecorder]
StreamDone = asyncio.Future[tuple[LeanTrace, WsStreamFigures]]


class FinalTypes:
    """Whether a message's `type` ends the stream (the format's final event or its error), asked of the format's
    reader once per type: a type decides it (wire/formats/responses.py)."""

    def __init__(self, api: Api) -> None:
        self._reader: FrameReader = frame_reader(api)
        self._known: dict[str | None, bool] = {}

    def ends(self, kind: str | None, sse: bytes) -> bool:
        known = self._known.get(kind)
        if known is None:
            frames = SSEParser().feed(sse)
            known = bool(frames) and self._reader.ends(frames[0])
            if kind is not None and len(self._known) < MAX_TYPES_KNOWN:  # a peer's names: bounded
                self._known[kind] = known
        return known


@functools.lru_cache(maxsize=8)
def final_types(api: Api) -> FinalTypes:
    """One per format and process: every stream of a worker shares what it has learnt."""
    return FinalTypes(api)


class WsLoadStream(ClosingProtocol):
    """One stream: the offer on connect, its answer timed, then each read's messages into the recorder."""

    def __init__(
        self,
        request: WsRequest,
        stream_id: str,
        make: RecorderFactory,
        done: StreamDone,
        final: FinalTypes,
        clock: Clock = monotonic_ns,
    ) -> None:
        self._request = request
        self._stream_id = stream_id
        self._make = make
        self._done = done
        self._final = final
        self._clock = clock
        self._ws = WebSocketEndpoint.client(
            request.host, request.path, request.headers, WebSocketLimits(max_message_bytes=MAX_MESSAGE_BYTES)
        )
        self._transport: asyncio.Transport | None = None
        self._recorder: WsLeanRecorder | None = None  # made when the 101 arrives
        self._offered_ns = 0
        self._upgrade_ns = 0
        self._messages = 0
        self._message_reads = 0
        self.closed: asyncio.Future[None] = done.get_loop().create_future()  # set when the transport is gone

    # --- asyncio.Protocol -----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._offered_ns = self._clock()  # before the write (probe/trace.py SENT_RULE)
        self._transport = open_stream(transport, self._ws.data_to_send())

    def data_received(self, data: bytes) -> None:
        t = self._clock()
        try:
            events = self._ws.receive(data, t)
        except PeerError as exc:  # a malformed frame after the 101
            self._fail(exc)
            return
        self._flush()  # pongs, our answer to a close, our close for a limit
        if self._recorder is None:
            events = self._upgrade(t, events)
            if self._recorder is None:
                return
        self._read(t, events)

    def eof_received(self) -> bool | None:
        if not self._done.done():
            self.data_received(b"")  # the endpoint's end: a refusal's answer, or a close 1006
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._fail(NetworkError(f"WebSocket connection lost before the response ended: {exc or 'closed'}"))
        if not self.closed.done():
            self.closed.set_result(None)

    # --- the stream -----------------------------------------------------------------------------------------

    def _upgrade(self, t: int, events: list[WsEvent]) -> list[WsEvent]:
        """The answer to the offer, when this read brought it: the events after it (the stream's first)."""
        for i, event in enumerate(events):
            if isinstance(event, Upgraded):
                self._upgrade_ns = t - self._offered_ns
                message = b"".join(self._ws.send_text(text) for text in self._request.create)
                recorder = self._make(self._stream_id, self._clock())  # before the write, as probe/wsstream.py
                recorder.on_upgraded(event.headers)
                self._recorder = recorder
                assert self._transport is not None
                self._transport.write(message)
                return events[i + 1 :]
            if isinstance(event, UpgradeRefused):
                self._refused(t, event)
                return []
        held = self._ws.pending_refusal()  # a refusal whose body is still coming: its head is the answer
        if held is not None:
            self._refused(t, held)
        return []

    def _read(self, t: int, events: list[WsEvent]) -> None:
        recorder = self._recorder
        assert recorder is not None
        body: list[bytes] = []
        final = False
        closed: Closed | None = None
        session = self._request.session_events
        session_messages = 0
        for event in events:
            if type(event) is MessageReceived:
                kind = event_type(event.text)  # the message's one parse
                sse = sse_event(event.text, kind)
                if session and kind is not None and kind.startswith(session):
                    session_messages += 1  # the session's own event (Realtime's session.created): not the stream's
                    continue
                body.append(sse)
                if self._final.ends(kind, sse):
                    final = True
                    break  # the stream's end: what follows is not of it
            elif isinstance(event, Closed):
                closed = event
                break
        if body or session_messages:  # a read of messages, as the probe counts it (probe/wsstream.py)
            self._messages += len(body) + session_messages
            self._message_reads += 1
        if body:
            try:
                recorder.on_data(t, body[0] if len(body) == 1 else b"".join(body))
            except PeerError as exc:
                self._fail(exc)
                return
        if final:
            recorder.on_end(t)
            self._finish(recorder, None)
        elif closed is not None:
            recorder.on_closed(t, closed.code)
            self._finish(recorder, closed.code)

    def _finish(self, recorder: WsLeanRecorder, close_code: int | None) -> None:
        if not self._done.done():
            figures = WsStreamFigures(
                True, 101, self._upgrade_ns, self._messages, self._message_reads, close_code is None, close_code
            )
            self._done.set_result((recorder.result(), figures))
        assert self._transport is not None
        self._transport.write(self._ws.close(CLOSE_NORMAL))  # nothing when the peer's close was answered already
        self._transport.close()

    def _refused(self, t: int, refused: UpgradeRefused) -> None:
        """Not upgraded: the answer's status as the trace's, no frame, ended by its status (or, with no valid
        answer, as a body that broke before it began)."""
        recorder = H2LeanRecorder(self._stream_id, self._offered_ns)
        status = refused.status
        how = BodyEnd.STATUS if status else BodyEnd.TRUNCATED
        detail = (
            f"no WebSocket: the upgrade was answered HTTP {status}"
            if status
            else f"no WebSocket: {refused.body.decode('utf-8', 'replace')[:160]}"
        )
        end = classify_end(LastWord.NOTHING, how, sent_ns=self._offered_ns, end_ns=t, last_byte_ns=t, detail=detail)
        trace = replace(recorder.result(), status=status or None, body=refused.body, end=end)
        if not self._done.done():
            self._done.set_result((trace, WsStreamFigures(False, status, t - self._offered_ns)))
        assert self._transport is not None
        self._transport.close()

    def _fail(self, exc: Exception) -> None:
        if not self._done.done():
            if self._recorder is not None and STREAM_END.of(exc) is None:
                STREAM_END.attach(exc, self._recorder.cut(exc, self._clock()))
            self._done.set_exception(exc)
        if self._transport is not None:
            self._transport.abort()

    def _flush(self) -> None:
        out = self._ws.data_to_send()
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(out)


async def ws_stream(
    host: str,
    port: int,
    request: WsRequest,
    stream_id: str,
    make: RecorderFactory,
    *,
    api: Api,
    clock: Clock = monotonic_ns,
    timeout_s: float = 600.0,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[LeanTrace, WsStreamFigures]:
    """One stream over a new connection (TLS with `ssl_context`): its trace and WebSocket figures. `timeout_s`
    covers all of it, connecting too (TimeoutError past it)."""
    return await run_stream(
        lambda done: WsLoadStream(request, stream_id, make, done, final_types(api), clock),
        host,
        port,
        timeout_s,
        ssl_context,
    )
