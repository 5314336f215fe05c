"""wire/h2client.py against the h2 library's *server* state machine, in process: the server's bytes are fed whole,
at every split and byte by byte; flow control, stalls and WINDOW_UPDATEs; a hostile server (floods, huge header
blocks, RST_STREAM, GOAWAY mid-stream, an HTTP/1.1 answer)."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PingFrame, SettingsFrame

from tests.wire.battery import splits
from tokenpath.errors import HTTP2Unavailable, RemoteProtocolError, UsageError
from tokenpath.wire.h2client import (
    BROWSER_WINDOW,
    DEFAULT_WINDOW,
    H2ClientConnection,
    H2NoRoom,
    H2Window,
    parse_h2_window,
)
from tokenpath.wire.h2events import ConnectionEnded, DataReceived, H2Event, HeadReceived, StreamEnded, StreamReset
from tokenpath.wire.h2guard import MAX_CONTROL_BURST

HEAD = [(b":status", b"200"), (b"content-type", b"text/event-stream")]


class Server:
    """The h2 library's server side; `take()` returns what it would put on the wire."""

    def __init__(self, max_streams: int | None = None, initial_window: int | None = None) -> None:
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        settings = {}
        if max_streams is not None:
            settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = max_streams
        if initial_window is not None:
            settings[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] = initial_window
        if settings:
            self.h2.local_settings = h2.settings.Settings(client=False, initial_values=settings)
        self.h2.initiate_connection()
        self.events: list[h2.events.Event] = []
        self.bodies: dict[int, bytes] = {}
        self.headers: dict[int, list[tuple[bytes, bytes]]] = {}

    def feed(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            self.events.append(event)
            if isinstance(event, h2.events.RequestReceived):
                assert event.stream_id is not None
                self.headers[event.stream_id] = list(event.headers or [])
            elif isinstance(event, h2.events.DataReceived):
                assert event.stream_id is not None
                self.bodies[event.stream_id] = self.bodies.get(event.stream_id, b"") + bytes(event.data or b"")
                self.h2.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)

    def take(self) -> bytes:
        return self.h2.data_to_send()


def connect(window: H2Window = DEFAULT_WINDOW, **kw: object) -> tuple[H2ClientConnection, Server, int]:
    client = H2ClientConnection(authority="example.test:8080", window=window, **kw)  # type: ignore[arg-type]
    server = Server()
    sid = client.open_stream(
        "POST", "/v1/chat/completions", [("Host", "x"), ("Content-Type", "application/json")], b'{"a":1}'
    )
    server.feed(client.data_to_send())
    client.receive(server.take(), 0)  # the server's SETTINGS (and its ACK of ours)
    server.feed(client.data_to_send())
    return client, server, sid


def test_request_reaches_the_server_as_http2() -> None:
    _client, server, sid = connect()
    fields = dict(server.headers[sid])
    assert fields[b":authority"] == b"example.test:8080"
    assert fields[b":path"] == b"/v1/chat/completions"
    assert fields[b":scheme"] == b"http"
    assert fields[b"content-length"] == b"7"
    assert b"host" not in fields  # HTTP/2 carries it as :authority
    assert server.bodies[sid] == b'{"a":1}'
    assert server.h2.remote_settings.enable_push == 0
    assert server.h2.remote_settings.initial_window_size == 65_535


def exchange(server: Server, sid: int, events: list[bytes]) -> bytes:
    server.h2.send_headers(sid, HEAD)
    for ev in events:
        server.h2.send_data(sid, ev)
    server.h2.end_stream(sid)
    return server.take()


def collect(client: H2ClientConnection, pieces: list[bytes]) -> list[H2Event]:
    out: list[H2Event] = []
    for t, piece in enumerate(pieces):
        out += client.receive(piece, t)
    return out


EVENTS = [b"data: one\n\n", b"data: two\n\n", b"", b"data: three\n\n"]


