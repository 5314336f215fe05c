"""Upstream side over HTTP/2: many streams multiplexed over few connections per member, ALPN over TLS or prior
knowledge in clear text. The HTTP/2 is wire/h2client.py's (the sans-IO client core the probe and the load client
drive too); this module is its shell over a link (gateway/link.py, the one connect path).

A stream hands the exchange the same Sink calls as an HTTP/1.1 connection (head, body per read, end, lost), so the
exchange does not know which protocol it speaks. What is particular to HTTP/2:

- Flow control never holds a token stream: each stream's receive window is 1 MiB and the connection's 1 GiB
  (UPSTREAM_WINDOW), and DATA is given back as it is read. A stream whose client stops reading is paused (the core
  stops giving its window back), so the member stops sending on that stream alone (at most one window buffered);
  the connection's other streams go on.
- A client that leaves resets its stream (RST_STREAM CANCEL): the member stops generating that answer only.
- GOAWAY: streams the member says it never processed (id above last_stream_id) fail as REFUSED_STREAM, which the
  exchange retries before the first byte; streams it did take run to their end; no new stream opens there.
- A member that picks `http/1.1` by ALPN is spoken to in HTTP/1.1 (gateway/upstream.py's connections, kept idle
  in this pool's `http1`), as httpcore does.

What a member may not do (RFC 9113; the bounds, each with its reason, are the ones Envoy and nginx enforce, and the
core's):

- A malformed response (an invalid `:status`, upper-case or forbidden field names, RFC 9113 8.1.1 / 8.2 / 8.3.2) is
  a *stream* error: that stream is reset with PROTOCOL_ERROR and fails as malformed (502, or the next member); the
  connection's other streams go on.
- Its SETTINGS_MAX_CONCURRENT_STREAMS is respected (RFC 9113 5.1.2): no stream opens before its SETTINGS arrive,
  then more connections open up to MAX_CONNECTIONS_PER_MEMBER, and past that a request waits for a free stream
  (up to the connect timeout).
- PUSH_PROMISE is refused by our first SETTINGS frame (ENABLE_PUSH=0), so one is a connection error at once.
- Floods close the connection with GOAWAY ENHANCE_YOUR_CALM before h2 parses them (the core's FrameGuard, facing a
  server): header blocks (bytes, CONTINUATION frames), PING / SETTINGS frames and 1xx heads past a burst allowance;
  a frame over our SETTINGS_MAX_FRAME_SIZE with FRAME_SIZE_ERROR at its header (h2 would buffer it whole first).
- The HPACK dynamic table it lets us keep is capped (the core's MAX_ENCODER_TABLE_SIZE), whatever it advertises.
- A window it never opens holds the request until the first-byte timeout (a 504, one failure of the member, as
  any silence is; logged as `h2_window_withheld`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Callable
from time import monotonic_ns

from tokenpath.errors import LocalProtocolError, PeerError
from tokenpath.gateway.failures import Failure, FailureKind, bug_text
from tokenpath.gateway.link import H2, HTTP1, AttemptFailed, Origin, SpeakerFactory, UpstreamLink, connect
from tokenpath.gateway.upstream import ConnectionPool, Sink, UpstreamConnection
from tokenpath.wire.h2client import H2ClientConnection, H2Window
from tokenpath.wire.h2events import (
    REFUSED_STREAM,
    ConnectionEnded,
    DataReceived,
    H2Event,
    HeadReceived,
    StreamEnded,
    StreamReset,
    error_name,
)

log = logging.getLogger("tokenpath.gateway")

STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 1 << 30
UPSTREAM_WINDOW = H2Window(STREAM_WINDOW, CONNECTION_WINDOW)
# More connections to a member open only when each one is at its SETTINGS_MAX_CONCURRENT_STREAMS; past this many a
# request waits for a stream to end (up to the connect timeout), as it would for a member's full listen backlog.
MAX_CONNECTIONS_PER_MEMBER = 8


class H2UpstreamStream:
    """One request on a shared connection, with the surface the exchange uses of an HTTP/1.1 connection."""

    def __init__(self, conn: H2UpstreamConnection) -> None:
        self.conn = conn
        # On a connection that served streams before, a failure before any byte may be a connection the member
        # had closed meanwhile: like a stale keep-alive, retried once on a fresh one.
        self.reused = conn.completed > 0
        self.stream_id = 0
        self.sink: Sink | None = None
        self.got_bytes = False
        self.closed = False

    def send_request(
        self, sink: Sink, method: str, authority: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        self.sink = sink
        self.conn.start_stream(self, method, authority, target, headers, body)

    def pause(self) -> None:
        """Our client is not reading: the member's window for this stream is no longer given back."""
        if self.stream_id:
            self.conn.core.pause(self.stream_id)

    def resume(self) -> None:
        if self.stream_id and not self.closed:
            self.conn.resume(self.stream_id)

    def abort(self) -> None:
        """The client left (or the attempt is given up): reset this stream only."""
        self.sink = None
        if not self.closed:
            self.closed = True
            self.conn.cancel(self)

    def release(self) -> None:
        self.sink = None
        self.closed = True


