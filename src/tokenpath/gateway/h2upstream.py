"""Upstream side over HTTP/2 (the `h2` library's state machine; this module is its asyncio shell): many streams
multiplexed over few connections per member, ALPN over TLS or prior knowledge in clear text.

A stream hands the exchange the same Sink calls as an HTTP/1.1 connection (head, body per DATA frame, end, lost),
so the exchange does not know which protocol it speaks. What is particular to HTTP/2:

- Flow control never holds a token stream: each stream's receive window is 1 MiB and the connection's 1 GiB, and
  DATA is acknowledged as it is read. A stream whose client stops reading stops being acknowledged, so the member
  stops sending on that stream alone (at most one window buffered); the connection's other streams go on.
- A client that leaves resets its stream (RST_STREAM CANCEL): the member stops generating that answer only.
- GOAWAY: streams the member says it never processed (id above last_stream_id) fail as REFUSED_STREAM, which the
  exchange retries before the first byte; streams it did take run to their end; no new stream opens there.

What a member may not do (RFC 9113; the bounds below, each with its reason, are the ones Envoy and nginx enforce):

- A malformed response (an invalid `:status`, upper-case or forbidden field names, RFC 9113 8.1.1 / 8.2 / 8.3.2) is
  a *stream* error: that stream is reset with PROTOCOL_ERROR and fails as malformed (502, or the next member); the
  connection's other streams go on.
- Its SETTINGS_MAX_CONCURRENT_STREAMS is respected (RFC 9113 5.1.2): no stream opens before its SETTINGS arrive,
  then more connections open up to MAX_CONNECTIONS_PER_MEMBER, and past that a request waits for a free stream
  (up to the connect timeout).
- PUSH_PROMISE is refused by our first SETTINGS frame (ENABLE_PUSH=0), so one is a connection error at once.
- Floods close the connection with GOAWAY ENHANCE_YOUR_CALM before h2 parses them (FrameGuard): header blocks
  (bytes, CONTINUATION frames), PING / SETTINGS frames past a burst allowance; a frame over our
  SETTINGS_MAX_FRAME_SIZE with FRAME_SIZE_ERROR at its header (h2 would buffer it whole first).
- The HPACK dynamic table it lets us keep is capped (MAX_ENCODER_TABLE_SIZE), whatever it advertises.
- A window it never opens holds the request until the first-byte timeout (a 504, one failure of the member, as
  any silence is; logged as `h2_window_withheld`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
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
import h2.utilities
from hpack.struct import Header

from tokenpath.gateway.failures import Failure, FailureKind, connect_failure
from tokenpath.gateway.tls import TLSClient, describe
from tokenpath.gateway.upstream import AttemptFailed, Sink
from tokenpath.hostport import join_hostport
from tokenpath.wire.client import MAX_RESPONSE_HEAD_BYTES
from tokenpath.wire.h2client import response_head
from tokenpath.wire.h2guard import FrameGuard  # shared with the probe's and the server's HTTP/2 (floods, frame sizes)

log = logging.getLogger("tokenpath.gateway")

STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 1 << 30
# More connections to a member open only when each one is at its SETTINGS_MAX_CONCURRENT_STREAMS; past this many a
# request waits for a stream to end (up to the connect timeout), as it would for a member's full listen backlog.
MAX_CONNECTIONS_PER_MEMBER = 8
# The decoded response head we accept (SETTINGS_MAX_HEADER_LIST_SIZE, enforced by h2's HPACK decoder as it
# decodes): the same bound as an HTTP/1.1 member's head. An LLM API's response head is under 2 KB.
MAX_HEADER_LIST_SIZE = MAX_RESPONSE_HEAD_BYTES
# HPACK dynamic table we keep for the member's decoder, whatever SETTINGS_HEADER_TABLE_SIZE it advertises (RFC 7541
# 4.2 lets the encoder use less): RFC 7541's default, and nghttp2's (so Envoy's) deflate cap. Every request carries a
# fresh request id: an uncapped table keeps them all, and the encoder searches it linearly per field.
MAX_ENCODER_TABLE_SIZE = 4096
# Hop-by-hop and HTTP/1.1-only fields: forbidden in HTTP/2 (RFC 9113 8.2.2), or carried as pseudo-headers instead
NOT_IN_H2 = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host", "te"})
RESPONSE_FLAGS = h2.utilities.HeaderValidationFlags(
    is_client=True, is_trailer=False, is_response_header=True, is_push_promise=False
)
TRAILER_FLAGS = RESPONSE_FLAGS._replace(is_trailer=True)


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
        if self.pending_body and not self.closed:
            self.conn.report_withheld_window(self)
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
        # Response heads are validated here, per stream (_malformed), not by h2: h2 makes every malformed head a
        # connection error, which RFC 9113 8.1.1 makes a stream error.
        config = h2.config.H2Configuration(client_side=True, header_encoding=None, validate_inbound_headers=False)
        self.h2 = h2.connection.H2Connection(config)
        # In our first SETTINGS frame (h2's update_settings would send a second one, in force only once acknowledged,
        # so a member that never acknowledges could still push)
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_SIZE,
            },
        )
        self.h2.decoder.max_header_list_size = MAX_HEADER_LIST_SIZE
        loop = asyncio.get_running_loop()
        self.guard = FrameGuard(loop.time, self.h2.max_inbound_frame_size, peer_is_server=True)
        self.streams: dict[int, H2Stream] = {}
        self.started = False  # our preface is out
        self.closed = False
        self.goaway = False  # no new streams here
        self.completed = 0  # streams that ended normally here
        # Resolved by the member's first SETTINGS frame (its preface): no stream opens before its limits are known.
        self.ready: asyncio.Future[Failure | None] = loop.create_future()

    @property
    def has_room(self) -> bool:
        if self.closed or self.goaway or not self.ready.done() or self.ready.result() is not None:
            return False
        return len(self.streams) < self.h2.remote_settings.max_concurrent_streams

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
        try:
            self._received(data)
        except Exception as exc:  # the member's errors are caught by type in _received: this one is a bug of ours
            self._internal(exc)

    def _received(self, data: bytes) -> None:
        if self.tls is not None:
            try:
                data, reply = self.tls.receive(data)
            except ssl.SSLError as exc:
                self._lose(Failure(FailureKind.TLS, f"TLS with {self.pool.where}: {describe(exc)}"))
                return
            if reply and self.transport is not None:
                self.transport.write(reply)
            if self.tls.closed_by_peer and self.transport is not None and not self.transport.is_closing():
                # close_notify: the member is done with this connection (an idle timeout, a restart). Answer it and
                # close now, or the next stream would go out on it and meet a reset.
                self.goaway = True
                self.transport.write(self.tls.close_notify())
                self.transport.close()
            if not self.started and self.tls.handshaken:
                if self.tls.alpn != "h2":
                    alpn = f"{self.pool.where} did not agree to HTTP/2 (ALPN: {self.tls.alpn or 'none'})"
                    self._lose(Failure(FailureKind.TLS, alpn))
                    return
                self._start_h2()
            if not data:
                return
        flood = self.guard.feed(data)
        if flood is not None:
            self._calm(flood)
            return
        # One frame at a time: a stream reset for a malformed head must be in h2's state before that stream's next
        # frame is parsed (h2 makes a frame on a stream in the wrong state a connection error).
        touched: dict[int, Sink] = {}
        view, start = memoryview(data), 0
        for cut in [*self.guard.ends, len(data)]:
            if cut <= start:
                continue
            try:
                events = self.h2.receive_data(view[start:cut])
            except h2.exceptions.ProtocolError as exc:
                self._flush()  # h2's GOAWAY, with the error code
                self._lose(Failure(FailureKind.MALFORMED, f"HTTP/2 protocol error from {self.pool.where}: {exc}"))
                return
            start = cut
            for event in events:
                self._handle(event, touched)
        self._flush()
        for sink in touched.values():
            sink.upstream_read_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        why = f": {exc}" if exc else ""
        try:
            self._lose(Failure(FailureKind.UPSTREAM_CLOSED, f"{self.pool.where} closed the connection{why}"))
        except Exception as bug:  # raised by a sink: ours, not the member's
            self._internal(bug)

    # streams -------------------------------------------------------------------------------------------------
    def start_stream(
        self, stream: H2Stream, method: str, authority: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        if not self.has_room:
            asyncio.get_running_loop().call_soon(self._refuse, stream, "the connection closed before the request")
            return
        stream_id = self.h2.get_next_available_stream_id()
        stream.stream_id = stream_id
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https" if self.tls is not None else b"http"),
            (b":authority", authority.encode()),
            (b":path", target.encode()),
        ]
        for name, value in headers:
            lname = name.lower()
            if lname not in NOT_IN_H2:
                fields.append((lname.encode(), value.encode("latin-1")))
        try:
            self.h2.send_headers(stream_id, fields, end_stream=not body)
        except h2.exceptions.H2Error as exc:  # e.g. h2 still counts a stream the member ended as open
            asyncio.get_running_loop().call_soon(self._refuse, stream, f"no stream could be opened: {exc!r}")
            return
        self.streams[stream_id] = stream
        self.guard.window_updates_owed += 1  # some servers open a new stream's window beyond its initial size
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

    def report_withheld_window(self, stream: H2Stream) -> None:
        """A stream given up with its request body unsent: say so when the member's window is what held it."""
        try:
            window = self.h2.local_flow_control_window(stream.stream_id)
        except h2.exceptions.H2Error:
            return
        if window <= 0:
            event = {
                "event": "h2_window_withheld",
                "member": self.pool.where,
                "stream": stream.stream_id,
                "unsent_bytes": len(stream.pending_body),
                "detail": "the member never opened its flow-control window for the request",
            }
            log.warning(json.dumps(event))

    # internals -----------------------------------------------------------------------------------------------
    def _start_h2(self) -> None:
        # Stream windows are opened by a WINDOW_UPDATE per stream, not by SETTINGS_INITIAL_WINDOW_SIZE: a larger
        # initial window only counts once the member acknowledges it, so both sides could disagree for a moment.
        self.started = True
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._flush()

    def _handle(self, event: h2.events.Event, touched: dict[int, Sink]) -> None:
        if isinstance(event, h2.events.ResponseReceived | h2.events.InformationalResponseReceived):
            assert event.stream_id is not None
            assert event.headers is not None
            informational = isinstance(event, h2.events.InformationalResponseReceived)
            why = _malformed(event.headers, RESPONSE_FLAGS, informational)
            if why is not None:
                self._reset_malformed(event.stream_id, why, touched)
                return
            if informational:
                return  # 1xx: the response follows
            stream = self.streams.get(event.stream_id)
            if stream is not None and stream.sink is not None:
                stream.got_bytes = True
                touched[event.stream_id] = stream.sink
                stream.sink.upstream_head(response_head(event.headers, stream.method))
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
        elif isinstance(event, h2.events.TrailersReceived):
            assert event.stream_id is not None
            assert event.headers is not None
            why = _malformed(event.headers, TRAILER_FLAGS, False)
            if why is not None:
                self._reset_malformed(event.stream_id, why, touched)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None and stream.pending_body:  # answered before the whole request was read
                stream.pending_body = b""
                with contextlib.suppress(h2.exceptions.H2Error):  # RFC 9113 8.1: we may stop sending it
                    self.h2.reset_stream(event.stream_id, h2.errors.ErrorCodes.NO_ERROR)
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
                kind = (
                    FailureKind.REFUSED_STREAM
                    if event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
                    else FailureKind.UPSTREAM_CLOSED
                )
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
            if self.h2.encoder.header_table_size > MAX_ENCODER_TABLE_SIZE:  # h2 took the member's value as it is
                self.h2.encoder.header_table_size = MAX_ENCODER_TABLE_SIZE
            if not self.ready.done():
                self.ready.set_result(None)
            self.pool.freed()  # a larger SETTINGS_MAX_CONCURRENT_STREAMS makes room
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
            # the member may give this frame back on the stream and on the connection, even a KiB at a time
            self.guard.window_updates_owed += 2 * max(1, len(piece) // 1024)

    def _reset_malformed(self, stream_id: int, why: str, touched: dict[int, Sink]) -> None:
        """RFC 9113 8.1.1: a malformed response is a stream error of type PROTOCOL_ERROR; the connection goes on."""
        stream = self.streams.pop(stream_id, None)
        touched.pop(stream_id, None)
        with contextlib.suppress(h2.exceptions.H2Error):  # (already closed, e.g. malformed trailers)
            self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.PROTOCOL_ERROR)
        if stream is not None:
            why = f"malformed response from {self.pool.where} (stream {stream_id} reset, the connection kept): {why}"
            self._fail_stream(stream, Failure(FailureKind.MALFORMED, why))
        self._maybe_close()

    def _calm(self, why: str) -> None:
        """A flood (FrameGuard): GOAWAY ENHANCE_YOUR_CALM (RFC 9113 10.5) and close; its streams fail."""
        with contextlib.suppress(h2.exceptions.H2Error):
            self.h2.close_connection(self.guard.error_code)
            self._flush()
        self._lose(Failure(FailureKind.MALFORMED, f"HTTP/2 flood from {self.pool.where}: {why}; connection closed"))

    def _internal(self, exc: Exception) -> None:
        """A bug of ours while handling the member's bytes (a sink runs inside data_received): logged with its
        traceback; the connection's state is unknown, so it is dropped, and its streams fail as INTERNAL (never the
        member's fault)."""
        log.error(json.dumps({"event": "internal_error", "member": self.pool.where, "error": repr(exc)}), exc_info=exc)
        self._lose(Failure(FailureKind.INTERNAL, f"internal error handling {self.pool.where}'s HTTP/2: {exc!r}"))

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
        while self.streams:  # one at a time: a sink that raises (our bug) must not leave the rest untold
            _, stream = self.streams.popitem()
            self._fail_stream(stream, failure)
        if self.transport is not None:
            self.transport.abort()

    def _maybe_close(self) -> None:
        self.pool.freed()  # called whenever a stream left this connection
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


