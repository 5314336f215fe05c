"""The stub's WebSocket mode (OpenAI's Responses WebSocket mode on `GET /v1/responses` with `Upgrade: websocket`): a
session on the switched connection that answers each `response.create` message with the same events as the format's
SSE stream, one event's JSON per text message, written by the same PacedStream (same schedule, same audit log).

One response at a time per connection (a second `response.create` while one streams is an error event, as OpenAI
answers it); errors are `{"type": "error", "status": ..., "error": {...}}` events and the connection stays open.
The frames are wire/websocket.py's (wsproto): pings answered within its bucket, messages over its limit closed 1009,
an unmasked client frame closed 1002.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, cast

from tokenpath.clock import Clock
from tokenpath.errors import BadRequest, UsageError
from tokenpath.serve.http import Request, reset_transport
from tokenpath.wire.request import STREAM_HEADER
from tokenpath.wire.websocket import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    Closed,
    MessageReceived,
    WebSocketEndpoint,
    WebSocketLimits,
)

__all__ = ["FrameWriter", "MessageWriter", "StartResponse", "WebSocketSession", "sse_data"]

CREATE = "response.create"
# A session with no response streaming and no frame from the client for this long is closed (1001, going away), as
# an idle HTTP connection is after wire/limits.py's request timeout: a client that upgrades and goes silent does not
# hold a socket for ever. Any frame (a ping too) is activity: agents keep a socket open between turns with pings.
IDLE_S = 60.0


class FrameWriter(Protocol):
    """What a paced stream writes through: an HTTP Response or one WebSocket response. `on_pause`/`on_resume`: the
    client's socket buffer (an HTTP/2 stream's window) is full / has room again."""

    on_abort: Callable[[], None] | None
    on_pause: Callable[[], None] | None
    on_resume: Callable[[], None] | None

    @property
    def writing_paused(self) -> bool: ...  # full already when the stream starts: on_resume comes when it has room

    def write(self, wire_bytes: bytes, last: bool = False) -> None: ...

    def abort_connection(self) -> None: ...


def sse_data(frame: bytes) -> str:
    """An SSE event's data (its `data:` lines joined), the JSON a WebSocket message carries instead."""
    lines = frame.decode("utf-8").split("\n")
    return "\n".join(line[6:] if line.startswith("data: ") else line[5:] for line in lines if line.startswith("data:"))


class MessageWriter:
    """One response's events on the session's socket: each pre-encoded frame is one write."""

    def __init__(self, session: WebSocketSession, client_id: str | None = None) -> None:
        self._session = session
        self.client_id = client_id  # the response.create's event id (the Realtime API's), for an error event
        self.on_abort: Callable[[], None] | None = None
        self.on_pause: Callable[[], None] | None = None
        self.on_resume: Callable[[], None] | None = None

    def encode(self, text: str) -> bytes:
        return self._session.encode(text)

    def write(self, wire_bytes: bytes, last: bool = False) -> None:
        self._session.write(wire_bytes)
        if last:
            self._session.response_done(self)

    def abort_connection(self) -> None:
        self._session.abort()

    def refuse(self, message: str) -> None:
        """The response is refused after StartResponse returned (a large shape, built in slices, met an error
        before any event was written): answered as one refused at once."""
        self._session.refused(self, message)

    @property
    def writing_paused(self) -> bool:
        return self._session.writing_paused


# (the upgrade request, the response.create body without its envelope, the writer) → the stream is running;
# raises BadRequest or UsageError for an error event
StartResponse = Callable[[Request, dict[str, Any], MessageWriter], None]