class H2UpstreamConnection:
    """One HTTP/2 connection to a member over a link: the core's events to each stream's Sink, in the same read."""

    def __init__(self, pool: H2UpstreamPool, link: UpstreamLink) -> None:
        self.pool = pool
        self.link = link
        scheme = "https" if link.tls is not None else "http"
        self.core = H2ClientConnection(authority=pool.where, scheme=scheme, window=UPSTREAM_WINDOW)
        self.streams: dict[int, H2UpstreamStream] = {}
        self.closed = False
        self.goaway = False  # the member's close_notify: no new streams here (the core knows of its GOAWAY)
        self.completed = 0  # streams that ended normally here
        self._settings = 0  # the member's SETTINGS frames handled: its first makes the connection ready
        link.write(self.core.initiate())

    @property
    def has_room(self) -> bool:
        return not self.closed and not self.goaway and self.core.has_room

    # the link's side -------------------------------------------------------------------------------------------
    def received(self, data: bytes) -> None:
        try:
            try:
                events = self.core.receive(data, monotonic_ns())
            except PeerError as exc:  # a protocol error, a flood, an answer that is not HTTP/2
                self._flush()  # our GOAWAY, with its error code
                self._lose(Failure(FailureKind.MALFORMED, f"{self.pool.where}: {exc}"))
                return
            touched: dict[int, Sink] = {}
            streams = self.streams
            for event in events:
                if event.__class__ is DataReceived:  # the relay's path: one per stream per read
                    stream = streams.get(event.stream_id)
                    if stream is not None and stream.sink is not None:
                        touched[event.stream_id] = stream.sink
                        if event.data:
                            stream.sink.upstream_body(event.data)
                else:
                    self._handle(event, touched)
            if self.core.peer_settings != self._settings:
                self._settings_received()
            out = self.core.data_to_send()  # _flush inlined (once per read): a WINDOW_UPDATE, a SETTINGS ACK
            if out and not self.closed:
                self.link.write(out)
            for sink in touched.values():
                sink.upstream_read_done()
        except Exception as exc:  # the member's errors are caught by type above: this one is a bug of ours
            self._internal(exc)

    def broken(self, failure: Failure) -> None:
        self._lose(failure)

    def peer_closing(self) -> None:
        self.goaway = True

    def lost(self, exc: Exception | None) -> None:
        self.closed = True
        why = f": {exc}" if exc else ""
        try:
            self._lose(Failure(FailureKind.UPSTREAM_CLOSED, f"{self.pool.where} closed the connection{why}"))
        except Exception as bug:  # raised by a sink: ours, not the member's
            self._internal(bug)

    # streams -------------------------------------------------------------------------------------------------
    def start_stream(
        self,
        stream: H2UpstreamStream,
        method: str,
        authority: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> None:
        loop = asyncio.get_running_loop()
        if not self.has_room:
            loop.call_soon(self._refuse, stream, "the connection closed before the request")
            return
        try:
            stream_id = self.core.open_stream(method, target, headers, body, authority=authority)
        except LocalProtocolError as exc:  # e.g. h2 still counts a stream the member ended as open
            loop.call_soon(self._refuse, stream, f"no stream could be opened: {exc}")
            return
        stream.stream_id = stream_id
        self.streams[stream_id] = stream
        self._flush()

    def resume(self, stream_id: int) -> None:
        """A paused stream's client reads again: give the member back the window it used meanwhile."""
        self.core.resume(stream_id)
        self._flush()

    def cancel(self, stream: H2UpstreamStream) -> None:
        stream_id = stream.stream_id
        self.streams.pop(stream_id, None)
        if stream_id and not self.closed:
            self._report_withheld_window(stream_id)
            self.core.cancel(stream_id)
            self.core.forget(stream_id)
            self._flush()
        self._maybe_close()

    def _report_withheld_window(self, stream_id: int) -> None:
        """A stream given up with its request body unsent: say so when the member's window is what held it."""
        unsent, window = self.core.unsent_body(stream_id)
        if unsent and window <= 0:
            event = {
                "event": "h2_window_withheld",
                "member": self.pool.where,
                "stream": stream_id,
                "unsent_bytes": unsent,
                "detail": "the member never opened its flow-control window for the request",
            }
            log.warning(json.dumps(event))

    # internals -----------------------------------------------------------------------------------------------
    def _handle(self, event: H2Event, touched: dict[int, Sink]) -> None:
        match event:
            case HeadReceived(stream_id=stream_id, head=head):
                stream = self.streams.get(stream_id)
                if stream is not None and stream.sink is not None:
                    stream.got_bytes = True
                    touched[stream_id] = stream.sink
                    stream.sink.upstream_head(head)
            case StreamEnded(stream_id=stream_id):
                stream = self.streams.pop(stream_id, None)
                self.core.forget(stream_id)
                if stream is not None and stream.sink is not None:
                    sink, stream.sink = stream.sink, None
                    touched.pop(stream_id, None)
                    stream.closed = True
                    self.completed += 1
                    sink.upstream_complete()
                self._maybe_close()
            case StreamReset(stream_id=stream_id):
                stream = self.streams.pop(stream_id, None)
                self.core.forget(stream_id)
                if stream is not None:
                    touched.pop(stream_id, None)
                    self._fail_stream(stream, self._reset_failure(event))
                self._maybe_close()
            case ConnectionEnded():  # the streams it refused follow as StreamReset(REFUSED_STREAM)
                self._maybe_close()

    def _reset_failure(self, event: StreamReset) -> Failure:
        where, sid = self.pool.where, event.stream_id
        if event.reason:  # ours, for a stream error: the connection is kept
            return Failure(
                FailureKind.MALFORMED, f"{event.reason} from {where} (stream {sid} reset, the connection kept)"
            )
        if event.error_code != REFUSED_STREAM:
            return Failure(FailureKind.UPSTREAM_CLOSED, f"{where} reset the stream ({error_name(event.error_code)})")
        goaway = self.core.last_goaway
        if goaway is not None and sid > goaway.last_stream_id:
            return Failure(FailureKind.REFUSED_STREAM, f"{where} sent GOAWAY before processing the stream")
        return Failure(FailureKind.REFUSED_STREAM, f"{where} reset the stream (REFUSED_STREAM)")

    def _settings_received(self) -> None:
        """The member's SETTINGS: its first (its preface) makes the connection ready, since no stream opens before
        its limits are known; a larger SETTINGS_MAX_CONCURRENT_STREAMS later makes room."""
        first = self._settings == 0
        self._settings = self.core.peer_settings
        if first:
            self.link.keep_session()
            self.link.settle(None)
        self.pool.freed()

    def _internal(self, exc: Exception) -> None:
        """A bug of ours while handling the member's bytes (a sink runs inside data_received): logged with its
        traceback; the connection's state is unknown, so it is dropped, and its streams fail as INTERNAL (never the
        member's fault)."""
        text = bug_text(exc)
        log.error(json.dumps({"event": "internal_error", "member": self.pool.where, "error": text}), exc_info=exc)
        self._lose(Failure(FailureKind.INTERNAL, f"internal error handling {self.pool.where}'s HTTP/2: {text}"))

    def _fail_stream(self, stream: H2UpstreamStream, failure: Failure) -> None:
        stream.closed = True
        sink, stream.sink = stream.sink, None
        if sink is not None:
            sink.upstream_lost(failure)

    def _refuse(self, stream: H2UpstreamStream, why: str) -> None:
        self._fail_stream(stream, Failure(FailureKind.REFUSED_STREAM, f"{self.pool.where}: {why}"))

    def _lose(self, failure: Failure) -> None:
        """The connection is gone (or unusable): every stream on it fails with this reason."""
        self.link.settle(failure)
        self.closed = True
        self.pool.forget(self)
        while self.streams:  # one at a time: a sink that raises (our bug) must not leave the rest untold
            _, stream = self.streams.popitem()
            self._fail_stream(stream, failure)
        self.link.abort()

    def _maybe_close(self) -> None:
        self.pool.freed()  # called whenever a stream left this connection
        if (self.goaway or self.core.goaway) and not self.streams and not self.closed:
            self.closed = True
            self.pool.forget(self)
            self.link.close()

    def _flush(self) -> None:
        data = self.core.data_to_send()
        if data and not self.closed:
            self.link.write(data)

    def close(self) -> None:
        """GOAWAY NO_ERROR, then close (the pool's end)."""
        if self.closed:
            return
        self.core.close()
        self._flush()
        self.closed = True
        self.link.close()


class H2UpstreamPool:
    """The HTTP/2 connections to one member; a request gets a stream on one with room, or a new connection (and an
    HTTP/1.1 connection of `http1` where the member picked HTTP/1.1 by ALPN)."""

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        on_handshake: Callable[[bool], None] | None = None,
    ) -> None:
        self.origin = Origin(host, port, tls, on_handshake)
        self.connections: list[H2UpstreamConnection] = []
        self.http1 = ConnectionPool.of(self.origin)
        self.protocols: dict[str, SpeakerFactory] = {H2: self.connection, HTTP1: self.http1.connection}
        self.speaks_http1 = False  # the member's last new connection chose HTTP/1.1 by ALPN
        self._connecting: asyncio.Task[UpstreamConnection | H2UpstreamConnection] | None = None
        self._room = asyncio.Event()  # set when a stream ends or a connection leaves: waiting requests look again

    @property
    def where(self) -> str:
        return self.origin.where

    def connection(self, link: UpstreamLink) -> H2UpstreamConnection:
        """An HTTP/2 connection of this pool's over `link` (the SpeakerFactory the connect path calls)."""
        return H2UpstreamConnection(self, link)

    async def acquire(self, connect_timeout_s: float, fresh: bool = False) -> H2UpstreamStream | UpstreamConnection:
        """A stream on a connection with room, or on a new one; with every connection at the member's stream limit
        and MAX_CONNECTIONS_PER_MEMBER open, the first stream to free up (within the connect timeout). `fresh`: on a
        new connection, not one already open (a retry after REFUSED_STREAM; a failed connection has left already)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + connect_timeout_s
        while True:
            if not fresh:
                for conn in self.connections:
                    if conn.has_room:
                        return H2UpstreamStream(conn)
                idle = self.http1.take_idle()
                if idle is not None:
                    return idle
            if self.speaks_http1:  # a connection per request, as the HTTP/1.1 pool's
                new = await self._connect(connect_timeout_s)
                if isinstance(new, UpstreamConnection):
                    return new
            elif len(self.connections) >= MAX_CONNECTIONS_PER_MEMBER:
                fresh = False  # no new connection: the first stream to end on one of these
                await self._wait_for_room(deadline, connect_timeout_s)
                continue
            else:
                new = await self._connect_shared(connect_timeout_s)
                if isinstance(new, UpstreamConnection):  # one request's: the others connect their own
                    if self.http1.claim(new):
                        return new
                    continue
            if new.has_room:
                return H2UpstreamStream(new)
            # a burst filled it before we got there: look again

    async def _wait_for_room(self, deadline: float, connect_timeout_s: float) -> None:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            limit = min(c.core.max_concurrent_streams for c in self.connections)
            raise AttemptFailed(
                Failure(
                    FailureKind.CONNECT_TIMEOUT,
                    f"{self.where}: no HTTP/2 stream free within {connect_timeout_s:g} s ({len(self.connections)} "
                    f"connections, SETTINGS_MAX_CONCURRENT_STREAMS {limit})",
                )
            )
        self._room.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._room.wait(), left)

    async def _connect_shared(self, connect_timeout_s: float) -> UpstreamConnection | H2UpstreamConnection:
        """Concurrent requests share one connection attempt while the member may speak HTTP/2; an HTTP/1.1
        connection it ends in (ALPN) waits idle for the first of them to claim it."""
        if self._connecting is None:
            self._connecting = asyncio.get_running_loop().create_task(self._connect(connect_timeout_s, shared=True))
        task = self._connecting
        try:
            return await asyncio.shield(task)
        finally:
            if task.done() and self._connecting is task:
                self._connecting = None

    async def _connect(
        self, connect_timeout_s: float, shared: bool = False
    ) -> UpstreamConnection | H2UpstreamConnection:
        new = await connect(self.origin, connect_timeout_s, self.protocols)
        assert isinstance(new, UpstreamConnection | H2UpstreamConnection)
        self.speaks_http1 = isinstance(new, UpstreamConnection)
        if isinstance(new, H2UpstreamConnection):
            self.connections.append(new)
        elif shared:
            self.http1.put_idle(new)
        return new

    def forget(self, conn: H2UpstreamConnection) -> None:
        if conn in self.connections:
            self.connections.remove(conn)
        self.freed()

    def freed(self) -> None:
        self._room.set()

    def close(self) -> None:
        for conn in list(self.connections):
            conn.close()
        self.connections.clear()
        self.http1.close()
