"""The HTTP/2 frame guard (wire/h2guard.py FrameGuard), without a network: every bound, and the same verdict
and frame boundaries however the member's bytes are split across reads."""

from __future__ import annotations

import pytest
from hyperframe.frame import ContinuationFrame, DataFrame, Frame, HeadersFrame, PingFrame, SettingsFrame

from tokenpath.wire.h2guard import (
    CONTROL_FRAMES_PER_S,
    MAX_CONTINUATION_FRAMES,
    MAX_CONTROL_BURST,
    MAX_HEADER_BLOCK_BYTES,
    FrameGuard,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def wire(*frames: Frame) -> bytes:
    return b"".join(bytes(f.serialize()) for f in frames)


def feed(data: bytes, cut: int | None = None, clock: Clock | None = None) -> tuple[str | None, list[int]]:
    """Feed `data` whole, or in two reads cut at `cut`: the verdict and the frame ends (as offsets in `data`)."""
    guard = FrameGuard(clock or Clock(), 16384)
    ends: list[int] = []
    pieces = [data] if cut is None else [data[:cut], data[cut:]]
    offset = 0
    for piece in pieces:
        why = guard.feed(piece)
        ends += [offset + e for e in guard.ends]
        offset += len(piece)
        if why is not None:
            return why, ends
    return None, ends


def honest() -> bytes:
    return wire(
        SettingsFrame(0),
        HeadersFrame(1, data=b"\x88", flags=["END_HEADERS"]),
        DataFrame(1, b"data: x\n\n"),
        HeadersFrame(3, data=b"h" * 100),
        ContinuationFrame(3, data=b"c" * 100),
        ContinuationFrame(3, data=b"", flags=["END_HEADERS"]),
        PingFrame(0, opaque_data=b"12345678"),
        DataFrame(3, b"", flags=["END_STREAM"]),
    )


def test_honest_frames_pass_with_their_boundaries_at_every_split() -> None:
    data = honest()
    why, ends = feed(data)
    assert why is None
    assert len(ends) == 8
    assert ends[-1] == len(data)
    for cut in range(len(data) + 1):
        assert feed(data, cut) == (None, ends), cut


@pytest.mark.parametrize(
    ("flood", "expected"),
    [
        (wire(HeadersFrame(1)) + wire(ContinuationFrame(1)) * (MAX_CONTINUATION_FRAMES + 1), "CONTINUATION"),
        (
            wire(HeadersFrame(1, data=b"h" * 16384), *[ContinuationFrame(1, data=b"c" * 16384)] * 4),
            f"header block over {MAX_HEADER_BLOCK_BYTES}",
        ),
        (wire(PingFrame(0)) * (MAX_CONTROL_BURST + 1), "PING/SETTINGS"),
        (wire(SettingsFrame(0)) * (MAX_CONTROL_BURST + 1), "PING/SETTINGS"),
        ((16385).to_bytes(3, "big") + b"\x00\x00\x00\x00\x00\x01", "16385-byte frame"),
    ],
    ids=["continuations", "block-bytes", "pings", "settings", "frame-size"],
)
def test_each_bound_is_named_at_every_split(flood: bytes, expected: str) -> None:
    why, _ = feed(flood)
    assert why is not None
    assert expected in why
    for cut in range(0, len(flood), max(1, len(flood) // 97)):
        split, _ = feed(flood, cut)
        assert split is not None
        assert expected in split


def test_acks_count_too_and_the_allowance_comes_back_with_time() -> None:
    """Was (issue 33): ACKs were not counted, and 200,000 SETTINGS ACKs cost a server 1.6 s of its one core."""
    for ack in (PingFrame(0, flags=["ACK"], opaque_data=b"\0" * 8), SettingsFrame(0, flags=["ACK"])):
        assert feed(wire(ack) * MAX_CONTROL_BURST)[0] is None
        assert feed(wire(ack) * (MAX_CONTROL_BURST + 1))[0] is not None
    clock = Clock()
    guard = FrameGuard(clock, 16384)
    assert guard.feed(wire(PingFrame(0)) * MAX_CONTROL_BURST) is None
    assert guard.feed(wire(PingFrame(0))) is not None  # the burst is spent
    guard = FrameGuard(clock, 16384)
    assert guard.feed(wire(PingFrame(0)) * MAX_CONTROL_BURST) is None
    clock.now += 1.0
    assert guard.feed(wire(PingFrame(0)) * int(CONTROL_FRAMES_PER_S)) is None  # a second's worth came back
    assert guard.feed(wire(PingFrame(0))) is not None
