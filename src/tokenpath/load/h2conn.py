"""HTTP/2 for the load client: N streams per connection (the browser/CDN shape), each recorded as over HTTP/1.1.

One asyncio protocol per connection drives the sans-IO core (wire/h2client.py): every `data_received` is one
socket read, handed to the core with its time; the core cuts it into per-stream events, and each stream's DATA
payload of that read goes to its own H2LeanRecorder (load/lean.py). An arrival of a stream is therefore a read that
advanced that stream (DATA frames of several streams in one read are an arrival for each), as the README defines.

H2LoadPool hands out streams: a connection takes at most `per_connection` streams at once, or fewer when the peer's
SETTINGS_MAX_CONCURRENT_STREAMS is lower (then more connections are opened, and `peer_limit` says why). Connections
are kept for the next stream (a browser's do), closed when the peer sends GOAWAY and its streams are done.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.errors import (
    ConnectError,
    ConnectTimeout,
    HTTP2Unavailable,
    NetworkError,
    PeerError,
    RemoteProtocolError,
    TLSError,
    TokenpathError,
)
from tokenpath.hostport import join_hostport
from tokenpath.load.lean import H2LeanRecorder, LeanTrace
from tokenpath.probe.aio import connect_protocol
from tokenpath.wire.ending import STREAM_END
from tokenpath.wire.h2client import FlowStats, H2ClientConnection, H2NoRoom, H2Window
from tokenpath.wire.h2events import ConnectionEnded, DataReceived, HeadReceived, StreamEnded, StreamReset

SETTINGS_WAIT_S = 10.0  # the peer's first SETTINGS after connecting: an HTTP/2 server sends it at once
MAX_TRIES = 8  # a stream's tries at a connection with room: a lower peer limit or a GOAWAY costs one each
CLOSE_WAIT_S = 1.0  # how long a closing connection waits for the peer's close before aborting
RecorderFactory = Callable[[str, int], H2LeanRecorder]


@dataclass(frozen=True, slots=True)
class H2Request:
    """A request as HTTP/2 fields: the same header lines and body the HTTP/1.1 client sends."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


