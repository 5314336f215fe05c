"""The gateway's WebSocket client to a member: a Speaker on the one connect path (gateway/link.py: TCP, TLS with the
pool's CA and resumed sessions, HTTP/1.1 by ALPN), wire/websocket.py's client endpoint (wsproto) on top. It sends
the upgrade offer, resolves `answer` with the member's 101 or refusal, then hands every event of every read to its
listener (the relay) inside the same `data_received`. Pongs and close replies the endpoint owes go out at once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from tokenpath.clock import Clock
from tokenpath.gateway.failures import Failure
from tokenpath.gateway.link import UpstreamLink
from tokenpath.serve.flow import ReadGate
from tokenpath.wire.websocket import (
    CLOSED_UNANSWERED,
    Upgraded,
    UpgradeRefused,
    WebSocketEndpoint,
    WebSocketLimits,
    WsEvent,
)

__all__ = ["UpstreamListener", "UpstreamWs"]


class UpstreamListener(Protocol):
    def upstream_events(self, events: list[WsEvent]) -> None:
        """One read's events (messages, pings answered, pongs, the close), in order."""

    def upstream_paused(self) -> None:
        """The member's socket buffer is full: stop reading the client."""

    def upstream_resumed(self) -> None: ...


class UpstreamWs:
    """One WebSocket connection to a member, over `link`."""

    def __init__(self, link: UpstreamLink, limits: WebSocketLimits, clock: Clock) -> None:
        self.link = link
        self.limits = limits
        self.clock = clock
        self.ws: WebSocketEndpoint | None = None
        self.answer: asyncio.Future[Upgraded | UpgradeRefused] = asyncio.get_running_loop().create_future()
        self.listener: UpstreamListener | None = None
        self.early: list[WsEvent] = []  # events that came with the 101, before the relay listened
        self.gate = ReadGate(link.transport)
        self.failure: Failure | None = None  # why the link broke (TLS), for the log
        self.closed = False
        self.gone = False  # the connection has ended (connection_lost)
        self._drop: asyncio.TimerHandle | None = None  # close()'s abort, for a member that never reads
        link.settle(None)  # ready for the offer once connected (and TLS-handshaken)

    # use -----------------------------------------------------------------------------------------------------
    def offer(self, authority: str, target: str, headers: Iterable[tuple[str, str]]) -> None:
        self.ws = WebSocketEndpoint.client(authority, target, headers, self.limits)
        self.write(self.ws.data_to_send())

    def listen(self, listener: UpstreamListener) -> None:
        self.listener = listener
        early, self.early = self.early, []
        if early:
            listener.upstream_events(early)

    def write(self, data: bytes) -> None:
        if data and not self.closed and not self.link.closing:
            self.link.write(data)

    def abort(self) -> None:
        self.closed = True
        self._cancel_drop()
        self.link.abort()

    def close(self, drop_after_s: float) -> None:
        """After the close handshake (or our close frame, written): the TCP connection ends, and is dropped
        `drop_after_s` later if it has not (close() waits for the socket buffer to empty, and a member that reads
        nothing never empties it). Its end cancels the drop: a clean session leaves no timer behind."""
        self.closed = True
        self.link.close()
        if not self.gone and self._drop is None:
            self._drop = asyncio.get_running_loop().call_later(drop_after_s, self.abort)

    # the link's side (gateway/link.py Speaker) ---------------------------------------------------------------
    def received(self, data: bytes) -> None:
        ws = self.ws
        if ws is None:
            return  # bytes before our offer: nothing asked for them
        self._events(ws.receive(data, self.clock()))

    def broken(self, failure: Failure) -> None:
        self.failure = failure

    def peer_closing(self) -> None:
        """close_notify: connection_lost follows (the link closed the connection)."""

    def lost(self, exc: Exception | None) -> None:
        self.closed = self.gone = True
        self._cancel_drop()
        ws = self.ws
        if ws is None:
            self._answered(UpgradeRefused(0, (), CLOSED_UNANSWERED))
            return
        self._events(ws.receive(b"", self.clock()))

    def writing_paused(self) -> None:
        if self.listener is not None:
            self.listener.upstream_paused()

    def writing_resumed(self) -> None:
        if self.listener is not None:
            self.listener.upstream_resumed()

    # internals -----------------------------------------------------------------------------------------------
    def _events(self, events: list[WsEvent]) -> None:
        assert self.ws is not None
        self.write(self.ws.data_to_send())  # pongs, a close reply, our close for a limit
        rest: list[WsEvent] = []
        for event in events:
            if isinstance(event, Upgraded | UpgradeRefused):
                self._answered(event)
            else:
                rest.append(event)
        if not rest:
            return
        if self.listener is not None:
            self.listener.upstream_events(rest)
        else:
            self.early.extend(rest)

    def _cancel_drop(self) -> None:
        if self._drop is not None:
            self._drop.cancel()
            self._drop = None

    def _answered(self, event: Upgraded | UpgradeRefused) -> None:
        if not self.answer.done():
            self.answer.set_result(event)
