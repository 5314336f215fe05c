"""wire/h2client.py as the gateway drives its HTTP/2 members: a malformed head is a stream error (RFC 9113 8.1.1),
a paused stream's window is held while the connection's is given back, an answer that comes before the whole
request body resets the rest with NO_ERROR, a shut window is named, the authority is per stream, the room to open
streams follows the peer's SETTINGS."""

from __future__ import annotations

import h2.errors
import h2.events
import h2.settings
import pytest
from hyperframe.frame import ContinuationFrame, DataFrame, Frame, HeadersFrame

from tests.wire.battery import splits
from tests.wire.test_h2client import HEAD, Server
from tokenpath.wire.h2client import H2ClientConnection, H2Window
from tokenpath.wire.h2events import (
    PROTOCOL_ERROR,
    DataReceived,
    H2Event,
    HeadReceived,
    StreamEnded,
    StreamReset,
    error_name,
)
from tokenpath.wire.h2guard import FrameGuard

MALFORMED = {
    "status-99": [(b":status", b"99")],
    "status-1000": [(b":status", b"1000")],  # h2 takes it for a 1xx: DATA after it would be a connection error
    "status-abc": [(b":status", b"abc")],
    "upper-case-name": [(b":status", b"200"), (b"X-Upper", b"1")],
}


def two_streams() -> tuple[H2ClientConnection, Server, int, int]:
    client = H2ClientConnection(authority="member")
    server = Server()
    s1, s3 = client.open_stream("GET", "/1"), client.open_stream("GET", "/3")
    server.feed(client.data_to_send())
    client.receive(server.take(), 0)
    server.feed(client.data_to_send())
    return client, server, s1, s3


def raw_head(sid: int, fields: list[tuple[bytes, bytes]], server: Server) -> bytes:
    frame = HeadersFrame(sid, server.h2.encoder.encode(fields))
    frame.flags.add("END_HEADERS")
    return bytes(frame.serialize())


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_head_resets_that_stream_only(case: str) -> None:
    client, server, s1, s3 = two_streams()
    server.h2.send_headers(s1, HEAD)
    server.h2.send_data(s1, b"data: a\n\n")
    raw = server.take() + raw_head(s3, MALFORMED[case], server) + bytes(DataFrame(s3, b"data: x\n\n").serialize())
    server.h2.send_data(s1, b"data: b\n\n", end_stream=True)
    raw += server.take()
    for pieces in splits(raw)[::7]:
        client, server, s1, s3 = two_streams()
        events: list[H2Event] = []
        for t, piece in enumerate(pieces, start=1):
            events += client.receive(piece, t)
        resets = [e for e in events if isinstance(e, StreamReset)]
        assert resets == [StreamReset(s3, PROTOCOL_ERROR, remote=False)]
        assert resets[0].reason.startswith("malformed response")
        assert b"".join(e.data for e in events if isinstance(e, DataReceived) and e.stream_id == s1) == (
            b"data: a\n\ndata: b\n\n"
        )
        assert not any(isinstance(e, DataReceived) and e.stream_id == s3 for e in events)
        assert StreamEnded(s1) in events
        assert not client.dead
        server.feed(client.data_to_send())
        assert any(
            isinstance(e, h2.events.StreamReset)
            and e.stream_id == s3
            and e.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
            for e in server.events
        )


def test_malformed_trailers_reset_the_stream() -> None:
    client, server, s1, _ = two_streams()
    server.h2.send_headers(s1, HEAD)
    server.h2.send_data(s1, b"data: a\n\n")
    client.receive(server.take(), 1)
    block = server.h2.encoder.encode([(b":status", b"200")])  # a pseudo-field in trailers
    trailers = HeadersFrame(s1, block, flags=["END_HEADERS", "END_STREAM"])
    events = client.receive(bytes(trailers.serialize()), 2)
    assert events == [StreamReset(s1, PROTOCOL_ERROR, remote=False)]
    assert client.open_streams == 1