@pytest.mark.parametrize("split", range(2))
def test_a_response_at_every_split(split: int) -> None:
    _client0, server0, sid0 = connect()
    raw = exchange(server0, sid0, EVENTS)
    for pieces in splits(raw)[split::2]:  # half the splits per case keeps each case short
        client, server, sid = connect()
        assert exchange(server, sid, EVENTS) == raw
        events = collect(client, pieces)
        heads = [e for e in events if isinstance(e, HeadReceived)]
        assert len(heads) == 1
        assert heads[0].head.status == 200
        assert heads[0].head.http_version == "2"
        assert heads[0].head.content_type == "text/event-stream"
        data = [e for e in events if isinstance(e, DataReceived)]
        assert b"".join(e.data for e in data) == b"".join(EVENTS)
        # h2's end_stream() is one more, empty, DATA frame with END_STREAM: a DATA frame all the same
        assert sum(e.frames for e in data) == len(EVENTS) + 1
        assert client.flow(sid).data_frames == len(EVENTS) + 1
        assert isinstance(events[-1], StreamEnded)
        # per read, at most one DataReceived per stream
        assert len(data) <= len([p for p in pieces if p])


def test_one_data_event_per_stream_per_read() -> None:
    client = H2ClientConnection(authority="a")
    server = Server()
    s1 = client.open_stream("GET", "/1")
    s3 = client.open_stream("GET", "/3")
    server.feed(client.data_to_send())
    server.h2.send_headers(s1, HEAD)
    server.h2.send_headers(s3, HEAD)
    for i in range(3):
        server.h2.send_data(s1, b"data: %d\n\n" % i)
    server.h2.send_data(s3, b"data: x\n\n")
    server.h2.send_data(s1, b"data: 9\n\n")
    server.h2.end_stream(s3)
    events = client.receive(server.take(), 1)
    data = [e for e in events if isinstance(e, DataReceived)]
    assert [(e.stream_id, e.frames) for e in data] == [(s1, 4), (s3, 2)]  # s3's end: one more, empty
    assert data[0].data == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 9\n\n"
    assert events.index(data[1]) < events.index(StreamEnded(s3))  # its data before its end
    assert client.flow(s1).reads == 1
    assert client.reads == 1


def test_a_full_window_in_one_read_is_a_stall_until_the_next_data() -> None:
    client, server, sid = connect()
    server.h2.send_headers(sid, HEAD)
    server.h2.send_data(sid, b"x" * 16_384)
    server.h2.send_data(sid, b"x" * 16_384)
    server.h2.send_data(sid, b"x" * 16_384)
    server.h2.send_data(sid, b"x" * 16_383)  # 65,535: the whole window
    assert server.h2.local_flow_control_window(sid) == 0  # the server is held
    client.receive(server.take(), 1_000)
    flow = client.flow(sid)
    assert flow.stalls == 1
    assert flow.min_window == 0
    update = client.data_to_send()
    assert update  # WINDOW_UPDATE as the read was consumed
    server.feed(update)
    assert any(isinstance(e, h2.events.WindowUpdated) and e.stream_id == sid for e in server.events)
    assert server.h2.local_flow_control_window(sid) == 65_535
    server.h2.send_data(sid, b"y" * 10, end_stream=True)
    client.receive(server.take(), 5_000)
    assert flow.stalls == 1
    assert flow.stall_ns == 4_000  # from the read that shut the window to the next one with data
    assert flow.stall_ms == 0.004
    assert client.connection_flow.stalls == 1


def test_small_reads_do_not_stall_and_are_given_back_by_half_windows() -> None:
    client, server, sid = connect()
    server.h2.send_headers(sid, HEAD)
    client.receive(server.take(), 0)
    updates = 0
    for t in range(1, 200):
        server.h2.send_data(sid, b"e" * 1000)  # 199 KB in 1 KB events, one per read
        client.receive(server.take(), t)
        out = client.data_to_send()
        updates += bool(out)
        server.feed(out)
    flow = client.flow(sid)
    assert flow.stalls == 0
    assert flow.data_frames == 199
    assert 199_000 // 65_535 <= updates <= 199_000 // 32_767 + 1  # half a window at a time, not one per read
    assert server.h2.local_flow_control_window(sid) > 16_384


def test_the_browser_preset_sends_chromiums_windows_and_never_stalls_on_a_big_event() -> None:
    client, server, sid = connect(BROWSER_WINDOW)
    assert server.h2.remote_settings.initial_window_size == 6 * 1024 * 1024
    assert server.h2.local_flow_control_window(sid) == 6 * 1024 * 1024
    assert server.h2.max_outbound_frame_size == 16_384
    server.h2.send_headers(sid, HEAD)
    for _ in range(16):
        server.h2.send_data(sid, b"z" * 16_384)  # 256 KiB: four default windows
    client.receive(server.take(), 1)
    assert client.flow(sid).stalls == 0
    assert client.connection_flow.stalls == 0
    # the connection window is Chromium's 15 MiB: the server could send 15 MiB on it
    assert server.h2.outbound_flow_control_window + 16 * 16_384 == 15 * 1024 * 1024


