"""The HTTP/2 client connection core: sans-IO, on the `h2` library's state machine (client side).

Whoever owns the socket writes `initiate()` and every `data_to_send()`, and hands each socket read to
`receive(data, t_ns)` with the time the read returned; it gets the read's events back, per stream:

- `HeadReceived` (the response head, as wire/client.py's ResponseHead with http_version "2"),
- `DataReceived`: ONE per stream per read, the payload of all of that stream's DATA frames in the read and how many
  frames it completed (the arrival rule stays: an arrival is a socket read; a read that advanced three streams is an
  arrival for each of them, decided by their own frame readers). h2 parses whole frames only; the bytes of a DATA
  frame the read cut go out with that read all the same (as an HTTP/1.1 reader, nghttp2 and Chromium have them),
  and the rest with the read that completes it, which counts the frame,
- `StreamEnded`, `StreamReset` (the peer's RST_STREAM, a stream GOAWAY refused, or ours for a stream error: a
  malformed response head, RFC 9113 8.1.1, resets that stream only and the connection goes on), `ConnectionEnded`
  (GOAWAY).

Every HTTP/2 client of ours drives this core: the probe (probe/h2stream.py), the load client (load/h2conn.py) and the
gateway's connections to its HTTP/2 members (gateway/h2upstream.py), which also pauses a stream's window while its
own client is not reading (`pause` / `resume`: the connection's share is still given back, so the other streams go
on) and learns from `unsent_body` whether the peer's window is what held a request body.

Flow control is a stated condition, never a library default (`H2Window`): our receive windows are set in our first
SETTINGS frame (SETTINGS_INITIAL_WINDOW_SIZE, as browsers do) and by a WINDOW_UPDATE on the connection right after
it. WINDOW_UPDATE is sent as the client consumes the data (`auto_ack`: each read is consumed when it has been
recorded; a paused stream's share when it resumes), batched by the rule nghttp2, Chromium and the h2 library share:
a window is given back once half of it is consumed (or it is left below one frame). Each stream's `FlowStats` says
how often a read left its window (or the connection's) below one max frame while it had not ended — the peer could
not send a full frame until our WINDOW_UPDATE reached it — and for how long, as far as the client can tell: from that
read to the next read that brought the stream data (or its end).

A hostile server cannot grow our memory without bound (wire/h2guard.py reads frame headers before h2 parses them):
a frame over our SETTINGS_MAX_FRAME_SIZE, a header block over MAX_HEADER_BLOCK_BYTES or with too many
CONTINUATIONs, PING/SETTINGS past a burst allowance end the connection (GOAWAY, RemoteProtocolError). h2 holds at most
one partial frame; the decoded header list is capped (MAX_HEADER_LIST_SIZE); PUSH is disabled in our first SETTINGS;
the HPACK table the peer may make us keep is capped (MAX_ENCODER_TABLE_SIZE). A request body goes out as the peer's
windows allow, each byte copied once.

A server that does not speak HTTP/2 (its first bytes are not a SETTINGS frame: an HTTP/1.1 server answers the
preface with "HTTP/1.1 400") raises HTTP2Unavailable: h2c with prior knowledge never falls back silently. Over TLS,
ALPN is checked by the socket's owner (probe/transport.py) and raises the same error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from tokenpath.errors import HTTP2Unavailable, LocalProtocolError, ProtocolViolation, UsageError
from tokenpath.wire.h2events import (
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    ConnectionEnded,
    DataReceived,
    H2Event,
    HeadReceived,
    StreamEnded,
    StreamReset,
)
from tokenpath.wire.h2guard import DATA, MAX_HEADER_LIST_SIZE, PADDED, SETTINGS, FrameGuard
from tokenpath.wire.h2head import malformed, response_head

# RFC 9113 6.5.2 / 6.9.2: every window starts at 65,535 until SETTINGS or WINDOW_UPDATE change it.
RFC_DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1  # RFC 9113 6.9.1
# The DATA frame size we accept (SETTINGS_MAX_FRAME_SIZE, RFC 9113 default): a larger frame is refused at its header.
MAX_FRAME_SIZE = 16_384
# HPACK dynamic table we keep for the peer's decoder, whatever SETTINGS_HEADER_TABLE_SIZE it advertises (RFC 7541 4.2
# lets the encoder use less): RFC 7541's default, and nghttp2's (so Envoy's) deflate cap. Every gateway request
# carries a fresh request id: an uncapped table keeps them all, and the encoder searches it linearly per field.
MAX_ENCODER_TABLE_SIZE = 4096
# Request fields that are HTTP/1.1's own and forbidden in HTTP/2 (RFC 9113 8.2.2), or carried as pseudo-fields.
NOT_IN_H2 = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host", "te"})
_H2_DATA = h2.events.DataReceived  # the hot event, compared by class
PREVIEW_BYTES = 40  # of a non-HTTP/2 answer, shown in the error


@dataclass(frozen=True, slots=True)
class H2Window:
    """Our receive windows: `stream` for every stream (SETTINGS_INITIAL_WINDOW_SIZE), `connection` for all of them
    together (never below 65,535: a connection window can only be opened, RFC 9113 6.9.2)."""

    stream: int = RFC_DEFAULT_WINDOW
    connection: int = RFC_DEFAULT_WINDOW
    name: str = ""  # "default", "browser", or "" for numbers

    def __post_init__(self) -> None:
        if not 1 <= self.stream <= MAX_WINDOW:
            raise UsageError(f"an HTTP/2 stream window must be 1-{MAX_WINDOW} bytes, not {self.stream}")
        if not RFC_DEFAULT_WINDOW <= self.connection <= MAX_WINDOW:
            raise UsageError(
                f"an HTTP/2 connection window must be {RFC_DEFAULT_WINDOW}-{MAX_WINDOW} bytes, not {self.connection}"
            )

    def __str__(self) -> str:
        if self.name:
            return self.name
        if self.connection == max(self.stream, RFC_DEFAULT_WINDOW):
            return str(self.stream)
        return f"{self.stream}:{self.connection}"


# What many clients keep (the RFC's initial windows: curl/nghttp2 and the h2 library by default).
DEFAULT_WINDOW = H2Window(RFC_DEFAULT_WINDOW, RFC_DEFAULT_WINDOW, "default")
# Chromium's, from net/http/http_network_session.cc: kSpdyStreamMaxRecvWindowSize = 6 * 1024 * 1024 (sent as
# SETTINGS_INITIAL_WINDOW_SIZE 6291456) and kSpdySessionMaxRecvWindowSize = 15 * 1024 * 1024 (the session's
# WINDOW_UPDATE of 15728640 - 65535 = 15663105 right after the SETTINGS, SpdySession::SendInitialData).
BROWSER_WINDOW = H2Window(6 * 1024 * 1024, 15 * 1024 * 1024, "browser")


def parse_h2_window(text: str) -> H2Window:
    """`default`, `browser`, `BYTES` (the stream window; the connection's the same, at least 65,535) or
    `STREAM:CONNECTION`. str() of the result parses back to it."""
    value = text.strip().lower()
    if value in ("default", ""):
        return DEFAULT_WINDOW
    if value == "browser":
        return BROWSER_WINDOW
    stream_text, sep, conn_text = value.partition(":")
    try:
        stream = int(stream_text.replace("_", ""))
        conn = int(conn_text.replace("_", "")) if sep else max(stream, RFC_DEFAULT_WINDOW)
    except ValueError:
        raise UsageError(
            f"h2 window {text!r}: expected `default`, `browser`, BYTES or STREAM_BYTES:CONNECTION_BYTES"
        ) from None
    return H2Window(stream, conn)


@dataclass(slots=True)
class FlowStats:
    """Flow control as the client saw it, for one stream (or for the connection window)."""

    data_frames: int = 0  # DATA frames received
    data_bytes: int = 0  # flow-controlled bytes (payload and padding)
    reads: int = 0  # reads that completed a DATA frame of it (a read that only began one is not counted)
    stalls: int = 0  # reads that left its window (or the connection's) below one frame while it had not ended
    stall_ns: int = 0  # from each such read to the next read that brought it DATA or its end
    min_window: int = MAX_WINDOW  # the lowest receive window seen after a read (before our WINDOW_UPDATE)
    stalled_since: int | None = field(default=None, repr=False)

    @property
    def stall_ms(self) -> float:
        return self.stall_ns / 1e6


class _ReadData:
    """One stream's DATA in the read being translated, gathered frame by frame into its DataReceived."""

    __slots__ = ("chunks", "event", "size")

    def __init__(self, event: DataReceived) -> None:
        self.event = event
        self.chunks: list[bytes] = []
        self.size = 0  # flow-controlled bytes of the frames completed (payload and padding)


class _Read:
    """What one read did, gathered while h2's events are translated; its figures are settled once, at its end."""

    __slots__ = ("data", "ended", "out")

    def __init__(self) -> None:
        self.out: list[H2Event] = []
        self.data: dict[int, _ReadData] = {}  # stream -> its one DataReceived of this read, being filled
        self.ended: dict[int, None] = {}  # streams this read ended, reset or refused (an ordered set)

    def start_data(self, sid: int) -> _ReadData:
        """The stream's DataReceived of this read, in the read's order at its first DATA."""
        event = DataReceived(sid, b"", 0)
        self.out.append(event)
        part = self.data[sid] = _ReadData(event)
        return part


class H2NoRoom(LocalProtocolError):
    """open_stream() past the peer's SETTINGS_MAX_CONCURRENT_STREAMS (or after GOAWAY): open another connection."""


@dataclass(slots=True)
class _Stream:
    flow: FlowStats = field(default_factory=FlowStats)
    window: int = 0  # our receive window as the peer sees it once our last WINDOW_UPDATE arrived
    unacked: int = 0  # consumed, not yet given back
    received: int = 0  # received since the last consume (auto_ack: consumed at the end of the read)
    held: int = 0  # received while paused: the connection's share given back, the stream's on resume
    paused: bool = False
    body: memoryview | None = None  # the request body, while some of it waits for the peer's window
    sent: int = 0  # bytes of `body` sent
    ended: bool = False  # ended, reset or refused: no more data
    headed: bool = False  # its final head came: DATA may follow
    method: str = "POST"  # the request's: a HEAD's answer has no content


@dataclass(slots=True)
class _Early:
    """A DATA frame cut by a read: its payload so far, and how many data bytes of it were delivered before h2 (which
    parses whole frames only) saw it whole."""

    serial: int  # the guard's frame serial number
    stream_id: int
    flags: int
    length: int
    payload: bytearray = field(default_factory=bytearray)
    delivered: int = 0


class H2ClientConnection:
    """One client connection. Not thread-safe; every method may leave bytes for data_to_send()."""

    def __init__(
        self,
        *,
        authority: str,
        scheme: str = "http",
        window: H2Window = DEFAULT_WINDOW,
        auto_ack: bool = True,
    ) -> None:
        self.authority = authority
        self.scheme = scheme
        self.window = window
        self.auto_ack = auto_ack
        # Response heads are checked here, per stream (h2head.malformed), not by h2: h2 makes every malformed head a
        # connection error, which RFC 9113 8.1.1 makes a stream error.
        config = h2.config.H2Configuration(client_side=True, header_encoding=None, validate_inbound_headers=False)
        self._h2 = h2.connection.H2Connection(config)
        # In our first SETTINGS frame (h2's update_settings would send a second one, in force only once acknowledged,
        # so a peer that never acknowledges could still push, or hold our streams to 65,535 bytes)
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window.stream,
                h2.settings.SettingCodes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_SIZE,
            },
        )
        self._h2.max_inbound_frame_size = MAX_FRAME_SIZE
        # What to write to the peer now (h2's own method: a shell calls it after every read)
        self.data_to_send: Callable[[], bytes] = self._h2.data_to_send
        self._h2.decoder.max_header_list_size = MAX_HEADER_LIST_SIZE
        self._now_s = 0.0  # the guard's clock: the t_ns of the read being parsed
        self._guard = FrameGuard(lambda: self._now_s, MAX_FRAME_SIZE, peer_is_server=True)
        self._first = b""  # the peer's first frame header, until it is known to be SETTINGS
        self._checked_preface = False
        self._early: _Early | None = None  # the DATA frame the last read cut, if any
        self._streams: dict[int, _Stream] = {}
        self._sending: dict[int, _Stream] = {}  # streams whose request body waits for the peer's window
        self._open = 0  # streams opened and not ended, reset or refused
        self._conn = _Stream(window=window.connection)
        # a window below one frame is shut (the peer cannot send a full frame); half a window is given back at once
        self._low_stream, self._low_connection = (
            min(MAX_FRAME_SIZE, window.stream),
            min(MAX_FRAME_SIZE, window.connection),
        )
        self._half_stream, self._half_connection = window.stream // 2, window.connection // 2
        self._initiated = False
        self.peer_settings_seen = False
        self.peer_settings = 0  # SETTINGS frames received: a change of the peer's stream limit may make room
        self.goaway = False
        self.last_goaway: ConnectionEnded | None = None  # the peer's GOAWAY, for an error message
        self.dead = False  # a protocol error or a flood ended it
        self.reads = 0

    # the application's side -------------------------------------------------------------------------------------
    def initiate(self) -> bytes:
        """The connection preface, our SETTINGS and the connection's WINDOW_UPDATE (open_stream() queues them too
        when this was not called)."""
        self._start()
        return self.data_to_send()

    def _start(self) -> None:
        if not self._initiated:
            self._initiated = True
            self._h2.initiate_connection()
            if self.window.connection > RFC_DEFAULT_WINDOW:
                self._h2.increment_flow_control_window(self.window.connection - RFC_DEFAULT_WINDOW)

    @property
    def max_concurrent_streams(self) -> int:
        return int(self._h2.remote_settings.max_concurrent_streams)

    @property
    def open_streams(self) -> int:
        return self._open

    @property
    def has_room(self) -> bool:
        """A stream may open here now: the peer's SETTINGS are known, no GOAWAY, below its stream limit."""
        return (
            self.peer_settings_seen and not self.goaway and not self.dead and self._open < self.max_concurrent_streams
        )

    @property
    def connection_flow(self) -> FlowStats:
        return self._conn.flow

    def open_stream(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
        *,
        authority: str | None = None,
    ) -> int:
        """A new stream with this request; returns its id. Fields HTTP/2 forbids (Host, Connection...) are left out:
        the authority (the connection's, unless given) goes in `:authority`. A body is sent as the peer's window
        allows. H2NoRoom past the peer's limit or after GOAWAY; LocalProtocolError for a request h2 will not send."""
        self._start()
        if self.goaway or self.dead or self._open >= self.max_concurrent_streams:
            raise H2NoRoom(
                f"no stream can open here (open {self._open}, peer's limit {self.max_concurrent_streams}"
                f"{', after GOAWAY' if self.goaway else ''})"
            )
        stream_id = self._h2.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", self.scheme.encode()),
            (b":authority", (authority or self.authority).encode()),
            (b":path", path.encode()),
        ]
        for name, value in headers:
            lname = name.lower()
            if lname not in NOT_IN_H2:
                fields.append((lname.encode(), value.encode("latin-1")))
        if body and not any(n == b"content-length" for n, _ in fields):
            fields.append((b"content-length", str(len(body)).encode()))
        try:
            self._h2.send_headers(stream_id, fields, end_stream=not body)
        except h2.exceptions.TooManyStreamsError as exc:
            raise H2NoRoom(str(exc)) from None
        except h2.exceptions.H2Error as exc:  # a field h2 will not send
            raise LocalProtocolError(f"no stream could be opened: {exc!r}") from None
        stream = _Stream(window=self.window.stream, method=method)
        self._streams[stream_id] = stream
        self._open += 1
        self._guard.window_updates_owed += 1  # some servers open a new stream's window beyond its initial size
        if body:
            stream.body = memoryview(body)
            self._sending[stream_id] = stream
            self._send_body(stream_id, stream)
        return stream_id

    def consume(self, stream_id: int, nbytes: int) -> None:
        """The reader consumed nbytes of this stream (auto_ack=False): WINDOW_UPDATE when half a window is due."""
        stream = self._streams.get(stream_id)
        if stream is None or nbytes <= 0:
            return
        nbytes = min(nbytes, stream.received)
        stream.received -= nbytes
        self._conn.received -= nbytes
        stream.unacked += nbytes
        self._conn.unacked += nbytes
        self._give_back(stream_id, stream)

    def pause(self, stream_id: int) -> None:
        """(auto_ack) The stream's reader is full: stop giving its window back, so the peer can send it at most what is
        left of one window. What arrives meanwhile is still given back on the connection: the other streams go on."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.paused = True

    def resume(self, stream_id: int) -> None:
        """The stream's reader reads again: what arrived while it was paused is consumed."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.paused:
            return
        stream.paused = False
        if stream.held:
            stream.unacked += stream.held
            stream.held = 0
            self._give_back(stream_id, stream)

    def cancel(self, stream_id: int) -> None:
        """RST_STREAM CANCEL (the client gave up on it)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.ended:
            return
        self._end(stream_id, stream)
        with contextlib.suppress(h2.exceptions.H2Error):
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)

    def unsent_body(self, stream_id: int) -> tuple[int, int]:
        """(bytes of the stream's request body not sent yet, the peer's window for them now: the smaller of the
        stream's and the connection's)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.body is None:
            return 0, 0
        try:
            window = self._h2.local_flow_control_window(stream_id)
        except h2.exceptions.H2Error:  # closed meanwhile
            window = 0
        return len(stream.body) - stream.sent, window

    def close(self, error_code: int = 0) -> None:
        """GOAWAY (write data_to_send() before closing the socket)."""
        with contextlib.suppress(h2.exceptions.H2Error):
            self._h2.close_connection(error_code)

    def flow(self, stream_id: int) -> FlowStats:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise KeyError(stream_id)
        return stream.flow

    def forget(self, stream_id: int) -> None:
        """Drop an ended stream's figures (a long-lived connection would otherwise keep one per stream)."""
        stream = self._streams.get(stream_id)
        if stream is not None and stream.ended:
            del self._streams[stream_id]

    # the peer's side ---------------------------------------------------------------------------------------------
    def receive(self, data: bytes, t_ns: int) -> list[H2Event]:
        """One socket read (with, over TLS, what was already readable). Raises HTTP2Unavailable if the peer is not
        speaking HTTP/2, RemoteProtocolError for a protocol violation or a flood (then write data_to_send(), which
        holds our GOAWAY, and close)."""
        if self.dead:
            raise LocalProtocolError("receive() after the connection failed")
        self.reads += 1
        self._now_s = t_ns / 1e9
        if not self._checked_preface:
            self._check_preface(data)
        guard = self._guard
        flood = guard.feed(data)
        if flood is not None:
            self._fail(guard.error_code)
            raise ProtocolViolation(f"HTTP/2 flood from the server: {flood}; connection closed")
        read = _Read()
        try:
            if not guard.block_ends:  # (a token stream's reads: DATA only)
                self._translate(self._h2.receive_data(data), read)
            else:
                # Up to each header block's end apart: a stream reset for a malformed head is in h2's state before
                # that stream's next frame is parsed (h2 makes a frame on a stream in the wrong state a connection
                # error).
                view, start = memoryview(data), 0
                for cut in [*guard.block_ends, len(data)]:
                    if cut > start:
                        self._translate(self._h2.receive_data(view[start:cut]), read)
                        start = cut
        except h2.exceptions.ProtocolError as exc:
            self.dead = True  # h2 queued its GOAWAY with the error code
            raise ProtocolViolation(f"HTTP/2 protocol error from the server: {exc}") from None
        return self._settle(read, t_ns)

    def _check_preface(self, data: bytes) -> None:
        """RFC 9113 3.4: the server's preface is a SETTINGS frame (stream 0, not an ACK), its first frame."""
        taken = 9 - len(self._first)
        self._first += data[:taken]
        if len(self._first) < 9:
            if not data:
                return
            if self._first[:1] != b"\x00":  # a frame header starts with a 24-bit length < 2**14: "H" is not one
                self._not_h2(data[taken:])
            return
        head = self._first
        if head[3] != SETTINGS or head[4] & 0x1 or int.from_bytes(head[5:9], "big") & 0x7FFFFFFF:
            self._not_h2(data[taken:])
        self._checked_preface = True

    def _not_h2(self, after: bytes) -> None:
        """`after`: the bytes of this read past the first 9, so the error shows the start of the answer."""
        self.dead = True
        first = (self._first + after)[:PREVIEW_BYTES]
        shown = "".join(c if c.isprintable() else "." for c in first.decode("latin-1"))
        raise HTTP2Unavailable(
            f"the server did not answer with HTTP/2 (h2c prior knowledge): its first bytes are {shown!r}, "
            "not a SETTINGS frame; it speaks HTTP/1.1 only?"
        )

    def _fail(self, code: int) -> None:
        self.dead = True
        with contextlib.suppress(h2.exceptions.H2Error):
            self._h2.close_connection(code)

    def _translate(self, h2_events: Sequence[h2.events.Event], read: _Read) -> None:
        """h2's events of (part of) one read into ours. The DATA path is the hot one: per frame only its payload is
        gathered; windows and figures are settled once per read (_settle)."""
        pending = read.data
        for event in h2_events:
            if event.__class__ is _H2_DATA:
                sid = event.stream_id
                part = pending.get(sid)
                if part is None:  # (read.start_data, inlined: the stream's first DATA frame of the read)
                    out_event = DataReceived(sid, b"", 0)
                    read.out.append(out_event)
                    part = pending[sid] = _ReadData(out_event)
                part.event.frames += 1
                part.size += event.flow_controlled_length
                data = event.data
                early = self._early
                if early is not None and early.stream_id == sid and early.delivered >= 0:
                    data = data[early.delivered :]  # its first bytes went out with an earlier read
                    early.delivered = -1  # whole now
                if data:
                    part.chunks.append(data)
            else:
                self._translate_other(event, read)

    def _translate_other(self, event: h2.events.Event, read: _Read) -> None:
        if isinstance(event, h2.events.ResponseReceived | h2.events.InformationalResponseReceived):
            informational = isinstance(event, h2.events.InformationalResponseReceived)
            sid = event.stream_id
            why = malformed(event.headers, informational=informational)
            if why is not None:
                self._reset_malformed(sid, why, read)
            elif informational:
                # 1xx heads carry nothing we read and any number may come (RFC 9113 8.1): a flood of 14-byte
                # HEADERS costs h2 an HPACK decode each (~25 us). They draw on the control frames' allowance.
                flood = self._guard.spend("1xx heads")
                if flood is not None:
                    self._fail(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
                    raise ProtocolViolation(f"HTTP/2 flood from the server: {flood}; connection closed")
            else:
                if (headed := self._streams.get(sid)) is not None:
                    headed.headed = True
                method = headed.method if headed is not None else "POST"
                read.out.append(HeadReceived(sid, response_head(event.headers, method)))
        elif isinstance(event, h2.events.TrailersReceived):
            why = malformed(event.headers, trailers=True)
            if why is not None:
                self._reset_malformed(event.stream_id, why, read)
        elif isinstance(event, h2.events.StreamEnded):
            sid = event.stream_id
            stream = self._streams.get(sid)
            if stream is not None and stream.ended:  # its trailers were malformed: reset already
                return
            if stream is not None and stream.body is not None:  # answered before the whole request was sent
                with contextlib.suppress(h2.exceptions.H2Error):  # RFC 9113 8.1: we may stop sending it
                    self._h2.reset_stream(sid, h2.errors.ErrorCodes.NO_ERROR)
            self._end(sid, stream)
            read.ended[sid] = None
            read.out.append(StreamEnded(sid))
        elif isinstance(event, h2.events.StreamReset):
            # remote_reset=False: h2 reset the stream itself for the peer's stream error (a WINDOW_UPDATE past
            # 2**31-1, RFC 9113 6.9.1): the stream is over all the same, or its reader would wait forever.
            sid = event.stream_id
            stream = self._streams.get(sid)
            if event.remote_reset or (stream is not None and not stream.ended):
                self._end(sid, stream)
                read.ended[sid] = None
                read.out.append(StreamReset(sid, int(event.error_code or 0), remote=event.remote_reset))
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._goaway(event, read)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.peer_settings_seen = True
            self.peer_settings += 1
            if self._h2.encoder.header_table_size > MAX_ENCODER_TABLE_SIZE:  # h2 took the peer's value as it is
                self._h2.encoder.header_table_size = MAX_ENCODER_TABLE_SIZE
            self._resend_bodies()
        elif isinstance(event, h2.events.WindowUpdated):
            self._resend_bodies()

    def _reset_malformed(self, sid: int, why: str, read: _Read) -> None:
        """RFC 9113 8.1.1: a malformed response is a stream error of type PROTOCOL_ERROR; the connection goes on."""
        stream = self._streams.get(sid)
        with contextlib.suppress(h2.exceptions.H2Error):  # (already closed, e.g. malformed trailers)
            self._h2.reset_stream(sid, h2.errors.ErrorCodes.PROTOCOL_ERROR)
        if stream is not None and not stream.ended:
            self._end(sid, stream)
            read.ended[sid] = None
            read.out.append(StreamReset(sid, PROTOCOL_ERROR, remote=False, reason=f"malformed response: {why}"))

    def _settle(self, read: _Read, t_ns: int) -> list[H2Event]:
        """The read's figures and windows, once per read (never per frame): each stream's DATA counted, its stall
        judged before our WINDOW_UPDATE, then (auto_ack) the read consumed."""
        guard = self._guard
        if guard.skip and guard.frame[0] == DATA:
            cut = self._cut_frame(read)
        else:  # the read ended on a frame boundary (or not in a DATA frame)
            self._early = cut = None
        conn = self._conn
        # h2's own count: DATA on a stream we reset (cancel) draws on the connection window too, with no event for
        # it (h2 gives it back itself, half a window at a time).
        conn.window = self._h2.inbound_flow_control_window
        conn_shut = conn.window < self._low_connection
        streams = self._streams
        frames = conn_bytes = 0
        any_open = False
        for sid, part in read.data.items():
            event = part.event
            chunks = part.chunks
            event.data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            size = part.size
            frames += event.frames
            conn_bytes += size
            stream = streams.get(sid)
            if stream is None:  # a stream we forgot: its bytes are consumed at once, the connection window kept open
                conn.unacked += size
                continue
            flow = stream.flow
            flow.data_frames += event.frames
            if size:
                conn.received += size
                stream.window -= size
                stream.received += size
                flow.data_bytes += size
                flow.reads += 1
                if stream.window < flow.min_window:
                    flow.min_window = stream.window
            any_open |= self._judge(sid, stream, cut, conn_shut, t_ns)
            if self.auto_ack and stream.received:
                self._consumed(sid, stream)
        if read.ended or cut is not None:  # streams the read touched without completing a DATA frame of theirs
            for other in (*read.ended, cut):
                if other is not None and other not in read.data and (stream := streams.get(other)) is not None:
                    any_open |= self._judge(other, stream, cut, conn_shut, t_ns)
        conn.flow.data_frames += frames
        conn.flow.data_bytes += conn_bytes
        if conn_bytes or cut is not None:
            if conn_bytes:
                conn.flow.reads += 1
                if conn.window < conn.flow.min_window:
                    conn.flow.min_window = conn.window
            if conn.flow.stalled_since is not None:
                conn.flow.stall_ns += t_ns - conn.flow.stalled_since
                conn.flow.stalled_since = None
            if conn_shut and any_open and cut is None:
                conn.flow.stalls += 1
                conn.flow.stalled_since = t_ns
        if conn.unacked and (conn.unacked >= self._half_connection or conn.window < self._low_connection):
            self._give_back(0, None)
        return read.out

    def _judge(self, sid: int, stream: _Stream, cut: int | None, conn_shut: bool, t_ns: int) -> bool:
        """A stream this read touched: its stall (if any) is over, since data or its end came; a new one starts if
        the read left its window (or the connection's) below one frame while it is open. A stream whose next DATA
        frame the read cut is being sent to: no new stall is judged until that frame is whole. True if it is open."""
        flow = stream.flow
        if flow.stalled_since is not None:
            flow.stall_ns += t_ns - flow.stalled_since
            flow.stalled_since = None
        if stream.ended or sid == cut:
            return False
        if stream.window < self._low_stream or conn_shut:
            flow.stalls += 1
            flow.stalled_since = t_ns
        return True

    def _consumed(self, sid: int, stream: _Stream) -> None:
        """(auto_ack) The read's bytes of this stream are consumed: given back by half windows; a paused stream's
        on the connection only, until it resumes."""
        nbytes, stream.received = stream.received, 0
        conn = self._conn
        conn.received -= nbytes
        conn.unacked += nbytes
        if stream.paused:
            stream.held += nbytes
            return
        stream.unacked += nbytes
        if stream.unacked >= self._half_stream or stream.window < self._low_stream:
            self._give_back(sid, stream)

    def _cut_frame(self, read: _Read) -> int | None:
        """A DATA frame the read cut: its data bytes so far go out with this read (an arrival is a socket read,
        and an HTTP/1.1 reader would have had them now: so do nghttp2's and Chromium's readers), if h2 will take the
        frame when it is whole: its stream has its head and is open, and it fits our windows. Returns that stream:
        the peer is sending it data (no stall), whether or not a data byte of the frame came yet."""
        guard = self._guard
        early = self._early
        if early is None or early.serial != guard.serial:
            _, flags, sid, length = guard.frame
            early = self._early = _Early(guard.serial, sid, flags, length)
        early.payload += guard.tail
        stream = self._streams.get(early.stream_id)
        if stream is None or stream.ended or not stream.headed or early.delivered < 0:
            return None
        if early.length > min(stream.window, self._h2.inbound_flow_control_window):
            return None  # h2 will refuse it (FLOW_CONTROL_ERROR): nothing of it is the stream's
        start, end = 0, early.length
        if early.flags & PADDED:
            if not early.payload or early.payload[0] >= early.length:
                return early.stream_id
            start, end = 1, early.length - early.payload[0]
        data = bytes(early.payload[start + early.delivered : min(len(early.payload), end)])
        if not data:
            return early.stream_id
        early.delivered += len(data)
        part = read.data.get(early.stream_id) or read.start_data(early.stream_id)
        part.chunks.append(data)
        return early.stream_id

    def _end(self, sid: int, stream: _Stream | None) -> None:
        if stream is not None and not stream.ended:
            stream.ended = True
            self._open -= 1
            if stream.body is not None:
                stream.body = None
                del self._sending[sid]

    def _goaway(self, event: h2.events.ConnectionTerminated, read: _Read) -> None:
        self.goaway = True
        last = event.last_stream_id or 0
        debug = bytes(event.additional_data or b"")[:200].decode("utf-8", "replace")
        reason = "".join(c if c.isprintable() else "?" for c in debug)
        self.last_goaway = ConnectionEnded(int(event.error_code or 0), last, reason)
        read.out.append(self.last_goaway)
        if any(sid <= last and not s.ended for sid, s in self._streams.items()):
            # h2 goes CLOSED on GOAWAY and then refuses every frame (python-hyper/h2#1199), also those of the streams
            # the server still serves, which RFC 9113 6.8 lets complete: back to open for them (no new stream opens).
            self._h2.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
        for sid, stream in self._streams.items():
            if sid > last and not stream.ended:
                self._end(sid, stream)
                read.ended[sid] = None
                read.out.append(StreamReset(sid, REFUSED_STREAM, remote=True))

    def _give_back(self, sid: int, stream: _Stream | None) -> None:
        """WINDOW_UPDATE once half a window is consumed, or when the window is below one frame (nghttp2's, Chromium's
        and h2's rule): fewer frames than one per read, and never a window left shut while data was consumed. The
        stream's (if given), then the connection's."""
        if (
            stream is not None
            and not stream.ended
            and stream.unacked
            and (stream.unacked >= self._half_stream or stream.window < self._low_stream)
        ):
            with contextlib.suppress(h2.exceptions.H2Error):  # closed meanwhile
                self._h2.increment_flow_control_window(stream.unacked, sid)
            stream.window += stream.unacked
            stream.unacked = 0
        conn = self._conn
        if conn.unacked and (conn.unacked >= self._half_connection or conn.window < self._low_connection):
            self._h2.increment_flow_control_window(conn.unacked)
            conn.window += conn.unacked
            conn.unacked = 0

    def _resend_bodies(self) -> None:
        for sid, stream in list(self._sending.items()):
            self._send_body(sid, stream)

    def _send_body(self, sid: int, stream: _Stream) -> None:
        """As much of the request body as the peer's windows take, a frame at a time; the rest on WindowUpdated.
        Pieces are views of the body: each byte is copied once (into its frame), however many frames it takes."""
        body = stream.body
        if body is None:
            return
        h2conn = self._h2
        total = len(body)
        while True:
            window = min(h2conn.local_flow_control_window(sid), h2conn.max_outbound_frame_size)
            if window <= 0:
                return  # resumed on WindowUpdated
            size = min(window, total - stream.sent)
            start = stream.sent
            stream.sent = start + size
            done = stream.sent == total
            h2conn.send_data(sid, body[start : stream.sent], end_stream=done)
            # the peer may give this frame back on the stream and on the connection, even a KiB at a time
            self._guard.window_updates_owed += 2 * max(1, size // 1024)
            if done:
                stream.body = None
                del self._sending[sid]
                return