def h2_request(raw: bytes) -> H2Request:
    """`raw` (probe.client.request_bytes: our own HTTP/1.1 request) as HTTP/2 fields; Host becomes the connection's
    :authority and Connection/Content-Length are the core's to drop or set (wire/h2client.py), so both protocols
    send the same headers."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("not an HTTP/1.1 request: no end of head")
    request_line, *lines = head.decode("latin-1").split("\r\n")
    method, path, _ = request_line.split(" ", 2)
    headers = []
    for line in lines:
        name, _, value = line.partition(":")
        if name.lower() not in ("host", "connection", "content-length", "keep-alive", "transfer-encoding"):
            headers.append((name.strip(), value.strip()))
    return H2Request(method, path, tuple(headers), body)


@dataclass(frozen=True, slots=True)
class StreamFlow:
    """A stream's HTTP/2 figures, as plain data (they cross a process boundary in the worker's report)."""

    data_frames: int = 0  # DATA frames received
    reads: int = 0  # socket reads that carried DATA of this stream
    stalls: int = 0  # times its receive window was left below one frame before it ended
    stall_ns: int = 0  # time spent so, summed

    @classmethod
    def of(cls, stats: FlowStats) -> StreamFlow:
        return cls(stats.data_frames, stats.reads, stats.stalls, stats.stall_ns)


class _Stream:
    __slots__ = ("done", "recorder")

    def __init__(self, recorder: H2LeanRecorder, done: asyncio.Future[tuple[LeanTrace, StreamFlow]]) -> None:
        self.recorder = recorder
        self.done = done


class H2LoadConnection(asyncio.Protocol):
    """One client connection: writes the preface, feeds every read to the core, routes its events to streams."""

    def __init__(self, authority: str, scheme: str, window: H2Window, clock: Clock = monotonic_ns) -> None:
        loop = asyncio.get_running_loop()
        self.authority = authority
        self.core = H2ClientConnection(authority=authority, scheme=scheme, window=window)
        self._clock = clock
        self._transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}
        self.reserved = 0  # streams waiting for this connection to be ready
        self.accepting = True  # False after GOAWAY or an error: no new stream here
        self.ready: asyncio.Future[None] = loop.create_future()  # the peer's first SETTINGS arrived
        self.ready.add_done_callback(_retrieve)
        self.closed: asyncio.Future[None] = loop.create_future()

    # --- asyncio.Protocol -----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tls = transport.get_extra_info("ssl_object")
        if tls is not None and tls.selected_alpn_protocol() != "h2":
            chosen = tls.selected_alpn_protocol() or "none"
            why = f"{self.authority} did not agree to HTTP/2 over TLS (ALPN chose {chosen}); --http2 never falls back"
            self.fail(HTTP2Unavailable(f"{why} to HTTP/1.1"))
            return
        self._transport.write(self.core.initiate())

    def data_received(self, data: bytes) -> None:
        t = self._clock()
        try:
            events = self.core.receive(data, t)
        except TokenpathError as exc:  # not HTTP/2 at all (HTTP2Unavailable), a protocol violation, a flood
            self.fail(exc)
            return
        for event in events:
            if isinstance(event, StreamReset):
                reset = NetworkError(f"the peer reset the stream (HTTP/2 error {event.error_code})")
                self._end(event.stream_id, reset)
            elif isinstance(event, ConnectionEnded):
                self.accepting = False  # streams at or below its last id go on to their end
            elif (stream := self.streams.get(event.stream_id)) is not None:
                self._on_stream(event, stream, t)
        self._flush()
        if not self.ready.done() and self.core.peer_settings_seen:
            self.ready.set_result(None)
        self._close_if_drained()

    def eof_received(self) -> bool | None:
        self.fail(RemoteProtocolError("the peer closed the HTTP/2 connection before the response ended"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(NetworkError(f"HTTP/2 connection lost before the response ended: {exc or 'closed'}"))
        if not self.closed.done():
            self.closed.set_result(None)

    # --- streams --------------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._transport is not None

    @property
    def usable(self) -> bool:
        return self.accepting and not (self.ready.done() and self.ready.exception() is not None)

    def capacity(self, per_connection: int) -> int:
        """Streams this connection may carry at once: the asked-for number, or the peer's lower limit."""
        if not self.ready.done():
            return per_connection
        return min(per_connection, self.core.max_concurrent_streams)

    def load(self) -> int:
        return len(self.streams) + self.reserved

    def open(
        self, request: H2Request, stream_id: str, make: RecorderFactory
    ) -> asyncio.Future[tuple[LeanTrace, StreamFlow]]:
        """Send `request` as a new stream (H2NoRoom at the peer's limit); its recorder's sent time is read before the
        write (probe/trace.py SENT_RULE)."""
        assert self._transport is not None
        sid = self.core.open_stream(request.method, request.path, headers=list(request.headers), body=request.body)
        sent = self._clock()
        self._flush()
        done: asyncio.Future[tuple[LeanTrace, StreamFlow]] = asyncio.get_running_loop().create_future()
        self.streams[sid] = _Stream(make(stream_id, sent), done)
        return done

    def cancel(self, future: asyncio.Future[tuple[LeanTrace, StreamFlow]]) -> None:
        """The caller gave up on a stream (its timeout): RST_STREAM CANCEL, and the connection goes on."""
        for sid, stream in list(self.streams.items()):
            if stream.done is future:
                self.streams.pop(sid)
                self.core.cancel(sid)
                self.core.forget(sid)
                self._flush()
                self._close_if_drained()

    def close(self) -> None:
        """GOAWAY, then close (the pool's end)."""
        self.accepting = False
        if self._transport is not None and not self._transport.is_closing():
            self.core.close()
            self._flush()
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _on_stream(self, event: HeadReceived | DataReceived | StreamEnded, stream: _Stream, t: int) -> None:
        sid = event.stream_id
        try:
            if isinstance(event, DataReceived):
                stream.recorder.on_data(t, event.data)
            elif isinstance(event, HeadReceived):
                stream.recorder.on_head(event.head)
            else:
                stream.recorder.on_end(t)
                self._finish(sid)
        except PeerError as exc:  # a frame past its limit, an encoding it cannot decode
            self.core.cancel(sid)
            self._end(sid, exc)

    def _finish(self, sid: int) -> None:
        stream = self.streams.pop(sid, None)
        flow = StreamFlow.of(self.core.flow(sid))
        self.core.forget(sid)
        if stream is not None and not stream.done.done():
            stream.done.set_result((stream.recorder.result(), flow))

    def _end(self, sid: int, exc: Exception) -> None:
        """Stream `sid` failed with `exc`: its own copy (a dead connection fails every stream with one error), with
        the end it gave this stream attached (wire/ending.py)."""
        stream = self.streams.pop(sid, None)
        self.core.forget(sid)
        if stream is not None and not stream.done.done():
            end = stream.recorder.cut(exc, self._clock())
            stream.done.set_exception(STREAM_END.attach(copy.copy(exc), end) if end is not None else exc)

    def fail(self, exc: Exception) -> None:
        """The connection is dead: every stream on it fails with `exc`, and so does a wait for it to be ready."""
        self.accepting = False
        if not self.ready.done():
            self.ready.set_exception(exc)
        for sid in list(self.streams):
            self._end(sid, exc)
        if self._transport is not None:
            with contextlib.suppress(Exception):
                self._flush()  # the core's GOAWAY, when it has one
            self._transport.abort()

    def _flush(self) -> None:
        out = self.core.data_to_send()
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(out)

    def _close_if_drained(self) -> None:
        if not self.accepting and not self.streams and self._transport is not None:
            self._transport.close()


