"""Upstream side over HTTP/1.1: one keep-alive connection per in-flight request, pooled per member, in clear text
or TLS (connected by gateway/link.py, the one connect path, which resumes TLS sessions across connections).

Each read goes through the client core (wire.client) and its events go to a Sink inside the same `data_received`
call: the gateway writes each upstream read downstream before returning to the event loop, so nothing waits on
a task switch."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections import deque
from collections.abc import Callable
from typing import Protocol

from tokenpath.errors import RemoteProtocolError
from tokenpath.gateway.failures import Failure, FailureKind, bug_text
from tokenpath.gateway.link import HTTP1, Origin, UpstreamLink, connect
from tokenpath.gateway.tls import describe
from tokenpath.serve.flow import ReadGate
from tokenpath.wire.client import ClientConnection, ResponseHead
from tokenpath.wire.framing import request_head

log = logging.getLogger("tokenpath.gateway")
MAX_IDLE_PER_MEMBER = 256  # idle keep-alive connections kept per member; more are closed


class Sink(Protocol):
    def upstream_head(self, head: ResponseHead) -> None: ...
    def upstream_body(self, data: bytes) -> None: ...
    def upstream_read_done(self) -> None: ...
    def upstream_complete(self) -> None: ...
    def upstream_lost(self, failure: Failure) -> None: ...


class UpstreamConnection:
    """HTTP/1.1 over one link: bytes into the client core, its events out to the Sink."""

    def __init__(self, pool: ConnectionPool, link: UpstreamLink) -> None:
        self.pool = pool
        self.link = link
        self.sink: Sink | None = None
        self.closed = False
        self.reused = False  # served a response before: a failure before any byte may just be a stale keep-alive
        self._session_kept = False  # this connection's TLS session is in the pool (see release)
        self.got_bytes = False
        self.core = self._new_core()
        self.gate = ReadGate(link.transport)  # paused while the client's socket buffer is full
        self.failure: Failure | None = None  # why the connection was dropped, for a send that comes after
        link.settle(None)  # ready for a request as soon as it is connected (and TLS-handshaken)

    # the link's side -------------------------------------------------------------------------------------------
    def received(self, data: bytes) -> None:
        sink = self.sink  # the exchange this read is for, even if the bug struck after it ended (upstream_complete)
        try:
            self.got_bytes = True
            try:
                # The core calls _head, the sink's upstream_body and _end as llhttp finds them: this read goes
                # downstream before data_received returns. Bytes while idle raise: the server broke the protocol;
                # never reuse it.
                self.core.receive_data(data)
            except RemoteProtocolError as exc:  # only the member's; the sink's own exceptions come through as they are
                self._fail(Failure(FailureKind.MALFORMED, f"malformed response from {self.pool.where}: {exc}"))
                return
            if sink is not None:
                sink.upstream_read_done()
        except Exception as exc:  # the member's errors are caught above by type: this one is a bug of ours
            self._internal(exc, sink)

    def broken(self, failure: Failure) -> None:
        self._fail(failure)

    def peer_closing(self) -> None:
        """close_notify (closed by the link): connection_lost then ends a close-delimited body, or reports a cut
        one; an idle connection leaves the pool at once."""

    def lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        sink = self.sink
        if sink is None:
            return
        closed = f"{self.pool.where} closed the connection{f': {exc}' if exc else ''}"
        try:
            if self.link.tls is not None and not self.link.closed_by_peer:
                # Over TLS only close_notify ends a close-delimited body: a bare FIN (or a reset) is no proof it is
                # whole, since anyone on the path can send one (RFC 9112 §9.8). Any other body was cut short anyway.
                self.sink = None
                sink.upstream_lost(Failure(FailureKind.UPSTREAM_CLOSED, f"{closed} without TLS close_notify"))
                return
            try:
                self.core.receive_eof()  # a close-delimited body ends here (calls _end); any other was cut short
            except RemoteProtocolError:
                self.sink = None
                sink.upstream_lost(Failure(FailureKind.UPSTREAM_CLOSED, closed))
        except Exception as bug:  # raised by the sink: ours, not the member's
            self._internal(bug, sink)

    # the core's callbacks ---------------------------------------------------------------------------------
    def _head(self, head: ResponseHead) -> None:
        if self.sink is not None:
            self.sink.upstream_head(head)

    def _end(self) -> None:
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.upstream_complete()

    # use ---------------------------------------------------------------------------------------------------
    def send_request(
        self, sink: Sink, method: str, authority: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        """The exchange's one way to send, whatever the protocol (h2upstream.H2UpstreamStream has the same)."""
        self.send(sink, request_head(method, target, [("Host", authority), *headers]) + body, method)

    def send(self, sink: Sink, data: bytes, method: str) -> None:
        self.got_bytes = False
        if self.closed:  # lost between the handshake and now (e.g. a TLS alert): the sink hears why, at once
            failure = self.failure or Failure(FailureKind.UPSTREAM_CLOSED, f"{self.pool.where} closed the connection")
            asyncio.get_running_loop().call_soon(sink.upstream_lost, failure)
            return
        self.sink = sink
        self.core.start_response(method, sink.upstream_body)  # the body straight to the sink: no call between
        try:
            self.link.write(data)
        except ssl.SSLError as exc:
            self._fail(Failure(FailureKind.TLS, f"TLS with {self.pool.where}: {describe(exc)}"))

    def pause(self) -> None:
        self.gate.pause()

    def resume(self) -> None:
        self.gate.resume()

    def abort(self) -> None:
        """Drop the connection now: the upstream sees it closed and stops generating."""
        self.sink = None
        self.core.cancel()  # the rest of a read being parsed now reaches no sink (the body goes to it directly)
        if not self.closed:
            self.closed = True
            self.link.abort()

    def _fail(self, failure: Failure, sink: Sink | None = None) -> None:
        """Fail the connection and tell `sink` (by default the one attached now)."""
        self.failure = failure
        sink = sink if sink is not None else self.sink
        self.link.settle(failure)
        self.abort()
        if sink is not None:
            sink.upstream_lost(failure)

    def _internal(self, exc: Exception, sink: Sink | None) -> None:
        """A bug in our own code (the sink runs inside data_received and connection_lost): logged with its
        traceback, the connection dropped (its state is unknown), and `sink` told with an INTERNAL failure, which
        the exchange answers as its own error and never counts against the member."""
        text = bug_text(exc)
        log.error(json.dumps({"event": "internal_error", "member": self.pool.where, "error": text}), exc_info=exc)
        detail = f"internal error handling {self.pool.where}'s response: {text}"
        self._fail(Failure(FailureKind.INTERNAL, detail), sink)

    def _new_core(self) -> ClientConnection:
        # No on_body here: send hands each response the sink's own upstream_body (no forwarding call per read).
        return ClientConnection(on_head=self._head, on_end=self._end)

    def release(self) -> None:
        """The response is complete: back to the idle pool when the core says the connection can be reused."""
        self.sink = None
        if self.link.tls is not None and not self._session_kept:
            # TLS 1.3 tickets arrive after the handshake, so the session is taken once the first response is done,
            # and only then: reading SSLObject.session builds a new session object each time, and doing it per
            # response was 30 % of the gateway's CPU with 200 TLS streams (bench/RESULTS.md).
            self._session_kept = self.link.keep_session()
        if self.core.reusable and not self.closed and not self.link.closed_by_peer:
            self.core.detach()  # the finished core and its parser are freed by reference counting, not the collector
            self.core = self._new_core()  # idle: a byte from the server now is a protocol error
            self.gate.resume()  # the next exchange starts reading whatever this one's client left it at
            self.reused = True
            self.pool.put_idle(self)
        else:
            self.abort()


