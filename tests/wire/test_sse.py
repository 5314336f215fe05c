from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpath.errors import ProtocolError
from tokenpath.wire.openai import FrameKind, classify
from tokenpath.wire.sse import Frame, SSEParser

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b"event: token\nid: 7\ndata: first line\ndata: second line\n\n"
    b"data:no-space\n\n"
    b"data: [DONE]\n\n"
)


def parse_in_pieces(data: bytes, cuts: list[int]) -> list[Frame]:
    parser = SSEParser()
    frames: list[Frame] = []
    prev = 0
    for cut in [*sorted(cuts), len(data)]:
        frames.extend(parser.feed(data[prev:cut]))
        prev = cut
    return frames


def summary(frames: list[Frame]) -> list[tuple[bytes | None, bytes | None, bytes | None, int, bytes]]:
    return [(f.data, f.event, f.id, len(f.comments), f.raw) for f in frames]


def test_whole_input() -> None:
    frames = SSEParser().feed(STREAM)
    assert [f.data for f in frames] == [
        None,
        b'{"choices":[{"delta":{"role":"assistant","content":""}}]}',
        b"first line\nsecond line",
        b"no-space",
        b"[DONE]",
    ]
    assert frames[0].comments == [b" keep-alive comment"]
    assert frames[2].event == b"token"
    assert frames[2].id == b"7"
    assert b"".join(f.raw for f in frames) == STREAM


def test_byte_by_byte_matches_whole() -> None:
    parser = SSEParser()
    frames = [f for i in range(len(STREAM)) for f in parser.feed(STREAM[i : i + 1])]
    assert summary(frames) == summary(SSEParser().feed(STREAM))


def test_every_single_split_point() -> None:
    whole = summary(SSEParser().feed(STREAM))
    for cut in range(len(STREAM) + 1):
        assert summary(parse_in_pieces(STREAM, [cut])) == whole, cut


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    data = b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    parser = SSEParser()
    frames = [f for i in range(len(data)) for f in parser.feed(data[i : i + 1])]
    assert [f.data for f in frames] == [b"a\nb", b"c"]


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    parser = SSEParser()
    frames = parser.feed(b"data: x\r\n\r")  # the CR ends the blank line now; no waiting for a possible LF
    assert [f.data for f in frames] == [b"x"]
    assert parser.feed(b"\n") == []  # the rest of that CRLF, not another blank line
    assert frames[0].raw == b"data: x\r\n\r\n"  # and it is counted in the frame's bytes
    assert [f.data for f in parser.feed(b"data: y\r\n\r\n")] == [b"y"]


def test_cr_only_frame_completes_in_the_read_that_carries_it() -> None:
    parser = SSEParser()
    assert [f.data for f in parser.feed(b"data: 1\r\r")] == [b"1"]
    assert [f.data for f in parser.feed(b"data: 2\r\r")] == [b"2"]


def test_raw_bytes_of_frames_reassemble_the_stream_in_any_split() -> None:
    data = b"\r\ndata: a\r\n\r\n\r\ndata: b\r\rdata: c\n\n"
    for cut in range(len(data) + 1):
        frames = parse_in_pieces(data, [cut])
        assert [f.raw for f in frames] == [b"data: a\r\n\r\n", b"data: b\r\r", b"data: c\n\n"], cut


def test_mixed_line_endings_in_one_stream() -> None:
    frames = SSEParser().feed(b"data: a\r\n\r\ndata: b\n\ndata: c\r\r")
    assert [f.data for f in frames] == [b"a", b"b", b"c"]


def test_trailing_incomplete_frame_is_held_not_emitted() -> None:
    parser = SSEParser()
    frames = parser.feed(b"data: 1\n\ndata: 2\n")
    assert [f.data for f in frames] == [b"1"]
    assert parser.pending_bytes() == len(b"data: 2\n")
    assert [f.data for f in parser.feed(b"\n")] == [b"2"]
    assert parser.pending_bytes() == 0


def test_extra_blank_lines_are_not_frames() -> None:
    frames = SSEParser().feed(b"\n\n\ndata: a\n\n\n\n")
    assert [f.data for f in frames] == [b"a"]
    assert frames[0].raw == b"data: a\n\n"


