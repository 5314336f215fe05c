"""Upstream side over HTTP/2 (the `h2` library's state machine; this module is its asyncio shell): many streams
multiplexed over few connections per member, ALPN over TLS or prior knowledge in clear text.

A stream hands the exchange the same Sink calls as an HTTP/1.1 connection (head, body per DATA frame, end, lost),
so the exchange does not know which protocol it speaks. What is particular to HTTP/2:

- Flow control never holds a token stream: each stream's receive window is 1 MiB and the connection's 1 GiB, and
  DATA is acknowledged as it is read. A stream whose client stops reading stops being acknowledged, so the member
  stops sending on that stream alone (at most one window buffered); the connection's other streams go on.
- A client that leaves resets its stream (RST_STREAM CANCEL): the member stops generating that answer only.
- GOAWAY: streams the member says it never processed (id above last_stream_id) fail as REFUSED_STREAM, which the
  exchange retries before the first byte; streams it did take run to their end; no new stream opens there."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable
from typing import cast

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from tokenpath.gateway.failures import Failure, FailureKind, connect_failure
from tokenpath.gateway.tls import TLSClient, describe
from tokenpath.gateway.upstream import AttemptFailed, Sink
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import Framing

STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 1 << 30
MAX_CONNECTIONS_PER_MEMBER = 8  # more only when the member's SETTINGS_MAX_CONCURRENT_STREAMS is reached on each
# Streams opened on a connection before the member's SETTINGS arrive: h2 assumes no limit until then, and a member
# that allows 100 (hypercorn, nginx's default 128) resets the whole connection when a burst opens more.
STREAMS_BEFORE_SETTINGS = 100
# Hop-by-hop and HTTP/1.1-only fields: forbidden in HTTP/2 (RFC 9113 8.2.2), or carried as pseudo-headers instead
NOT_IN_H2 = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host", "te"})
BODILESS_STATUS = (204, 304)


class H2Stream:
    """One request on a shared connection, with the surface the exchange uses of an HTTP/1.1 connection."""

    def __init__(self, conn: H2Connection) -> None:
        self.conn = conn
        # On a connection that served streams before, a failure before any byte may be a connection the member
        # had closed meanwhile: like a stale keep-alive, retried once on a fresh one.
        self.reused = conn.completed > 0
        self.stream_id = 0
        self.sink: Sink | None = None
        self.method = "GET"
        self.got_bytes = False
        self.closed = False
        self.paused = False
        self.unacked = 0  # received while paused: acknowledged on resume
        self.pending_body = b""  # request body bytes waiting for flow-control window

    def send_request(
        self, sink: Sink, method: str, authority: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        self.sink = sink
        self.method = method
        self.conn.start_stream(self, method, authority, target, headers, body)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.conn.reopen(self, self.unacked)
            self.unacked = 0

    def abort(self) -> None:
        """The client left (or the attempt is given up): reset this stream only."""
        self.sink = None
        if not self.closed:
            self.closed = True
            self.conn.cancel(self)

    def release(self) -> None:
        self.sink = None
        self.closed = True


class H2Connection(asyncio.Protocol):
    def __init__(self, pool: H2Pool, tls: TLSClient | None) -> None:
        self.pool = pool
        self.tls = tls
        self.transport: asyncio.Transport | None = None
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.streams: dict[int, H2Stream] = {}
        self.closed = False
        self.goaway = False  # no new streams here
        self.settings_received = False
        self.completed = 0  # streams that ended normally here
        self.ready: asyncio.Future[Failure | None] = asyncio.get_running_loop().create_future()

    @property
    def has_room(self) -> bool:
        if self.closed or self.goaway or not self.ready.done() or self.ready.result() is not None:
            return False
        limit = self.h2.remote_settings.max_concurrent_streams if self.settings_received else STREAMS_BEFORE_SETTINGS
        return len(self.streams) < limit

    # asyncio ---------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is None:
            self._start_h2()
        else:
            self.transport.write(self.tls.start())

    def data_received(self, data: bytes) -> None:
        if self.tls is not None:
            try:
                data, reply = self.tls.receive(data)
            except ssl.SSLError as exc:
                self._lose(Failure(FailureKind.TLS, f"TLS with {self.pool.where}: {describe(exc)}"))
                return
            if reply and self.transport is not None:
                self.transport.write(reply)
            if self.tls.closed_by_peer and self.transport is not None:
                # close_notify: the member is done with this connection (an idle timeout, a restart). Close it
                # now, or the next stream would go out on it and meet a reset.
                self.goaway = True
                self.transport.close()
            if not self.ready.done() and self.tls.handshaken:
                if self.tls.alpn != "h2":
                    why = f"{self.pool.where} did not agree to HTTP/2 (ALPN: {self.tls.alpn or 'none'})"
                    self._lose(Failure(FailureKind.TLS, why))
                    return
                self._start_h2()
            if not data:
                return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._lose(Failure(FailureKind.MALFORMED, f"HTTP/2 protocol error from {self.pool.where}: {exc}"))
            return
        touched: dict[int, Sink] = {}
        for event in events:
            self._handle(event, touched)
        self._flush()
        for sink in touched.values():
            sink.upstream_read_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        why = f": {exc}" if exc else ""
        self._lose(Failure(FailureKind.UPSTREAM_CLOSED, f"{self.pool.where} closed the connection{why}"))

    # streams -------------------------------------------------------------------------------------------------
    def start_stream(
        self, stream: H2Stream, method: str, authority: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        if not self.has_room:
            asyncio.get_running_loop().call_soon(self._refuse, stream, "the connection closed before the request")
            return
        stream_id = self.h2.get_next_available_stream_id()
        stream.stream_id = stream_id
        self.streams[stream_id] = stream
        fields = [
            (b":method", method.encode()), (b":scheme", b"https" if self.tls is not None else b"http"),
            (b":authority", authority.encode()), (b":path", target.encode()),
        ]  # fmt: skip
        for name, value in headers:
            lname = name.lower()
            if lname not in NOT_IN_H2:
                fields.append((lname.encode(), value.encode("latin-1")))
        self.h2.send_headers(stream_id, fields, end_stream=not body)
        self.h2.increment_flow_control_window(STREAM_WINDOW - 65535, stream_id)
        if body:
            stream.pending_body = body
            self._send_body(stream)
        self._flush()

    def reopen(self, stream: H2Stream, size: int) -> None:
        """A paused stream's client reads again: give the member back the window it used meanwhile."""
        if size and not stream.closed and stream.stream_id in self.streams:
            self.h2.increment_flow_control_window(size, stream.stream_id)
            self._flush()

    def cancel(self, stream: H2Stream) -> None:
        self.streams.pop(stream.stream_id, None)
        if stream.stream_id and not self.closed:
            with contextlib.suppress(h2.exceptions.H2Error):  # already closed on the member's side
                self.h2.reset_stream(stream.stream_id, h2.errors.ErrorCodes.CANCEL)
            self._flush()
        self._maybe_close()

    # internals -----------------------------------------------------------------------------------------------
    def _start_h2(self) -> None:
        # Stream windows are opened by a WINDOW_UPDATE per stream, not by SETTINGS_INITIAL_WINDOW_SIZE: a larger
        # initial window only counts once the member acknowledges it, so both sides could disagree for a moment.
        self.h2.initiate_connection()
        self.h2.update_settings({h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._flush()
        if not self.ready.done():
            self.ready.set_result(None)

    def _handle(self, event: h2.events.Event, touched: dict[int, Sink]) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None and stream.sink is not None:
                stream.got_bytes = True
                touched[event.stream_id] = stream.sink
                stream.sink.upstream_head(_head(event.headers, stream.method))
        elif isinstance(event, h2.events.DataReceived):
            stream = self.streams.get(event.stream_id)
            size = event.flow_controlled_length
            if stream is None or stream.sink is None:
                self.h2.acknowledge_received_data(size, event.stream_id)  # keep the connection window open
                return
            if stream.paused:
                stream.unacked += size
                self.h2.increment_flow_control_window(size)  # the connection's share: other streams go on
            else:
                self.h2.acknowledge_received_data(size, event.stream_id)
            touched[event.stream_id] = stream.sink
            if event.data:
                stream.sink.upstream_body(event.data)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None and stream.sink is not None:
                sink, stream.sink = stream.sink, None
                touched.pop(event.stream_id, None)
                stream.closed = True
                self.completed += 1
                sink.upstream_complete()
            self._maybe_close()
        elif isinstance(event, h2.events.StreamReset):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                kind = FailureKind.REFUSED_STREAM if event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM \
                    else FailureKind.UPSTREAM_CLOSED  # fmt: skip
                self._fail_stream(stream, Failure(kind, f"{self.pool.where} reset the stream ({event.error_code!r})"))
                touched.pop(event.stream_id, None)
            self._maybe_close()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = True
            last = event.last_stream_id if event.last_stream_id is not None else 0
            if any(stream_id <= last for stream_id in self.streams):
                # h2 goes CLOSED on GOAWAY and then refuses every frame (python-hyper/h2#1199), also the DATA of
                # streams the member still serves, which RFC 9113 6.8 lets complete (hypercorn sends GOAWAY after
                # 1,000 requests on a connection, mid-stream for the others). Back to open for them only: no
                # stream is opened here again (self.goaway).
                self.h2.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
            for stream_id in [s for s in self.streams if s > last]:
                stream = self.streams.pop(stream_id)
                why = f"{self.pool.where} sent GOAWAY before processing the stream"
                self._fail_stream(stream, Failure(FailureKind.REFUSED_STREAM, why))
                touched.pop(stream_id, None)
            self._maybe_close()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.settings_received = True
        elif isinstance(event, h2.events.WindowUpdated):
            for stream in list(self.streams.values()):
                if stream.pending_body:
                    self._send_body(stream)

    def _send_body(self, stream: H2Stream) -> None:
        h2conn = self.h2
        while stream.pending_body:
            window = min(h2conn.local_flow_control_window(stream.stream_id), h2conn.max_outbound_frame_size)
            if window <= 0:
                return  # resumed on WindowUpdated
            piece, stream.pending_body = stream.pending_body[:window], stream.pending_body[window:]
            h2conn.send_data(stream.stream_id, piece, end_stream=not stream.pending_body)

    def _fail_stream(self, stream: H2Stream, failure: Failure) -> None:
        stream.closed = True
        sink, stream.sink = stream.sink, None
        if sink is not None:
            sink.upstream_lost(failure)

    def _refuse(self, stream: H2Stream, why: str) -> None:
        self._fail_stream(stream, Failure(FailureKind.REFUSED_STREAM, f"{self.pool.where}: {why}"))

    def _lose(self, failure: Failure) -> None:
        """The connection is gone (or unusable): every stream on it fails with this reason."""
        if not self.ready.done():
            self.ready.set_result(failure)
        self.closed = True
        self.pool.forget(self)
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            self._fail_stream(stream, failure)
        if self.transport is not None:
            self.transport.abort()

    def _maybe_close(self) -> None:
        if self.goaway and not self.streams and self.transport is not None and not self.closed:
            self.closed = True
            self.pool.forget(self)
            self.transport.close()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.closed:
            self.transport.write(self.tls.encrypt(data) if self.tls is not None else data)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            try:
                self.h2.close_connection()
                self._flush()
            except h2.exceptions.H2Error:
                pass
            self.transport.close()


def _head(headers: list[tuple[bytes, bytes]], method: str) -> ResponseHead:
    status = 0
    fields = []
    for name, value in headers:
        if name == b":status":
            status = int(value)
        elif not name.startswith(b":"):
            fields.append((name.decode("latin-1"), value.decode("latin-1")))
    has_length = any(n == "content-length" for n, _ in fields)
    if method == "HEAD" or status in BODILESS_STATUS:
        framing = Framing.NONE
    else:
        framing = Framing.LENGTH if has_length else Framing.CHUNKED  # DATA frames: a stream, whatever the length
    return ResponseHead(status, "2", tuple(fields), framing, keep_alive=True)


class H2Pool:
    """The HTTP/2 connections to one member; a request gets a stream on one with room, or a new connection."""

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        on_handshake: Callable[[bool], None] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.session: ssl.SSLSession | None = None
        self.on_handshake = on_handshake
        self.connections: list[H2Connection] = []
        self._connecting: asyncio.Task[H2Connection] | None = None

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    async def acquire(self, connect_timeout_s: float, fresh: bool = False) -> H2Stream:
        """A stream on a connection with room, or on a new one. (`fresh` is for HTTP/1.1's idle pool: a failed
        HTTP/2 connection has already left this pool.)"""
        while True:
            for conn in self.connections:
                if conn.has_room:
                    return H2Stream(conn)
            if len(self.connections) >= MAX_CONNECTIONS_PER_MEMBER:
                raise AttemptFailed(Failure(FailureKind.REFUSED_STREAM, f"{self.where}: every HTTP/2 connection "
                                            "is at the member's stream limit"))  # fmt: skip
            if self._connecting is None:  # concurrent requests share one connection attempt
                self._connecting = asyncio.get_running_loop().create_task(self._connect(connect_timeout_s))
            task = self._connecting
            try:
                await asyncio.shield(task)  # then look for room again: a burst may fill it before we get there
            finally:
                if task.done() and self._connecting is task:
                    self._connecting = None

    async def _connect(self, connect_timeout_s: float) -> H2Connection:
        loop = asyncio.get_running_loop()
        proto: H2Connection | None = None

        def factory() -> H2Connection:
            nonlocal proto
            tls = TLSClient(self.tls, self.host, self.session) if self.tls is not None else None
            proto = H2Connection(self, tls)
            return proto

        async def connect() -> Failure | None:
            await loop.create_connection(factory, self.host, self.port)
            assert proto is not None
            return await proto.ready

        try:
            failure = await asyncio.wait_for(connect(), connect_timeout_s)
        except TimeoutError:
            if proto is not None and proto.transport is not None:
                proto.transport.abort()
            raise AttemptFailed(Failure(FailureKind.CONNECT_TIMEOUT, f"connect to {self.where} timed out after "
                                        f"{connect_timeout_s:g} s")) from None  # fmt: skip
        except OSError as exc:
            raise AttemptFailed(connect_failure(exc, self.where)) from None
        assert proto is not None
        if failure is not None:
            raise AttemptFailed(failure)
        if proto.tls is not None:
            if proto.tls.session is not None:
                self.session = proto.tls.session
            if self.on_handshake is not None:
                self.on_handshake(proto.tls.resumed)
        self.connections.append(proto)
        return proto

    def forget(self, conn: H2Connection) -> None:
        if conn in self.connections:
            self.connections.remove(conn)

    def close(self) -> None:
        for conn in list(self.connections):
            conn.close()
        self.connections.clear()