class WebSocketSession(asyncio.Protocol):
    bad_request_code: str | None = None  # the error event's code for a response the request's fields refuse

    def __init__(
        self, request: Request, start: StartResponse, clock: Clock, limits: WebSocketLimits | None = None
    ) -> None:
        self._request = request
        self._start = start
        self._clock = clock
        self._ws = WebSocketEndpoint.server(limits or WebSocketLimits())
        self._transport: asyncio.Transport | None = None
        self._current: MessageWriter | None = None
        self._idle: asyncio.TimerHandle | None = None
        self.responses = 0
        self.writing_paused = False  # pause_writing, not yet resumed: a response that starts now waits

    # asyncio protocol -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        self._arm_idle()
        events = self._ws.receive(data, self._clock())
        self._flush()
        for event in events:
            if isinstance(event, MessageReceived):
                self._on_message(event.text)
            elif isinstance(event, Closed):
                self._close()
                return

    def eof_received(self) -> bool | None:
        return None

    def pause_writing(self) -> None:  # the socket buffer is full: the streaming response waits (its producer paused)
        self.writing_paused = True
        if self._current is not None and self._current.on_pause is not None:
            self._current.on_pause()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self._current is not None and self._current.on_resume is not None:
            self._current.on_resume()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
        current, self._current = self._current, None
        if current is not None and current.on_abort is not None:
            current.on_abort()

    # used by MessageWriter --------------------------------------------------------------------------
    def encode(self, text: str) -> bytes:
        return self._ws.send_text(text)

    def write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def response_done(self, writer: MessageWriter) -> None:
        if writer is self._current:
            self._current = None
            self._arm_idle()

    # internals --------------------------------------------------------------------------------------
    def _on_message(self, text: str) -> None:
        try:
            event = json.loads(text)
        except (ValueError, RecursionError) as exc:
            self._error(f"a client event must be JSON: {exc}")
            return
        if not isinstance(event, dict) or event.get("type") != CREATE:
            kind = event.get("type") if isinstance(event, dict) else None
            self._error(f"unknown client event type {kind!r}; this server takes {CREATE!r}", "unknown_event")
            return
        if self._current is not None:
            self._error("a response is already in progress on this connection", "response_in_progress")
            return
        if event.get("background"):
            self._error("'background' is not supported over WebSocket")
            return
        self._begin({k: v for k, v in event.items() if k not in ("type", "stream")})

    def _begin(self, body: dict[str, Any], client_id: str | None = None) -> None:
        """One response on this session (none is streaming): its body handed to the app's StartResponse."""
        # The upgrade's stream id names the first response; later ones name theirs in the body, or get a fresh one.
        request = self._request if self.responses == 0 else _without_stream_header(self._request)
        writer = MessageWriter(self, client_id)
        self._current = writer
        self.responses += 1
        try:
            self._start(request, body, writer)
        except (BadRequest, UsageError) as exc:
            self._current = None
            self._error(str(exc), self.bad_request_code, client_id)

    def refused(self, writer: MessageWriter, message: str) -> None:
        if writer is self._current:
            self._current = None
            self._arm_idle()
        self._error(message, self.bad_request_code, writer.client_id)

    def _error(self, message: str, code: str | None = None, client_id: str | None = None) -> None:
        """An `error` event in the Responses WebSocket mode's shape (`client_id`: the Realtime API's, unused here)."""
        error = {"type": "invalid_request_error", "code": code, "message": message, "param": None}
        self.write(self._ws.send_text(json.dumps({"type": "error", "status": 400, "error": error})))

    def _flush(self) -> None:
        out = self._ws.data_to_send()
        if out:
            self.write(out)

    def _close(self) -> None:
        """The close handshake is done (or a limit closed it): the server ends the TCP connection (RFC 6455 7.1.1)."""
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """The socket dropped now, what is queued with it (a client that stopped reading)."""
        if self._transport is not None:
            reset_transport(self._transport)

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Ours: a close frame, then the socket."""
        self.write(self._ws.close(code, reason))
        self._close()

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(IDLE_S, self._idle_expired)

    def _idle_expired(self) -> None:
        self._idle = None
        if self._current is not None:  # a response is streaming: its own pacing bounds it
            self._arm_idle()
            return
        self.close(CLOSE_GOING_AWAY, f"idle for {IDLE_S:g} s")


def _without_stream_header(request: Request) -> Request:
    name = STREAM_HEADER.lower()
    return replace(request, headers=tuple(h for h in request.headers if h[0].lower() != name))