def test_leading_bom_is_dropped_even_when_split() -> None:
    parser = SSEParser()
    assert parser.feed(b"\xef\xbb") == []
    assert [f.data for f in parser.feed(b"\xbfdata: a\n\n")] == [b"a"]


def test_empty_data_field_is_data() -> None:
    frames = SSEParser().feed(b"data\n\n")
    assert frames[0].data == b""


chunks_of = st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=30)


@given(chunks_of)
def test_parsing_is_independent_of_how_bytes_are_split(cuts: list[int]) -> None:
    assert summary(parse_in_pieces(STREAM, cuts)) == summary(SSEParser().feed(STREAM))


events = st.lists(
    st.tuples(
        st.lists(
            st.text(alphabet=st.characters(blacklist_characters="\r\n", codec="utf-8"), max_size=20),
            min_size=1,
            max_size=3,
        ),
        st.sampled_from([b"\n", b"\r\n", b"\r"]),
    ),
    max_size=8,
)


@given(events, st.data())
def test_generated_streams_round_trip(evs: list[tuple[list[str], bytes]], data: st.DataObject) -> None:
    wire = b""
    expected = []
    for lines, eol in evs:
        for line in lines:
            wire += b"data: " + line.encode() + eol
        wire += eol
        expected.append("\n".join(lines).encode())
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(wire)), max_size=10))
    assert [f.data for f in parse_in_pieces(wire, cuts)] == expected


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (None, FrameKind.COMMENT),
        (b"[DONE]", FrameKind.DONE),
        (b"17", FrameKind.CONTENT),
        (
            json.dumps({"choices": [{"delta": {"role": "assistant", "content": ""}}]}).encode(),
            FrameKind.CONTROL,
        ),
        (json.dumps({"choices": [{"delta": {"content": " hi"}}]}).encode(), FrameKind.CONTENT),
        (json.dumps({"choices": [{"delta": {"reasoning_content": "hm"}}]}).encode(), FrameKind.REASONING),  # not TTFT
        (json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]}).encode(), FrameKind.CONTROL),
        (json.dumps({"choices": [], "usage": {"total_tokens": 3}}).encode(), FrameKind.CONTROL),
        (json.dumps({"choices": [{"text": " hi"}]}).encode(), FrameKind.CONTENT),
        (json.dumps({"error": {"message": "boom"}}).encode(), FrameKind.ERROR),
        (json.dumps({"anything": 1}).encode(), FrameKind.FOREIGN),
        (b"{not json", FrameKind.CONTENT),
        (json.dumps({"type": "message_start", "message": {}}).encode(), FrameKind.FOREIGN),  # Anthropic's
        (b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}", FrameKind.CONTENT),  # too deep to parse: never a crash
    ],
)
def test_classify(data: bytes | None, kind: FrameKind) -> None:
    assert classify(data) is kind


def test_an_event_past_the_limit_is_a_protocol_error_not_unbounded_memory() -> None:
    parser = SSEParser(max_event_bytes=1000)
    parser.feed(b"data: " + b"x" * 900)
    with pytest.raises(ProtocolError, match="grew past 1000 bytes"):
        parser.feed(b"y" * 200)


def test_parsing_is_linear_in_the_bytes_fed_however_an_event_is_split() -> None:
    """A quadratic parser re-copies the held event on every feed: 4x the bytes costs 16x the time. Measured as a
    ratio side by side (best of 3) in this thread's CPU time, so a loaded machine cannot break it (time spent
    waiting for a core is not counted): linear is ~4, quadratic ~16."""

    def cost(n_bytes: int) -> float:
        piece = b"x" * 4096
        best = float("inf")
        for _ in range(3):
            parser = SSEParser()
            t0 = time.thread_time()
            parser.feed(b"data: ")
            for _ in range(n_bytes // len(piece)):
                parser.feed(piece)
            frames = parser.feed(b"\n\n")
            best = min(best, time.thread_time() - t0)
            assert len(frames) == 1
            assert len(frames[0].raw) == n_bytes + 8
        return best

    assert cost(4 << 20) / cost(1 << 20) < 9
