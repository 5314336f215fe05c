"""Upstream side: one keep-alive HTTP/1.1 connection per in-flight request, pooled per member.

Each read goes through the client core (wire.client) and its events go to a Sink inside the same `data_received`
call: the gateway writes each upstream read downstream before returning to the event loop, so nothing waits on
a task switch."""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Protocol, cast

from tokenpath.errors import ConnectError, ConnectTimeout, RemoteProtocolError
from tokenpath.flow import ReadGate
from tokenpath.wire.client import ClientConnection, ResponseHead

MAX_IDLE_PER_MEMBER = 256  # idle keep-alive connections kept per member; more are closed


class Sink(Protocol):
    def upstream_head(self, head: ResponseHead) -> None: ...
    def upstream_body(self, data: bytes) -> None: ...
    def upstream_read_done(self) -> None: ...
    def upstream_complete(self) -> None: ...
    def upstream_lost(self, reason: str) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    """The asyncio shell of one upstream connection: bytes into the client core, its events out to the Sink."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.sink: Sink | None = None
        self.closed = False
        self.reused = False  # served a response before: a failure before any byte may just be a stale keep-alive
        self.got_bytes = False
        self.core = self._new_core()
        self.gate = ReadGate()  # paused while the client's socket buffer is full

    # asyncio ---------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.gate.attach(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        self.got_bytes = True
        try:
            # The core calls _head, _body and _end as llhttp finds them: this read goes downstream before
            # data_received returns. Bytes while idle raise: the server broke the protocol; never reuse it.
            self.core.receive_data(data)
        except RemoteProtocolError as exc:
            self.sink = None
            self.abort()
            if sink is not None:
                sink.upstream_lost(f"malformed response from upstream: {exc}")
            return
        if sink is not None:
            sink.upstream_read_done()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        sink = self.sink
        if sink is None:
            return
        try:
            self.core.receive_eof()  # a close-delimited body ends here (calls _end); any other was cut short
        except RemoteProtocolError:
            self.sink = None
            sink.upstream_lost(f"upstream closed the connection{f': {exc}' if exc else ''}")

    # the core's callbacks ---------------------------------------------------------------------------------
    def _head(self, head: ResponseHead) -> None:
        if self.sink is not None:
            self.sink.upstream_head(head)

    def _body(self, data: bytes) -> None:
        sink = self.sink
        if sink is not None:
            sink.upstream_body(data)

    def _end(self) -> None:
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.upstream_complete()

    # use ---------------------------------------------------------------------------------------------------
    def send(self, sink: Sink, data: bytes, method: str) -> None:
        assert self.transport is not None
        self.sink = sink
        self.got_bytes = False
        self.core.start_response(method)
        self.transport.write(data)

    def pause(self) -> None:
        self.gate.pause()

    def resume(self) -> None:
        self.gate.resume()

    def abort(self) -> None:
        """Drop the connection now: the upstream sees it closed and stops generating."""
        self.sink = None
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    def _new_core(self) -> ClientConnection:
        return ClientConnection(on_head=self._head, on_body=self._body, on_end=self._end)

    def release(self) -> None:
        """The response is complete: back to the idle pool when the core says the connection can be reused."""
        self.sink = None
        if self.core.reusable and not self.closed:
            self.core = self._new_core()  # idle: a byte from the server now is a protocol error
            self.gate.resume()  # the next exchange starts reading whatever this one's client left it at
            self.reused = True
            self.pool.put_idle(self)
        else:
            self.abort()


class ConnectionPool:
    """Idle keep-alive connections to one member."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.idle: deque[UpstreamConnection] = deque()

    async def acquire(self, connect_timeout_s: float) -> UpstreamConnection:
        while self.idle:
            conn = self.idle.pop()  # most recently used: the least likely to have been timed out by the server
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: UpstreamConnection(self), self.host, self.port), connect_timeout_s
            )
        except TimeoutError:
            where = f"{self.host}:{self.port}"
            raise ConnectTimeout(f"connect to {where} timed out after {connect_timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectError(f"connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
        return proto

    def put_idle(self, conn: UpstreamConnection) -> None:
        if len(self.idle) >= MAX_IDLE_PER_MEMBER:
            conn.abort()
            return
        self.idle.append(conn)

    def forget(self, conn: UpstreamConnection) -> None:
        if conn in self.idle:
            self.idle.remove(conn)

    def close(self) -> None:
        while self.idle:
            self.idle.pop().abort()