def test_the_connection_window_shut_stalls_every_open_stream() -> None:
    client = H2ClientConnection(authority="a", window=H2Window(60_000, 65_535))
    server = Server()
    s1, s3 = client.open_stream("GET", "/1"), client.open_stream("GET", "/3")
    server.feed(client.data_to_send())
    client.receive(server.take(), 0)
    server.feed(client.data_to_send())
    server.h2.send_headers(s1, HEAD)
    server.h2.send_headers(s3, HEAD)
    server.h2.send_data(s1, b"a" * 16_384)
    server.h2.send_data(s1, b"a" * 16_384)
    server.h2.send_data(s1, b"a" * 16_384)
    server.h2.send_data(s3, b"b" * 10_000)  # 59,152: the connection has < one frame left
    client.receive(server.take(), 1)
    assert client.flow(s1).stalls == 1
    assert client.flow(s3).stalls == 1  # its own window is wide open: the connection's held it
    assert client.connection_flow.stalls == 1


def test_without_auto_ack_the_window_opens_only_as_the_reader_consumes() -> None:
    client, server, sid = connect(auto_ack=False)
    server.h2.send_headers(sid, HEAD)
    server.h2.send_data(sid, b"x" * 16_000)
    server.h2.send_data(sid, b"x" * 16_000)
    server.h2.send_data(sid, b"x" * 8_000)
    client.receive(server.take(), 1)
    assert client.data_to_send() == b""  # nothing consumed: no WINDOW_UPDATE
    client.consume(sid, 40_000)
    server.feed(client.data_to_send())
    assert server.h2.local_flow_control_window(sid) == 65_535


def test_an_http11_answer_to_the_preface_is_http2_unavailable() -> None:
    answer = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    for pieces in ([answer], [answer[:1], answer[1:]], [answer[:5]]):
        client = H2ClientConnection(authority="a")
        client.initiate()
        with pytest.raises(HTTP2Unavailable, match="HTTP/2"):
            collect(client, pieces)


def test_a_first_frame_that_is_not_settings_is_http2_unavailable() -> None:
    client = H2ClientConnection(authority="a")
    client.initiate()
    with pytest.raises(HTTP2Unavailable):
        client.receive(PingFrame(0).serialize(), 1)


def test_a_ping_flood_ends_the_connection_with_goaway() -> None:
    client, server, _sid = connect()
    client.receive(server.take(), 0)
    client.data_to_send()
    flood = PingFrame(0).serialize() * (MAX_CONTROL_BURST + 10)
    with pytest.raises(RemoteProtocolError, match="PING/SETTINGS"):
        client.receive(flood, 1)
    out = client.data_to_send()
    server.feed(out)
    assert any(isinstance(e, h2.events.ConnectionTerminated) and e.error_code == 11 for e in server.events)
    assert len(out) < 1_000  # no answers were queued for the flood


def test_a_settings_flood_is_bounded_too() -> None:
    client, server, _ = connect()
    client.receive(server.take(), 0)
    with pytest.raises(RemoteProtocolError, match="PING/SETTINGS"):
        client.receive(SettingsFrame(0).serialize() * (MAX_CONTROL_BURST + 10), 1)


def test_an_empty_data_frame_flood_is_bounded() -> None:
    client, server, sid = connect()
    server.h2.send_headers(sid, HEAD)
    client.receive(server.take(), 0)
    empty = DataFrame(sid).serialize()  # no payload, no END_STREAM: nothing but a parse and an event each
    client.receive(empty * 100, 1)  # a few are legal (h2's own end_stream() sends one, with END_STREAM)
    with pytest.raises(RemoteProtocolError, match="empty DATA frames"):
        client.receive(empty * (MAX_CONTROL_BURST + 10), 2)


def test_a_huge_header_block_is_refused_before_it_is_buffered() -> None:
    client, server, sid = connect()
    client.receive(server.take(), 0)
    headers = HeadersFrame(sid)
    headers.data = b"\x00" * 100
    raw = headers.serialize()
    cont = ContinuationFrame(sid)
    cont.data = b"\x00" * 16_000
    raw += cont.serialize() * 5  # 80 KB, no END_HEADERS
    with pytest.raises(RemoteProtocolError, match="header block"):
        client.receive(raw, 1)


