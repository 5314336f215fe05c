"""Each frame after the first content frame joined to its write by byte offsets: the read that brought a frame's
last byte is its arrival; a body that is not the writes' bytes has no per-frame figure."""

from __future__ import annotations

from array import array

from tokenpath.audit import StreamLog, Write
from tokenpath.load.framedelay import frame_delays_ns

# Four writes of 10 bytes at t = 0 (head frame), 100, 200, 300; the first content frame is write 1.
LOG = StreamLog("s", 100.0, 0, "complete", tuple(Write(i, i * 100, i * 100, 10) for i in range(4)), first_content=1)


def marks(*pairs: tuple[int, int]) -> array[int]:
    return array("q", [v for pair in pairs for v in pair])


def test_each_later_frame_arrives_with_the_read_that_completed_it() -> None:
    streamed = marks((5, 10), (105, 20), (205, 30), (305, 40))
    assert frame_delays_ns(LOG, 1, streamed) == [5, 5]  # writes 2 and 3, 5 ns each
    bunched = marks((5, 10), (105, 20), (390, 40))  # frames 2 and 3 held, then delivered together
    assert frame_delays_ns(LOG, 1, bunched) == [190, 90]
    split = marks((5, 10), (105, 20), (210, 25), (220, 33), (330, 40))  # frame 2 over two reads, 3 with the tail
    assert frame_delays_ns(LOG, 1, split) == [20, 30]


def test_a_body_that_is_not_the_writes_bytes_has_no_figure() -> None:
    assert frame_delays_ns(LOG, 1, marks((5, 10), (105, 39))) is None  # a byte lost or rewritten
    assert frame_delays_ns(LOG, 1, array("q")) is None
