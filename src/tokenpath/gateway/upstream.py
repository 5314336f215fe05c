"""Upstream side: one keep-alive HTTP/1.1 connection per in-flight request, pooled per member.

The response is parsed with httptools as it arrives and handed to a Sink through callbacks, inside the same
`data_received` call: the gateway writes each upstream read downstream before returning to the event loop, so
nothing waits on a task switch."""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Protocol, cast

import httptools

from tokenpath.errors import PeerError

MAX_IDLE_PER_MEMBER = 256  # idle keep-alive connections kept per member; more are closed


class Sink(Protocol):
    def upstream_head(self, status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool) -> None: ...
    def upstream_body(self, data: bytes) -> None: ...
    def upstream_read_done(self) -> None: ...
    def upstream_complete(self) -> None: ...
    def upstream_lost(self, reason: str) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.sink: Sink | None = None
        self.closed = False
        self.reused = False  # served a response before: a failure before any byte may just be a stale keep-alive
        self.got_bytes = False
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._close_delimited = False
        self._expect_body = True

    # asyncio ---------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        if sink is None:  # bytes on an idle connection: the server broke the protocol; never reuse it
            self.abort()
            return
        self.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.sink = None
            self.abort()
            sink.upstream_lost(f"malformed response from upstream: {exc}")
            return
        sink.upstream_read_done()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        if self.sink is None:
            return
        sink, self.sink = self.sink, None
        if self._close_delimited:  # httptools has no end-of-input call: a close-delimited body ends here
            sink.upstream_complete()
        else:
            sink.upstream_lost(f"upstream closed the connection{f': {exc}' if exc else ''}")

    # httptools --------------------------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # interim (100 Continue): the real head follows
            self._headers = []
            return
        headers, self._headers = self._headers, []
        framed = any(n.lower() in (b"content-length", b"transfer-encoding") for n, _ in headers)
        self._close_delimited = not framed and status not in (204, 304) and self._expect_body
        if self.sink is not None:
            self.sink.upstream_head(status, headers, self._parser.should_keep_alive() and self._expect_body)
        if not self._expect_body and self.sink is not None:
            # A HEAD response has no body, but httptools cannot be told so: it would wait for Content-Length
            # bytes. The response ends here, and the connection is not reused (the parser's state is off).
            sink, self.sink = self.sink, None
            sink.upstream_complete()

    def on_body(self, body: bytes) -> None:
        if self.sink is not None:
            self.sink.upstream_body(body)

    def on_message_complete(self) -> None:
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.upstream_complete()

    # use ---------------------------------------------------------------------------------------------------
    def send(self, sink: Sink, data: bytes, expect_body: bool = True) -> None:
        assert self.transport is not None
        self.sink = sink
        self._expect_body = expect_body
        self.got_bytes = False
        self._close_delimited = False
        self._parser = httptools.HttpResponseParser(self)
        self.transport.write(data)

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def abort(self) -> None:
        """Drop the connection now: the upstream sees it closed and stops generating."""
        self.sink = None
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    def release(self, keep_alive: bool) -> None:
        """The response is complete: back to the idle pool, or closed."""
        self.sink = None
        if keep_alive and not self.closed:
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
            raise PeerError(f"connect to {self.host}:{self.port} timed out after {connect_timeout_s:g} s") from None
        except OSError as exc:
            raise PeerError(f"connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
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