def _retrieve(future: asyncio.Future[None]) -> None:
    """A ready-wait that failed after every waiter gave up must not log 'exception never retrieved'."""
    if not future.cancelled():
        future.exception()


class H2LoadPool:
    """Streams over HTTP/2 connections to one target, `per_connection` at once on each."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        per_connection: int,
        window: H2Window,
        ssl_context: ssl.SSLContext | None = None,
        clock: Clock = monotonic_ns,
    ) -> None:
        if per_connection < 1:
            raise ValueError("per_connection must be >= 1")
        self.host, self.port = host, port
        self.per_connection = per_connection
        self.window = window
        self.ssl_context = ssl_context
        self.clock = clock
        self.authority = join_hostport(host, port)
        self.conns: list[H2LoadConnection] = []
        self.opened = 0  # connections opened over the pool's life
        self.peer_limit: int | None = None  # the peer's SETTINGS_MAX_CONCURRENT_STREAMS, when below per_connection
        self._tasks: set[asyncio.Task[None]] = set()

    async def stream(
        self, request: H2Request, stream_id: str, make: RecorderFactory, *, timeout_s: float
    ) -> tuple[LeanTrace, StreamFlow]:
        """One stream on a connection with room (opening one when none has): its trace and flow figures.
        `timeout_s` covers all of it, connecting too (TimeoutError past it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for _ in range(MAX_TRIES):
            conn = self._pick() or self._new(timeout_s)
            conn.reserved += 1
            try:
                await asyncio.wait_for(asyncio.shield(conn.ready), max(deadline - loop.time(), 0))
            finally:
                conn.reserved -= 1
            limit = conn.core.max_concurrent_streams
            if limit < self.per_connection:
                self.peer_limit = limit if self.peer_limit is None else min(self.peer_limit, limit)
            if not conn.usable or len(conn.streams) >= conn.capacity(self.per_connection):
                continue  # others took its room, or the peer allows fewer: another connection
            try:
                done = conn.open(request, stream_id, make)
            except H2NoRoom:
                continue
            try:
                return await asyncio.wait_for(asyncio.shield(done), max(deadline - loop.time(), 0))
            except TimeoutError:
                conn.cancel(done)
                raise
        raise PeerError(f"no HTTP/2 connection to {self.authority} had room for a stream after {MAX_TRIES} tries")

    def _pick(self) -> H2LoadConnection | None:
        """The first connection (in opening order) with room: streams pack onto as few connections as allowed."""
        self.conns = [c for c in self.conns if c.usable or c.streams]
        for conn in self.conns:
            if conn.usable and conn.load() < conn.capacity(self.per_connection):
                return conn
        return None

    def _new(self, timeout_s: float) -> H2LoadConnection:
        conn = H2LoadConnection(self.authority, "https" if self.ssl_context else "http", self.window, self.clock)
        self.conns.append(conn)
        self.opened += 1
        task = asyncio.ensure_future(self._connect(conn, timeout_s))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return conn

    async def _connect(self, conn: H2LoadConnection, timeout_s: float) -> None:
        where = self.authority
        try:
            await connect_protocol(lambda: conn, self.host, self.port, timeout_s, self.ssl_context)
        except (TLSError, ConnectTimeout, ConnectError) as exc:
            conn.fail(exc)
        else:
            # A server that says nothing holds every stream waiting on this connection: bounded here.
            with contextlib.suppress(Exception):  # failed already: the waiters have its error
                await asyncio.wait_for(asyncio.shield(conn.ready), SETTINGS_WAIT_S)
            if not conn.ready.done():
                silent = f"{where} sent no HTTP/2 SETTINGS within {SETTINGS_WAIT_S:g} s of connecting"
                conn.fail(HTTP2Unavailable(f"{silent}: is it an HTTP/2 server? (--http2 never falls back)"))

    async def aclose(self) -> None:
        """GOAWAY and close every connection; return once each is gone (or aborted after CLOSE_WAIT_S)."""
        for task in list(self._tasks):
            task.cancel()
        for conn in self.conns:
            conn.close()
        loop = asyncio.get_running_loop()
        for conn in self.conns:
            if conn.closed.done() or not conn.connected:
                continue
            abort = loop.call_later(CLOSE_WAIT_S, conn.abort)
            try:
                await conn.closed
            finally:
                abort.cancel()
        self.conns = []