def test_a_paused_stream_holds_its_window_and_the_connection_gives_back() -> None:
    client, server, s1, s3 = two_streams()
    server.h2.send_headers(s1, HEAD)
    server.h2.send_headers(s3, HEAD)
    client.receive(server.take(), 1)
    client.pause(s1)
    for _ in range(3):
        server.h2.send_data(s1, b"x" * 16_000)  # 48,000: past half of both windows
    client.receive(server.take(), 2)
    server.feed(client.data_to_send())
    assert server.h2.local_flow_control_window(s1) == 65_535 - 48_000  # held: the client is not reading s1
    assert server.h2.outbound_flow_control_window == 65_535  # the connection's share came back: s3 goes on
    assert server.h2.local_flow_control_window(s3) == 65_535
    client.resume(s1)
    server.feed(client.data_to_send())
    assert server.h2.local_flow_control_window(s1) == 65_535


def test_an_answer_before_the_whole_body_was_sent_stops_the_body_with_no_error() -> None:
    client = H2ClientConnection(authority="member")
    server = Server(initial_window=10)
    server.feed(client.initiate())
    client.receive(server.take(), 0)
    sid = client.open_stream("POST", "/", [], b"b" * 100)
    server.feed(client.data_to_send())
    assert client.unsent_body(sid) == (90, 0)  # the member's window for it is shut
    server.h2.send_headers(sid, [(b":status", b"413")], end_stream=True)
    events = client.receive(server.take(), 1)
    assert isinstance(events[0], HeadReceived)
    assert events[-1] == StreamEnded(sid)
    assert client.unsent_body(sid) == (0, 0)
    server.feed(client.data_to_send())
    assert any(isinstance(e, h2.events.StreamReset) and e.error_code == 0 for e in server.events)  # RFC 9113 8.1


def test_a_body_goes_out_as_the_windows_open_and_the_authority_is_per_stream() -> None:
    client = H2ClientConnection(authority="default.test", window=H2Window(1 << 20, 1 << 24))
    server = Server()
    body = bytes(range(256)) * 4096  # 1 MiB: sixteen times the peer's initial window
    sid = client.open_stream("POST", "/v1", [("Content-Type", "application/json")], body, authority="member:8443")
    for t in range(100):
        server.feed(client.data_to_send())
        client.receive(server.take(), t)
        if server.bodies.get(sid) == body:
            break
    assert server.bodies[sid] == body
    assert dict(server.headers[sid])[b":authority"] == b"member:8443"
    assert client.unsent_body(sid) == (0, 0)


def test_room_waits_for_the_peers_settings_and_follows_its_limit() -> None:
    client = H2ClientConnection(authority="member")
    rooms = [client.has_room]  # no stream before the member's limits are known
    server = Server(max_streams=1)
    client.receive(server.take(), 0)
    assert client.peer_settings == 1
    rooms.append(client.has_room)
    sid = client.open_stream("GET", "/")
    rooms.append(client.has_room)
    client.cancel(sid)
    assert client.open_streams == 0
    rooms.append(client.has_room)
    assert rooms == [False, True, False, True]


def test_error_names() -> None:
    assert error_name(7) == "REFUSED_STREAM"
    assert error_name(99) == "error code 99"


def block_ends(data: bytes, cut: int | None) -> list[int]:
    """FrameGuard's header-block ends (as offsets in `data`), fed whole or in two reads cut at `cut`."""
    guard = FrameGuard(lambda: 0.0, 16_384, peer_is_server=True)
    ends: list[int] = []
    offset = 0
    for piece in [data] if cut is None else [data[:cut], data[cut:]]:
        assert guard.feed(piece) is None
        ends += [offset + e for e in guard.block_ends]
        offset += len(piece)
    return ends


def test_the_guard_names_where_each_header_block_ends_at_every_split() -> None:
    frames: list[Frame] = [
        HeadersFrame(1, b"\x88", flags=["END_HEADERS"]),
        DataFrame(1, b"data: x\n\n"),
        HeadersFrame(3, b"h" * 50),
        ContinuationFrame(3, b"c" * 50),
        ContinuationFrame(3, b"", flags=["END_HEADERS"]),
        DataFrame(3, b"data: y\n\n"),
        HeadersFrame(1, b"", flags=["END_HEADERS", "END_STREAM"]),  # empty trailers
    ]
    raw = [bytes(f.serialize()) for f in frames]
    ends = [sum(len(r) for r in raw[: k + 1]) for k in (0, 4, 6)]
    data = b"".join(raw)
    assert block_ends(data, None) == ends
    for cut in range(len(data) + 1):
        assert block_ends(data, cut) == ends, cut