def test_a_continuation_flood_is_refused() -> None:
    client, server, sid = connect()
    client.receive(server.take(), 0)
    raw = HeadersFrame(sid).serialize() + ContinuationFrame(sid).serialize() * 50
    with pytest.raises(RemoteProtocolError, match="CONTINUATION"):
        client.receive(raw, 1)


def test_a_frame_over_our_max_frame_size_is_refused_at_its_header() -> None:
    client, server, sid = connect()
    client.receive(server.take(), 0)
    big = DataFrame(sid)
    big.data = b"x" * 20_000
    with pytest.raises(RemoteProtocolError, match="SETTINGS_MAX_FRAME_SIZE"):
        client.receive(big.serialize()[:9], 1)  # the header alone is enough


def test_rst_stream_from_the_server() -> None:
    client, server, sid = connect()
    server.h2.send_headers(sid, HEAD)
    server.h2.send_data(sid, b"data: a\n\n")
    server.h2.reset_stream(sid, 2)
    events = client.receive(server.take(), 1)
    assert events[-1] == StreamReset(sid, 2, remote=True)
    assert client.open_streams == 0


def test_goaway_mid_stream_lets_processed_streams_finish_and_refuses_the_rest() -> None:
    client = H2ClientConnection(authority="a")
    server = Server()
    s1, s3 = client.open_stream("GET", "/1"), client.open_stream("GET", "/3")
    server.feed(client.data_to_send())
    server.h2.send_headers(s1, HEAD)
    server.h2.send_data(s1, b"data: a\n\n")
    server.h2.close_connection(0, last_stream_id=s1)
    events = client.receive(server.take(), 1)
    assert ConnectionEnded(0, s1, "") in events
    assert StreamReset(s3, 7, remote=True) in events
    # the server goes on with stream 1 (RFC 9113 6.8); h2 would refuse its frames after GOAWAY
    server.h2.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN
    server.h2.send_data(s1, b"data: b\n\n", end_stream=True)
    events = client.receive(server.take(), 2)
    assert events == [DataReceived(s1, b"data: b\n\n", 1), StreamEnded(s1)]
    with pytest.raises(H2NoRoom):
        client.open_stream("GET", "/5")


def test_push_is_refused() -> None:
    client, server, sid = connect()
    client.receive(server.take(), 0)
    # a PUSH_PROMISE after we said ENABLE_PUSH=0 (hand-built: h2's server will not send one)
    promise = bytes([0, 0, 5, 0x5, 0x4]) + sid.to_bytes(4, "big") + (2).to_bytes(4, "big") + b"\x82"
    with pytest.raises(RemoteProtocolError):
        client.receive(promise, 1)


def test_streams_past_the_peers_limit_need_another_connection() -> None:
    client = H2ClientConnection(authority="a")
    server = Server(max_streams=2)
    client.receive(server.take(), 0)
    assert client.peer_settings_seen
    assert client.max_concurrent_streams == 2
    client.open_stream("GET", "/1")
    client.open_stream("GET", "/3")
    with pytest.raises(H2NoRoom, match="limit 2"):
        client.open_stream("GET", "/5")


def test_a_body_larger_than_the_peers_window_waits_for_window_updates() -> None:
    client = H2ClientConnection(authority="a")
    server = Server()
    body = b"q" * 100_000
    sid = client.open_stream("POST", "/", [], body)
    for t in range(10):
        server.feed(client.data_to_send())
        client.receive(server.take(), t)
    assert server.bodies[sid] == body


@pytest.mark.parametrize(
    ("text", "stream", "conn"),
    [
        ("default", 65_535, 65_535),
        ("browser", 6 * 1024 * 1024, 15 * 1024 * 1024),
        ("1000", 1000, 65_535),
        ("1048576", 1 << 20, 1 << 20),
        ("1000:200000", 1000, 200_000),
    ],
)
def test_parse_h2_window(text: str, stream: int, conn: int) -> None:
    window = parse_h2_window(text)
    assert (window.stream, window.connection) == (stream, conn)
    assert parse_h2_window(str(window)) == window


@pytest.mark.parametrize("text", ["fast", "0", "-5", "1000:10", str(2**31), "1:2:3"])
def test_parse_h2_window_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        parse_h2_window(text)
