"""The NDJSON framer: LF and CRLF lines, blank lines, a last line without a line end, limits; the splits battery."""

from __future__ import annotations

import pytest

from tests.wire.battery import splits
from tests.wire.samples import STREAMS
from tokenpath.errors import ResponseTooLarge, StreamFormatError
from tokenpath.wire.apis import Api
from tokenpath.wire.ndjson import JsonLine, NDJSONParser

MIXED = b'{"a":1}\n{"b":2}\r\n\n  \r\n{"c":"x\\ny"}\n'


def lines(pieces: list[bytes]) -> list[bytes]:
    parser = NDJSONParser()
    out = [line.raw for piece in pieces for line in parser.feed(piece)]
    out += [line.raw for line in parser.close()]
    return out


def test_lines_end_in_lf_or_crlf_and_blank_lines_are_no_frames() -> None:
    got = NDJSONParser().feed(MIXED)
    assert [line.data for line in got] == [b'{"a":1}', b'{"b":2}', b'{"c":"x\\ny"}']
    assert [line.raw for line in got] == [b'{"a":1}\n', b'{"b":2}\r\n', b'{"c":"x\\ny"}\n']
    assert [line.size for line in got] == [8, 9, 13]


@pytest.mark.parametrize("name", ["mixed", "ollama"])
def test_every_split_and_byte_by_byte_give_the_same_lines(name: str) -> None:
    data = MIXED if name == "mixed" else STREAMS[Api.OLLAMA][0]
    whole = lines([data])
    for pieces in splits(data):
        assert lines(pieces) == whole


def test_a_last_line_without_a_line_end_is_a_line_when_it_is_whole_json() -> None:
    parser = NDJSONParser()
    assert parser.feed(b'{"a":1}\n{"done":true}') == [JsonLine(b'{"a":1}\n')]
    assert parser.pending_bytes() == 13
    assert parser.close() == [JsonLine(b'{"done":true}')]
    assert parser.close() == []


def test_a_line_cut_short_at_the_end_of_the_stream_is_an_error() -> None:
    parser = NDJSONParser()
    parser.feed(b'{"a":1}\n{"message":{"cont')
    with pytest.raises(StreamFormatError, match="ended inside an NDJSON line"):
        parser.close()


def test_trailing_whitespace_at_the_end_is_nothing() -> None:
    parser = NDJSONParser()
    parser.feed(b'{"a":1}\n  \r')
    assert parser.close() == []


@pytest.mark.parametrize("pieces", [[b"x" * 101], [b"x" * 60, b"x" * 41], [b"x" * 50 + b"\n" + b"y" * 101]])
def test_a_line_over_the_limit_is_refused_whether_it_ended_or_not(pieces: list[bytes]) -> None:
    parser = NDJSONParser(max_line_bytes=100)
    for piece in pieces[:-1]:
        parser.feed(piece)
    with pytest.raises(ResponseTooLarge, match="past 100 bytes"):
        parser.feed(pieces[-1])


def test_a_line_of_exactly_the_limit_passes() -> None:
    assert len(NDJSONParser(max_line_bytes=100).feed(b"x" * 99 + b"\n")) == 1
    with pytest.raises(ResponseTooLarge):
        NDJSONParser(max_line_bytes=100).feed(b"x" * 100 + b"\n")


def test_a_long_line_fed_in_small_pieces_is_held_in_place() -> None:
    parser = NDJSONParser()
    held = parser._held
    for _ in range(200):
        assert parser.feed(b"x" * 1000) == []
        assert parser._held is held
    assert [line.size for line in parser.feed(b"\n")] == [200_001]
