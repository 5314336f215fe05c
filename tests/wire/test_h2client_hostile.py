"""wire/h2client.py reviewed as a hostile server would use it: raw frames where the h2 library's server would not
write them (cut DATA frames, padded frames, WINDOW_UPDATE overflow, DATA on a stream we reset, an HPACK header list
bomb), with what each must cost us and what each must do to the arrival and stall figures."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import hpack
import pytest
from hyperframe.frame import DataFrame, GoAwayFrame, HeadersFrame, PriorityFrame, WindowUpdateFrame

from tests.wire.battery import splits
from tests.wire.test_h2client import HEAD, Server, connect
from tokenpath.errors import RemoteProtocolError
from tokenpath.wire.h2client import H2ClientConnection, H2Window
from tokenpath.wire.h2events import DataReceived, H2Event, StreamEnded, StreamReset
from tokenpath.wire.h2guard import MAX_CONTROL_BURST, MAX_HEADER_LIST_SIZE


def data_of(events: list[H2Event], sid: int) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, DataReceived) and e.stream_id == sid)


def feed(client: H2ClientConnection, reads: list[bytes]) -> None:
    for t, data in enumerate(reads, start=1):
        client.receive(data, t)


def headed() -> tuple[H2ClientConnection, Server, int]:
    client, server, sid = connect()
    server.h2.send_headers(sid, HEAD)
    client.receive(server.take(), 0)
    server.feed(client.data_to_send())
    return client, server, sid


def data_frame(sid: int, data: bytes, *, pad: int = 0, end: bool = False) -> bytes:
    frame = DataFrame(sid, data)
    if pad:
        frame.flags.add("PADDED")
        frame.pad_length = pad
    if end:
        frame.flags.add("END_STREAM")
    return bytes(frame.serialize())


# arrivals -----------------------------------------------------------------------------------------------------------
def test_a_data_frame_cut_by_a_read_gives_its_bytes_to_that_read() -> None:
    """Two events in one DATA frame, the read cut after the first: an HTTP/1.1 reader has the first event at the
    first read, and so must we (h2 parses whole frames only: it used to come a read late, with the second)."""
    client, _server, sid = headed()
    raw = data_frame(sid, b"data: a\n\ndata: b\n\n")
    cut = raw.index(b"data: b")
    first = client.receive(raw[:cut], 1)
    assert data_of(first, sid) == b"data: a\n\n"
    assert [e.frames for e in first if isinstance(e, DataReceived)] == [0]  # no DATA frame is whole yet
    second = client.receive(raw[cut:], 2)
    assert data_of(second, sid) == b"data: b\n\n"
    assert [e.frames for e in second if isinstance(e, DataReceived)] == [1]
    assert client.flow(sid).data_frames == 1


@pytest.mark.parametrize("pad", [0, 1, 7])
def test_frames_padded_or_not_at_every_split_give_the_payload_once(pad: int) -> None:
    payload = [b"data: one\n\n", b"data: two two\n\n", b"", b"data: three\n\n"]
    raw = b"".join(data_frame(1, p, pad=pad) for p in payload) + data_frame(1, b"", end=True)
    for pieces in splits(raw):
        client, _server, sid = headed()
        assert sid == 1
        events: list[H2Event] = []
        for t, piece in enumerate(pieces, start=1):
            events += client.receive(piece, t)
        assert data_of(events, sid) == b"".join(payload)
        assert sum(e.frames for e in events if isinstance(e, DataReceived)) == len(payload) + 1
        assert [e for e in events if isinstance(e, StreamEnded)] == [StreamEnded(sid)]


def test_a_cut_frame_past_our_window_is_not_delivered_early() -> None:
    """A frame h2 will refuse (it overruns the stream window) gives nothing before it is refused."""
    client = H2ClientConnection(authority="a", window=H2Window(100, 65_535))
    server = Server()
    sid = client.open_stream("GET", "/")
    server.feed(client.data_to_send())
    server.h2.send_headers(sid, HEAD)
    client.receive(server.take(), 0)
    assert data_of(client.receive(data_frame(sid, b"y" * 1000)[:500], 1), sid) == b""
    with pytest.raises(RemoteProtocolError):
        client.receive(data_frame(sid, b"y" * 1000)[500:], 2)


# stalls -------------------------------------------------------------------------------------------------------------
def test_a_stall_ends_with_the_read_that_brings_the_first_bytes_of_the_next_frame() -> None:
    client, server, sid = headed()
    for _ in range(3):
        server.h2.send_data(sid, b"x" * 16_384)
    server.h2.send_data(sid, b"x" * 16_383)
    client.receive(server.take(), 1_000)  # the whole window: a stall from here
    server.feed(client.data_to_send())
    raw = data_frame(sid, b"y" * 10_000)
    client.receive(raw[:3_000], 4_000)  # the peer is sending again: the stall is over
    client.receive(raw[3_000:], 9_000)
    flow = client.flow(sid)
    assert flow.stalls == 1
    assert flow.stall_ns == 3_000  # not 8,000: the read that completed the frame came later


def test_data_on_a_stream_we_reset_draws_on_the_connection_window_in_the_stall_figures() -> None:
    client, server, sid = headed()
    client.cancel(sid)
    other = client.open_stream("GET", "/2")
    server.feed(client.data_to_send())
    server.h2.send_headers(other, HEAD)
    client.receive(server.take(), 1)
    # in flight when our RST_STREAM left: 20,000 bytes on the reset stream (h2 keeps them, under half a window)
    client.receive(b"".join(data_frame(sid, b"z" * 10_000) for _ in range(2)), 2)
    client.receive(b"".join(data_frame(other, b"o" * 15_000) for _ in range(2)), 3)  # 50,000 of 65,535 used
    assert client.flow(other).stalls == 1  # its own window has 35,535 left; the connection's, 15,535
    assert client.connection_flow.stalls == 1


# bounds and ends ----------------------------------------------------------------------------------------------------
def test_a_window_update_overflow_on_our_stream_ends_it() -> None:
    """RFC 9113 6.9.1: a stream error. h2 resets the stream itself; the reader must hear of it (it used to wait
    until its own timeout, and a multiplexed connection counted the stream open for ever)."""
    client, _server, sid = headed()
    update = WindowUpdateFrame(sid)
    update.window_increment = 2**31 - 1
    events = client.receive(bytes(update.serialize()), 1)
    assert events == [StreamReset(sid, 3, remote=False)]  # FLOW_CONTROL_ERROR
    assert client.open_streams == 0
    assert b"\x00\x00\x04\x03" in client.data_to_send()  # our RST_STREAM went out


def test_a_window_update_overflow_on_the_connection_ends_it() -> None:
    client, _server, _sid = headed()
    update = WindowUpdateFrame(0)
    update.window_increment = 2**31 - 1
    with pytest.raises(RemoteProtocolError):
        client.receive(bytes(update.serialize()), 1)
    assert client.dead


def test_a_header_list_bomb_through_the_hpack_dynamic_table_is_refused() -> None:
    """A 4 KB field put in the dynamic table once, then named by one byte again and again: a 40-byte block that
    decodes to more than MAX_HEADER_LIST_SIZE. The guard sees a small block; the decoder's list bound stops it."""
    client, _server, sid = connect()
    encoder = hpack.Encoder()
    first = encoder.encode([(b":status", b"200"), (b"x-big", b"v" * 4000)])
    block = first + b"\xbe" * ((MAX_HEADER_LIST_SIZE // 4000) + 2)  # index 62: the x-big entry
    assert len(block) < 4200
    frame = HeadersFrame(sid, block)
    frame.flags.add("END_HEADERS")
    with pytest.raises(RemoteProtocolError):
        client.receive(bytes(frame.serialize()), 1)


def test_goaway_naming_no_stream_refuses_ours_at_once() -> None:
    client, _server, sid = headed()
    goaway = GoAwayFrame(0)
    goaway.last_stream_id = 0
    events = client.receive(bytes(goaway.serialize()), 1)
    assert StreamReset(sid, 7, remote=True) in events
    assert client.open_streams == 0


@pytest.mark.parametrize("piece", [None, 7])
def test_a_flood_of_padding_only_data_frames_is_the_empty_frames_flood(piece: int | None) -> None:
    """A DATA frame of one padding byte carries no data, as an empty one, and used to pass the empty-frames bound:
    600,000 of them cost ~7 s of h2 parsing here. Fed whole, or in 7-byte pieces (the pad length in a later read)."""
    client, _server, sid = headed()
    raw = data_frame(sid, b"", pad=1) * (MAX_CONTROL_BURST + 10)  # (the pad-length byte, 1 byte of padding)
    step = piece or len(raw)
    with pytest.raises(RemoteProtocolError, match="empty DATA frames"):
        feed(client, [raw[at : at + step] for at in range(0, len(raw), step)])
    assert client.dead


def test_a_flood_of_1xx_heads_is_bounded_like_the_control_frames() -> None:
    """Any number of 1xx heads may precede the answer (RFC 9113 8.1); each is an HPACK decode, and 200,000 of them
    took ~5 s of h2 here with no bound. One honest 103 passes; a flood ends the connection."""
    client, _server, sid = connect()
    early_hints = HeadersFrame(sid, b"\x08\x03103")  # :status (static name 8) "103", not indexed: 14 bytes a frame
    early_hints.flags.add("END_HEADERS")
    one = bytes(early_hints.serialize())
    assert client.receive(one, 1) == []
    with pytest.raises(RemoteProtocolError, match="1xx heads"):
        client.receive(one * (MAX_CONTROL_BURST + 10), 2)
    assert client.dead


@pytest.mark.parametrize("kind", ["goaway", "priority", "unknown", "window_update"])
def test_floods_of_frames_a_server_sends_rarely_are_bounded(kind: str) -> None:
    """100,000 of any of these took h2 1-2 s of a core with no bound. A server sends a GOAWAY or two, no PRIORITY,
    an ALTSVC or ORIGIN once, and WINDOW_UPDATEs only for what we sent (two per DATA frame, one per stream)."""
    client, _server, sid = headed()
    goaway = GoAwayFrame(0)
    goaway.last_stream_id = sid
    update = WindowUpdateFrame(sid)
    update.window_increment = 1
    one = {
        "goaway": bytes(goaway.serialize()),
        "priority": bytes(PriorityFrame(sid, depends_on=0, stream_weight=10).serialize()),
        "unknown": b"\x00\x00\x00\x42\x00\x00\x00\x00\x00",  # type 0x42, empty
        "window_update": bytes(update.serialize()),
    }[kind]
    with pytest.raises(RemoteProtocolError, match="flood"):
        feed(client, [one * 500] * 3)
    assert client.dead


def test_window_updates_for_what_we_sent_are_no_flood() -> None:
    """Many streams, each with a body the server gives back on its stream and on the connection: honest."""
    client = H2ClientConnection(authority="a")
    server = Server()
    updates = 0
    for _ in range(1_500):
        sid = client.open_stream("POST", "/", [], b"x" * 10)
        server.feed(client.data_to_send())
        server.h2.increment_flow_control_window(100, sid)  # a window opened for the new stream
        server.h2.increment_flow_control_window(10, sid)  # and the body given back, on the stream
        server.h2.increment_flow_control_window(10)  # and on the connection
        server.h2.send_headers(sid, HEAD, end_stream=True)
        client.receive(server.take(), 1)
        updates += 3
        client.forget(sid)
    assert updates > 2 * MAX_CONTROL_BURST
    assert not client.dead


def test_a_large_body_given_back_a_kib_at_a_time_is_no_flood() -> None:
    """A 1 MiB request body, each KiB of it given back on its own (stream and connection): 2,048 WINDOW_UPDATEs,
    past the burst allowance, and all owed."""
    client = H2ClientConnection(authority="a")
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    sid = client.open_stream("POST", "/", [], b"b" * (1 << 20))
    received = 0
    for t in range(1, 200):
        for event in server.receive_data(client.data_to_send()):
            if isinstance(event, h2.events.DataReceived):
                received += event.flow_controlled_length or 0
                for _ in range((event.flow_controlled_length or 0) // 1024):
                    server.increment_flow_control_window(1024, sid)
                    server.increment_flow_control_window(1024)
        if received == 1 << 20:
            break
        client.receive(server.data_to_send(), t)
    assert received == 1 << 20
    assert not client.dead
