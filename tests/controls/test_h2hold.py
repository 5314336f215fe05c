"""The buffer control over HTTP/2 (controls/h2hold.py), fed the frames a real h2 server state machine writes."""

from __future__ import annotations

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.settings import SettingCodes
from hyperframe.frame import DataFrame

from tests.wire.battery import splits
from tokenpath.controls.h2hold import FrameCutter, H2BufferPolicy, sniff_h2
from tokenpath.controls.policies import BufferLimitExceeded, HeldBytes
from tokenpath.serve.h2 import PREFACE

EVENT = b"data: " + b"x" * 52 + b"\n\n"  # a 60-byte SSE frame


def test_sniff_decides_on_the_preface_and_on_the_first_byte_that_differs() -> None:
    for i in range(len(PREFACE)):
        assert sniff_h2(PREFACE[:i]) is None
    assert sniff_h2(PREFACE) is True
    assert sniff_h2(PREFACE + b"\x00\x00") is True
    assert sniff_h2(b"P") is None
    assert sniff_h2(b"POST / HTTP/1.1\r\n") is False
    assert sniff_h2(b"G") is False


class Pair:
    """An h2 client and server (the h2 library's state machines) whose bytes the test hands to the policy."""

    def __init__(self, window: int = 65_535) -> None:
        self.client = H2Connection(H2Configuration(client_side=True))
        self.server = H2Connection(H2Configuration(client_side=False))
        self.client.initiate_connection()
        self.client.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: window})  # a second SETTINGS frame
        self.server.initiate_connection()
        self.writes: list[list[bytes]] = []
        self.policy = H2BufferPolicy(self.writes.append)
        self.request_bytes = self.client.data_to_send()
        self.server.receive_data(self.request_bytes)
        self.policy.observe_request(self.request_bytes)

    def request(self) -> int:
        sid: int = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "a")])
        self.client.end_stream(sid)
        out = self.client.data_to_send()
        self.policy.observe_request(out)
        self.server.receive_data(out)
        return sid

    def upstream(self) -> bytes:
        return self.server.data_to_send()


def response(pair: Pair, sid: int, events: int, end: bool = True) -> bytes:
    pair.server.send_headers(sid, [(":status", "200"), ("content-type", "text/event-stream")])
    for i in range(events):
        pair.server.send_data(sid, EVENT, end_stream=end and i == events - 1)
    return pair.upstream()


def kinds(write: list[bytes]) -> list[str]:
    return [type(f).__name__ for f, _ in FrameCutter().feed(b"".join(write))]


def test_the_body_is_held_until_its_stream_ends_then_written_at_once() -> None:
    """The splits battery (tests/wire/battery.py): the server's bytes at every split point and a byte at a time."""
    pair = Pair()
    settings = pair.upstream()
    sid = pair.request()
    data = settings + response(pair, sid, 12)
    for pieces in splits(data):
        writes: list[list[bytes]] = []
        policy = H2BufferPolicy(writes.append)
        policy.observe_request(pair.request_bytes)
        for piece in pieces:
            policy.feed(piece)
        body = [w for w in writes if "DataFrame" in kinds(w)]
        assert len(body) == 1  # one write for the body
        assert writes[-1] is body[0]  # nothing of it before its end
        assert kinds(body[0][-1:]) == ["DataFrame"] * 12  # the body as one piece: one arrival for the client
        assert sorted(b"".join(b"".join(w) for w in writes)) == sorted(data)  # every byte reached the client


def test_a_kept_alive_connection_serves_a_second_stream_without_eof() -> None:
    """Over 1.1 buffer writes at the upstream's EOF; over h2 that never comes, so each stream's end releases it."""
    pair = Pair()
    pair.policy.feed(pair.upstream())
    for _ in range(2):
        sid = pair.request()
        before = len(pair.writes)
        pair.policy.feed(response(pair, sid, 3))
        assert kinds(pair.writes[-1][-1:]) == ["DataFrame"] * 3
        assert len(pair.writes) > before


def test_streams_are_held_and_released_each_at_its_own_end() -> None:
    pair = Pair()
    pair.policy.feed(pair.upstream())
    one, two = pair.request(), pair.request()
    pair.policy.feed(response(pair, one, 2, end=False))
    pair.policy.feed(response(pair, two, 2))  # two ends first: only its body goes
    last = [f for f, _ in FrameCutter().feed(b"".join(pair.writes[-1]))]
    assert {f.stream_id for f in last if isinstance(f, DataFrame)} == {two}
    pair.server.send_data(one, EVENT, end_stream=True)
    pair.policy.feed(pair.upstream())
    last = [f for f, _ in FrameCutter().feed(b"".join(pair.writes[-1]))]
    assert [f.stream_id for f in last if isinstance(f, DataFrame)] == [one] * 3


