"""SSEParser.feed's short way (a read that is one whole single-line event, LF line ends, after a boundary) against
its scan: the same frames, the same state after, and the short way really taken."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpath.wire import sse
from tokenpath.wire.sse import Frame, SSEParser

SINGLE_LINE_EVENTS = [
    b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n',
    b"data:no-space\n\n",
    b"data:  two spaces\n\n",
    b"data:\n\n",  # empty data: a frame whose data is b""
    b"data\n\n",  # a field name alone
    b": a comment\n\n",
    b":\n\n",
    b"event: ping\n\n",
    b"id: 7\n\n",
    b"retry: 100\n\n",
    b"unknown: field\n\n",
    b"data: [DONE]\n\n",
    b"x\n\n",
]
# Shaped like one line and a blank line, but a CR ends a line too: two lines, or a line and a blank one.
WITH_A_CR = [b"data: a\r\n\n", b"data: a\rdata: b\n\n", b"data: a\r\n"]


def summary(frames: list[Frame]) -> list[tuple[bytes | None, bytes | None, bytes | None, list[bytes], bytes, type]]:
    return [(f.data, f.event, f.id, f.comments, f.raw, type(f.raw)) for f in frames]


def the_scans(data: bytes) -> list[Frame]:
    """The frames the scan makes of `data`: fed as two pieces, the short way cannot apply to the second."""
    parser = SSEParser()
    parser.feed(b"data: before\n\n")
    return parser.feed(data[:1]) + parser.feed(data[1:])


def state(parser: SSEParser) -> tuple[object, ...]:
    return (bytes(parser._buf), parser._scan, parser._line_start, parser._lines, parser._at_start, parser._skip_lf)


@pytest.mark.parametrize("event", SINGLE_LINE_EVENTS + WITH_A_CR)
def test_a_whole_single_line_event_parses_as_the_scan_parses_it(event: bytes) -> None:
    parser = SSEParser()
    assert summary(parser.feed(event)) == summary(the_scans(event))
    scanned = SSEParser()
    scanned.feed(event[:1])
    scanned.feed(event[1:])
    assert state(parser) == state(scanned)


OTHER_READS = [b"data: a\r\n\r\n", b"data: a\ndata: b\n\n", b"\n", b"dat"]


@settings(deadline=None)  # no timing is asserted: a loaded machine may run an example slowly
@given(st.lists(st.sampled_from([*SINGLE_LINE_EVENTS, *WITH_A_CR, *OTHER_READS])))
def test_any_sequence_of_reads_parses_as_byte_by_byte(reads: list[bytes]) -> None:
    """Reads that take the short way mixed with reads that do not (CRLF, two lines, a blank line, a piece of a
    line): the frames are those of the same bytes fed one byte at a time, which never takes it."""
    whole = SSEParser()
    frames = [f for read in reads for f in whole.feed(read)]
    one_by_one = SSEParser()
    data = b"".join(reads)
    expected = [f for i in range(len(data)) for f in one_by_one.feed(data[i : i + 1])]
    assert summary(frames) == summary(expected)


def test_the_short_way_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """No line search for a whole single-line event; a read it does not fit still searches."""

    class NoSearch:
        def search(self, *args: object) -> None:
            raise AssertionError("the scan ran")

    monkeypatch.setattr(sse, "_LINE_END", NoSearch())
    parser = SSEParser()
    assert [f.data for f in parser.feed(b"data: a\n\n")] == [b"a"]
    assert [f.data for f in parser.feed(b"data: b\n\n")] == [b"b"]
    with pytest.raises(AssertionError, match="the scan ran"):
        parser.feed(b"data: c\r\n\r\n")


@pytest.mark.parametrize(
    "first",
    [
        b"\xef\xbb\xbfdata: a\n\n",  # a BOM: the scan strips it at the start of a stream
        bytearray(b"data: a\n\n"),  # the scan copies a bytearray's frames out as bytes
    ],
)
def test_what_the_short_way_leaves_to_the_scan(first: bytes) -> None:
    frames = SSEParser().feed(first)
    assert [(f.data, f.raw, type(f.raw)) for f in frames] == [(b"a", b"data: a\n\n", bytes)]


def test_after_a_cr_the_short_way_waits_for_the_scan() -> None:
    """A read that ended on a CR may be followed by the LF of that CRLF, which then belongs to the event the CR
    ended. A whole event in between settles that it was not: the LF after it is a blank line of no event."""
    parser = SSEParser()
    (a,) = parser.feed(b"data: a\r\r")
    assert [f.data for f in parser.feed(b"data: b\n\n")] == [b"b"]
    assert [f.data for f in parser.feed(b"\ndata: c\n\n")] == [b"c"]
    assert a.raw == b"data: a\r\r"  # the short way at b would have left the CR's LF pending: a.raw would end in LF