def _malformed(headers: list[Header], flags: h2.utilities.HeaderValidationFlags, informational: bool) -> str | None:
    """Why a response's (or its trailers') field block is malformed (RFC 9113 8.1.1, 8.2, 8.3.2), or None: h2's
    field checks (lower-case names, no connection-specific fields, pseudo-fields), then a `:status` of three digits
    in 100-599 (RFC 9110 15), 1xx for an interim response."""
    try:
        fields = list(h2.utilities.validate_headers(headers, flags))
    except h2.exceptions.ProtocolError as exc:
        return str(exc)
    if flags.is_trailer:
        return None
    status = next((v for n, v in fields if n == b":status"), b"")
    low, high = (100, 199) if informational else (100, 599)
    if len(status) != 3 or not status.isdigit() or not low <= int(status) <= high:
        return f":status {status.decode('latin-1')!r} is not a status code (three digits, {low}-{high})"
    return None


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
        self._room = asyncio.Event()  # set when a stream ends or a connection leaves: waiting requests look again

    @property
    def where(self) -> str:
        return join_hostport(self.host, self.port)

    async def acquire(self, connect_timeout_s: float, fresh: bool = False) -> H2Stream:
        """A stream on a connection with room, or on a new one; with every connection at the member's stream limit
        and MAX_CONNECTIONS_PER_MEMBER open, the first stream to free up (within the connect timeout). `fresh`: on a
        new connection, not one already open (a retry after REFUSED_STREAM; a failed connection has left already)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + connect_timeout_s
        while True:
            if not fresh:
                for conn in self.connections:
                    if conn.has_room:
                        return H2Stream(conn)
            if len(self.connections) >= MAX_CONNECTIONS_PER_MEMBER:
                fresh = False  # no new connection: the first stream to end on one of these
                left = deadline - loop.time()
                if left <= 0:
                    limit = min(c.h2.remote_settings.max_concurrent_streams for c in self.connections)
                    raise AttemptFailed(
                        Failure(
                            FailureKind.CONNECT_TIMEOUT,
                            f"{self.where}: no HTTP/2 stream free "
                            f"within {connect_timeout_s:g} s ({len(self.connections)} connections"
                            f", SETTINGS_MAX_CONCURRENT_STREAMS {limit})",
                        )
                    )
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), left)
                continue
            if self._connecting is None:  # concurrent requests share one connection attempt
                self._connecting = loop.create_task(self._connect(connect_timeout_s))
            task = self._connecting
            try:
                conn = await asyncio.shield(task)
            finally:
                if task.done() and self._connecting is task:
                    self._connecting = None
            if conn.has_room:
                return H2Stream(conn)
            # a burst filled it before we got there: look again

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
            raise AttemptFailed(
                Failure(FailureKind.CONNECT_TIMEOUT, f"connect to {self.where} timed out after {connect_timeout_s:g} s")
            ) from None
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
        self.freed()

    def freed(self) -> None:
        self._room.set()

    def close(self) -> None:
        for conn in list(self.connections):
            conn.close()
        self.connections.clear()