class ConnectionPool:
    """Idle keep-alive connections to one member; new ones through the one connect path (gateway/link.py)."""

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        on_handshake: Callable[[bool], None] | None = None,
    ) -> None:
        self.origin = Origin(host, port, tls, on_handshake)
        self.idle: deque[UpstreamConnection] = deque()

    @classmethod
    def of(cls, origin: Origin) -> ConnectionPool:
        """A pool for connections to `origin` that another pool opened (its TLS session shared)."""
        pool = cls(origin.host, origin.port)
        pool.origin = origin
        return pool

    @property
    def where(self) -> str:
        return self.origin.where

    def connection(self, link: UpstreamLink) -> UpstreamConnection:
        """An HTTP/1.1 connection of this pool's over `link` (the SpeakerFactory the connect path calls)."""
        return UpstreamConnection(self, link)

    async def acquire(self, connect_timeout_s: float, fresh: bool = False) -> UpstreamConnection:
        """An idle connection (unless `fresh`), or a new one connected (and TLS-handshaken) within the timeout.
        Raises AttemptFailed with the reason. `fresh` after a stale keep-alive failed: a server that closes idle
        connections lazily (hypercorn: on the next request past its keep-alive) has closed the others too."""
        conn = self.take_idle(fresh)
        if conn is not None:
            return conn
        speaker = await connect(self.origin, connect_timeout_s, {HTTP1: self.connection})
        assert isinstance(speaker, UpstreamConnection)
        return speaker

    def take_idle(self, fresh: bool = False) -> UpstreamConnection | None:
        while self.idle and not fresh:
            conn = self.idle.pop()  # most recently used: the least likely to have been timed out by the server
            if not conn.closed:
                return conn
        return None

    def claim(self, conn: UpstreamConnection) -> bool:
        """Take `conn` out of the idle ones for a request; False if another request took it (or it closed)."""
        if conn.closed or conn not in self.idle:
            return False
        self.idle.remove(conn)
        return True

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