def test_trailers_follow_their_body_and_a_reset_drops_it() -> None:
    pair = Pair()
    pair.policy.feed(pair.upstream())
    sid = pair.request()
    pair.policy.feed(response(pair, sid, 2, end=False))
    pair.server.send_headers(sid, [("x-trailer", "1")], end_stream=True)
    pair.policy.feed(pair.upstream())
    frames = [type(f).__name__ for f, _ in FrameCutter().feed(b"".join(pair.writes[-1][-2:]))]
    assert frames == ["DataFrame", "DataFrame", "HeadersFrame"]
    sid = pair.request()
    pair.policy.feed(response(pair, sid, 2, end=False))
    pair.server.reset_stream(sid)
    pair.policy.feed(pair.upstream())
    assert kinds(pair.writes[-1]) == ["RstStreamFrame"]
    pair.policy.finish()  # nothing left of the reset stream
    assert kinds(pair.writes[-1]) == ["RstStreamFrame"]


def test_a_body_past_the_clients_window_is_released_rather_than_deadlocked() -> None:
    """The upstream stops at the client's window and the client opens it only as it reads: holding on would hang."""
    small = Pair(window=300)  # 5 events fill it
    small.policy.feed(small.upstream())
    sid = small.request()
    small.policy.feed(response(small, sid, 5, end=False))
    assert small.policy.forced_releases == 1
    assert kinds(small.writes[-1][-1:]) == ["DataFrame"] * 5
    wide = Pair(window=6 * 1024 * 1024)  # the browser's window: nothing forced
    wide.client.increment_flow_control_window(15 * 1024 * 1024)
    wide.policy.observe_request(wide.client.data_to_send())
    wide.policy.feed(wide.upstream())
    sid = wide.request()
    wide.policy.feed(response(wide, sid, 40))
    assert wide.policy.forced_releases == 0
    assert kinds(wide.writes[-1][-1:]) == ["DataFrame"] * 40


def test_the_hold_is_bounded() -> None:
    pair = Pair()
    pair.policy = H2BufferPolicy(pair.writes.append, limit=500)
    pair.policy.observe_request(pair.request_bytes)
    pair.policy.feed(pair.upstream())
    sid = pair.request()
    with pytest.raises(BufferLimitExceeded):
        pair.policy.feed(response(pair, sid, 12, end=False))


def test_upstream_eof_writes_what_is_held() -> None:
    pair = Pair()
    pair.policy.feed(pair.upstream())
    sid = pair.request()
    pair.policy.feed(response(pair, sid, 3, end=False)[:-10])  # a partial frame at the end too
    pair.policy.finish()
    assert kinds(pair.writes[-1][:1]) == ["DataFrame", "DataFrame"]
    assert len(pair.writes[-1]) == 2  # the held body and the partial frame's bytes


def test_settings_change_moves_open_windows() -> None:
    pair = Pair(window=1000)
    pair.policy.feed(pair.upstream())
    sid = pair.request()
    pair.policy.feed(response(pair, sid, 1, end=False))
    pair.client.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 100_000})
    out = pair.client.data_to_send()
    pair.policy.observe_request(out)
    pair.server.receive_data(out)
    for _ in range(20):
        pair.server.send_data(sid, EVENT)
    pair.policy.feed(pair.upstream())
    assert pair.policy.forced_releases == 0  # 21 events > 1000 bytes: the new setting was applied


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + b"\x00" * 5,  # SETTINGS whose length is no multiple of 6
        b"\x00\x00\x04\x08\x00\x00\x00\x00\x00" + b"\x00" * 4,  # WINDOW_UPDATE of 0 on the connection
        b"\x00\x00\x06\x04\x00\x00\x00\x00\x01" + b"\x00" * 6,  # SETTINGS on a stream
    ],
)
def test_client_frames_it_cannot_read_end_the_connection(garbage: bytes) -> None:
    policy = H2BufferPolicy(lambda pieces: None)
    with pytest.raises(BufferLimitExceeded):
        policy.observe_request(PREFACE + garbage)


def test_streams_held_over_h2_count_against_the_relays_total_and_are_given_back() -> None:
    held = HeldBytes(limit=1_000)
    pair = Pair()
    pair.policy = H2BufferPolicy(pair.writes.append, held=held)
    pair.policy.observe_request(pair.request_bytes)
    pair.policy.feed(pair.upstream())
    first, second = pair.request(), pair.request()
    pair.policy.feed(response(pair, first, 8, end=False))  # 8 DATA frames of 69 bytes held
    assert held.held == 8 * (9 + len(EVENT))
    with pytest.raises(BufferLimitExceeded, match="together"):
        pair.policy.feed(response(pair, second, 8, end=False))
    pair.server.end_stream(first)
    pair.policy.feed(pair.upstream())  # the first stream ends: written, given back
    assert held.held < 8 * (9 + len(EVENT))
    pair.policy.close()
    assert held.held == 0
