"""One WebSocket session through the gateway, after both 101s: the client's connection (this asyncio protocol, handed
the socket by serve/http.py's switch_protocols) and the member's (gateway/wsupstream.py), each a wire/websocket.py
endpoint with its own limits, and the messages relayed between them as they arrive.

One message in, one message out, never coalesced, never split: each text message either side completes is sent on
as one text frame in the same `data_received`; a message that came in fragments is passed on whole (the endpoint
holds its pieces, bounded by the message and fragment limits, as it must to check them; a member's events are never
fragmented, and a client's response.create is one JSON object the member reads whole anyway). Binary messages are
not carried (the Responses mode is JSON text): 1003. permessage-deflate is never negotiated, either side (the 101s
agree no extension; a compressed frame is a protocol error, 1002), so no deflate bomb can be sent.

Pings are each hop's own: the endpoints answer them (within their bucket: a flood closes 1008); the gateway pings a
client silent for `ws_ping_interval_s` (and the member, whose idle timer sees only what the gateway sends) and closes
1001 when no pong comes in `ws_pong_timeout_s`; a session past `ws_session_s` (when set) is closed 1001 both ways.
Backpressure both ways, as the SSE relay's: while one side's socket buffer is over the write buffer limit, the other
side is not read. A close crosses as gateway/wsclose.py maps it; a side's socket is dropped CLOSE_WAIT_S after its
close, read or not (a peer that never reads would hold it forever), unless it ends first: its end cancels the drop, so
a clean session leaves no timer on the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from tokenpath.clock import Clock
from tokenpath.gateway.config import Limits
from tokenpath.gateway.wsclose import GOING_AWAY, to_client, to_upstream
from tokenpath.gateway.wsupstream import UpstreamWs
from tokenpath.serve.flow import ReadGate
from tokenpath.wire.websocket import (
    Closed,
    MessageReceived,
    PongReceived,
    WebSocketEndpoint,
    WebSocketLimits,
    WsEvent,
)

__all__ = ["CLOSE_WAIT_S", "WsRelay", "WsSettings", "WsTally"]

CLOSE_WAIT_S = 2.0  # after our close frame, the peer's reply is waited for this long, then the socket is closed
PING_PAYLOAD = b"tokenpath"


@dataclass(frozen=True, slots=True)
class WsSettings:
    """The [limits] a session runs under."""

    client: WebSocketLimits
    upstream: WebSocketLimits
    ping_interval_s: float
    pong_timeout_s: float
    session_s: float  # 0: no limit

    @classmethod
    def of(cls, limits: Limits) -> WsSettings:
        return cls(
            client=WebSocketLimits(
                max_message_bytes=limits.ws_max_message_bytes,
                max_fragments=limits.ws_max_fragments,
                ping_burst=limits.ws_ping_burst,
                pings_per_s=limits.ws_pings_per_s,
            ),
            upstream=WebSocketLimits(
                max_message_bytes=limits.ws_max_upstream_message_bytes,
                max_fragments=limits.ws_max_fragments,
                ping_burst=limits.ws_ping_burst,
                pings_per_s=limits.ws_pings_per_s,
            ),
            ping_interval_s=limits.ws_ping_interval_s,
            pong_timeout_s=limits.ws_pong_timeout_s,
            session_s=limits.ws_session_s,
        )


@dataclass(slots=True)
class WsTally:
    """What a session did, for its log line and the metrics."""

    to_client: int = 0  # messages relayed member → client
    to_upstream: int = 0  # messages relayed client → member
    bytes_to_client: int = 0  # their payload bytes
    client_close: int | None = None  # the code of the close the client sent or got
    upstream_close: int | None = None  # the code of the close the member sent or got
    closed_by: str = ""  # who ended it: client, upstream, gateway (a limit, no pong, shutdown)
    reason: str = ""


class WsRelay(asyncio.Protocol):
    def __init__(
        self, upstream: UpstreamWs, settings: WsSettings, clock: Clock, on_end: Callable[[WsTally], None]
    ) -> None:
        self.upstream = upstream
        self.settings = settings
        self.clock = clock
        self.on_end: Callable[[WsTally], None] | None = on_end
        self.client = WebSocketEndpoint.server(settings.client)
        self.tally = WsTally()
        self.transport: asyncio.Transport | None = None
        self.client_gate = ReadGate()
        self.client_open = True
        self.upstream_open = True
        self.loop = asyncio.get_running_loop()
        self.heard_at = self.loop.time()  # the client's last bytes
        self._idle: asyncio.TimerHandle | None = None
        self._pong: asyncio.TimerHandle | None = None
        self._session: asyncio.TimerHandle | None = None
        self._client_wait: asyncio.TimerHandle | None = None
        self._upstream_wait: asyncio.TimerHandle | None = None
        self._client_drop: asyncio.TimerHandle | None = None  # the client's socket dropped CLOSE_WAIT_S after close

    # the client's connection (asyncio) -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.client_gate.attach(transport)
        self._idle = self.loop.call_later(self.settings.ping_interval_s, self._idle_check)
        if self.settings.session_s > 0:
            self._session = self.loop.call_later(self.settings.session_s, self._session_over)
        self.upstream.listen(self)  # and the messages that came with the member's 101

    def data_received(self, data: bytes) -> None:
        self.heard_at = self.loop.time()
        if self._pong is not None:  # any bytes prove it alive
            self._pong.cancel()
            self._pong = None
        events = self.client.receive(data, self.clock())
        self._flush_client()
        upstream = self.upstream
        for event in events:
            if isinstance(event, MessageReceived):
                if self.upstream_open and upstream.ws is not None:
                    upstream.write(upstream.ws.send_text(event.text))
                    self.tally.to_upstream += 1
            elif isinstance(event, Closed):
                self._client_closed(event)
                return

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.client_open:
            self._client_closed(Closed(1006, "", by_peer=True))
        self._cancel(self._client_wait)
        self._cancel(self._client_drop)  # the socket ended by itself: nothing left to drop
        self._client_wait = self._client_drop = None
        self.client_open = False
        self._maybe_end()

    def pause_writing(self) -> None:
        self.upstream.gate.pause()  # the client reads slower than the member writes

    def resume_writing(self) -> None:
        self.upstream.gate.resume()

    # the member's connection (wsupstream.UpstreamListener) ----------------------------------------------------
    def upstream_events(self, events: list[WsEvent]) -> None:
        out = bytearray()
        client = self.client
        tally = self.tally
        for event in events:
            if isinstance(event, MessageReceived):
                if self.client_open:
                    out += client.send_text(event.text)  # one message, one frame
                    tally.to_client += 1
                    tally.bytes_to_client += event.nbytes
            elif isinstance(event, Closed):
                self._write_client(bytes(out))
                self._upstream_closed(event)
                return
            elif isinstance(event, PongReceived):
                pass  # the member is alive; its death is seen by TCP (lost) anyway
        self._write_client(bytes(out))

    def upstream_paused(self) -> None:
        self.client_gate.pause()

    def upstream_resumed(self) -> None:
        self.client_gate.resume()

    # the gateway's own end -----------------------------------------------------------------------------------
    def shutdown(self, reason: str = "the gateway is shutting down") -> None:
        """Close both sides (1001), as the drain deadline or a bug asks."""
        self._close_client(GOING_AWAY, reason)
        self._close_upstream(GOING_AWAY, reason)

    # internals -----------------------------------------------------------------------------------------------
    def _client_closed(self, closed: Closed) -> None:
        """The client's close (its frame, its socket's end) or ours for a limit it broke: the member hears of it."""
        tally = self.tally
        if tally.client_close is None:
            tally.client_close = closed.code
        if not tally.closed_by:
            tally.closed_by = "client" if closed.by_peer else "gateway"
            tally.reason = closed.reason
        self._flush_client()  # the close reply, or our close frame
        self.client_open = False
        self._cancel_timers()
        if self.transport is not None:
            self.transport.close()  # the server ends the TCP connection (RFC 6455 7.1.1) ...
            if self._client_drop is None:  # ... even if the client never reads it (connection_lost cancels it)
                self._client_drop = self.loop.call_later(CLOSE_WAIT_S, self.transport.abort)
        if self.upstream_open:
            code, reason = to_upstream(closed.code, closed.reason, closed.by_peer)
            self._close_upstream(code, reason)
        self._maybe_end()

    def _upstream_closed(self, closed: Closed) -> None:
        """The member's close (its frame, its connection's end) or ours for a limit it broke: the client hears."""
        tally = self.tally
        if tally.upstream_close is None:
            tally.upstream_close = closed.code
        if not tally.closed_by:
            tally.closed_by = "upstream" if closed.by_peer else "gateway"
            tally.reason = closed.reason
        self.upstream_open = False
        self._cancel(self._upstream_wait)
        self.upstream.close(CLOSE_WAIT_S)  # its close reply (or ours) is written: the member's end is done
        if self.client_open:
            code, reason = to_client(closed.code, closed.reason, closed.by_peer)
            self._close_client(code, reason)
        self._maybe_end()

    def _close_client(self, code: int, reason: str) -> None:
        """Our close frame to the client; its reply (or CLOSE_WAIT_S) ends the connection."""
        if not self.client_open or self._client_wait is not None:
            return
        if self.tally.client_close is None:
            self.tally.client_close = code
        if not self.tally.closed_by:
            self.tally.closed_by, self.tally.reason = "gateway", reason
        self._write_client(self.client.close(code, reason))
        self._cancel_timers()
        self.client_gate.resume()  # its reply must be read
        self._client_wait = self.loop.call_later(CLOSE_WAIT_S, self._client_timed_out)

    def _close_upstream(self, code: int, reason: str) -> None:
        if not self.upstream_open or self.upstream.ws is None or self._upstream_wait is not None:
            return  # gone, or our close is out already
        if self.tally.upstream_close is None:
            self.tally.upstream_close = code
        self.upstream.write(self.upstream.ws.close(code, reason))
        self.upstream.gate.resume()
        self._upstream_wait = self.loop.call_later(CLOSE_WAIT_S, self._upstream_timed_out)

    def _client_timed_out(self) -> None:
        """No close reply in CLOSE_WAIT_S: dropped. Not close(), which waits for the socket buffer to empty, and a
        client that reads nothing never empties it (the session, its slot and its sockets would be held forever)."""
        self._client_wait = None
        if self.transport is not None:
            self.transport.abort()

    def _upstream_timed_out(self) -> None:
        self._upstream_wait = None
        self.upstream_open = False
        self.upstream.abort()
        self._maybe_end()

    def _idle_check(self) -> None:
        """Every ping interval: a client silent that long is pinged (and the member), once per interval."""
        self._idle = None
        if not self.client_open:
            return
        interval = self.settings.ping_interval_s
        silent = self.loop.time() - self.heard_at
        if silent < interval or self.client_gate.paused or self._pong is not None:
            # heard lately, not being read (the member is full), or a ping of ours still unanswered
            self._idle = self.loop.call_later(max(interval - silent, 0.001), self._idle_check)
            return
        self._write_client(self.client.ping(PING_PAYLOAD))
        if self.upstream_open and self.upstream.ws is not None:
            self.upstream.write(self.upstream.ws.ping(PING_PAYLOAD))
        self._pong = self.loop.call_later(self.settings.pong_timeout_s, self._no_pong)
        self._idle = self.loop.call_later(interval, self._idle_check)

    def _no_pong(self) -> None:
        self._pong = None
        if not self.client_open:
            return
        reason = f"no pong within {self.settings.pong_timeout_s:g} s"
        self._close_client(GOING_AWAY, reason)
        self._close_upstream(*to_upstream(GOING_AWAY, reason, by_client=False))

    def _session_over(self) -> None:
        self._session = None
        reason = f"the session reached its {self.settings.session_s:g} s limit (ws_session_s)"
        self._close_client(GOING_AWAY, reason)
        self._close_upstream(*to_upstream(GOING_AWAY, reason, by_client=False))

    def _flush_client(self) -> None:
        self._write_client(self.client.data_to_send())

    def _write_client(self, data: bytes) -> None:
        transport = self.transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)

    def _cancel_timers(self) -> None:
        self._cancel(self._idle)
        self._cancel(self._pong)
        self._cancel(self._session)
        self._idle = self._pong = self._session = None

    def _cancel(self, handle: asyncio.TimerHandle | None) -> None:
        if handle is not None:
            handle.cancel()

    def _maybe_end(self) -> None:
        if self.client_open or self.upstream_open:
            return
        self._cancel_timers()
        self._cancel(self._upstream_wait)
        self._cancel(self._client_wait)
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            on_end(self.tally)
