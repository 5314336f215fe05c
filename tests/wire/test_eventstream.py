"""The AWS event-stream parser, held to botocore's decoder: every message here is one botocore decodes to the same
headers and payload, every corruption one botocore refuses too; and the splits battery."""

from __future__ import annotations

import struct
import zlib

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from tests.wire.battery import splits
from tests.wire.samples import ERRORS, STREAMS
from tokenpath.errors import ResponseTooLarge, StreamFormatError
from tokenpath.wire.apis import Api
from tokenpath.wire.eventstream import (
    MIN_MESSAGE_BYTES,
    EventMessage,
    EventStreamParser,
    HeaderType,
    encode_header,
    encode_message,
    event_message,
)

ALL_TYPES = [
    encode_header("t", HeaderType.TRUE),
    encode_header("f", HeaderType.FALSE),
    encode_header("b", HeaderType.BYTE, -2),
    encode_header("s", HeaderType.SHORT, -300),
    encode_header("i", HeaderType.INTEGER, 70_000),
    encode_header("l", HeaderType.LONG, -(1 << 40)),
    encode_header("a", HeaderType.BYTE_ARRAY, b"\x00\xff"),
    encode_header("u8", HeaderType.STRING, "h\u00e9llo"),
    encode_header("ts", HeaderType.TIMESTAMP, 1_700_000_000_000),
    encode_header("id", HeaderType.UUID, bytes(range(16))),
]
ALL_TYPES_VALUES = {
    "t": True, "f": False, "b": -2, "s": -300, "i": 70_000, "l": -(1 << 40), "a": b"\x00\xff", "u8": "h\u00e9llo",
    "ts": 1_700_000_000_000, "id": bytes(range(16)),
}  # fmt: skip

MESSAGES = {
    "empty": encode_message({}, b""),
    "payload only": encode_message({}, b'{"a":1}'),
    "every header type": encode_message(ALL_TYPES, b"payload"),
    "bedrock stream": STREAMS[Api.BEDROCK][0],
    "bedrock exception": ERRORS[Api.BEDROCK][0],
    "bedrock error": ERRORS[Api.BEDROCK][1],
}


def botocore_decode(data: bytes) -> list[tuple[dict[str, object], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(m.headers, m.payload) for m in buffer]


def ours(pieces: list[bytes]) -> list[EventMessage]:
    parser = EventStreamParser()
    out = [m for piece in pieces for m in parser.feed(piece)]
    assert parser.pending_bytes() == 0
    assert parser.close() == []
    return out


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_messages_decode_as_botocore_decodes_them(name: str) -> None:
    data = MESSAGES[name]
    got = ours([data])
    assert [(m.headers, m.payload) for m in got] == botocore_decode(data)
    assert b"".join(m.raw for m in got) == data
    assert all(m.size == len(m.raw) and m.data == m.payload for m in got)


def test_every_header_type_has_its_value() -> None:
    [message] = ours([MESSAGES["every header type"]])
    assert message.headers == ALL_TYPES_VALUES
    assert message.header("u8") == "h\u00e9llo"
    assert message.header("i") is None  # not a string header


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_every_split_and_byte_by_byte_give_the_same_messages(name: str) -> None:
    data = MESSAGES[name]
    whole = [(m.raw, m.headers) for m in ours([data])]
    for pieces in splits(data):
        assert [(m.raw, m.headers) for m in ours(pieces)] == whole


def test_messages_come_out_as_soon_as_their_last_byte_is_in() -> None:
    first, second = event_message("a", b"1"), event_message("b", b"22")
    parser = EventStreamParser()
    assert parser.feed(first[:-1]) == []
    assert [m.header(":event-type") for m in parser.feed(first[-1:] + second[:5])] == ["a"]
    assert parser.pending_bytes() == 5
    assert [m.payload for m in parser.feed(second[5:])] == [b"22"]


def _corrupt(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


GOOD = event_message("contentBlockDelta", b'{"delta":{"text":"hi"}}')


@pytest.mark.parametrize(
    ("at", "message"),
    [(0, "prelude CRC"), (5, "prelude CRC"), (9, "prelude CRC"), (20, "message's CRC"),
     (len(GOOD) - 2, "message's CRC"), (len(GOOD) - 10, "message's CRC")],
)  # fmt: skip
def test_a_flipped_bit_is_a_crc_error_here_and_in_botocore(at: int, message: str) -> None:
    bad = _corrupt(GOOD, at)
    with pytest.raises(ChecksumMismatch):
        botocore_decode(bad)
    with pytest.raises(StreamFormatError, match=message):
        EventStreamParser().feed(bad)


def _with_prelude(total: int, headers_length: int, rest: bytes = b"") -> bytes:
    head = struct.pack("!II", total, headers_length)
    return head + struct.pack("!I", zlib.crc32(head)) + rest


@pytest.mark.parametrize(("total", "headers_length"), [(0, 0), (12, 0), (15, 0), (20, 8)])
def test_a_length_no_message_can_have_is_refused_from_its_prelude(total: int, headers_length: int) -> None:
    with pytest.raises(StreamFormatError, match="at least 16 bytes"):
        EventStreamParser().feed(_with_prelude(total, headers_length, b"\x00" * 8))


def test_a_message_over_the_limit_is_refused_before_its_bytes_are_held() -> None:
    parser = EventStreamParser(max_message_bytes=1024)
    assert parser.feed(encode_message({}, b"x" * (1024 - MIN_MESSAGE_BYTES))) != []  # exactly the limit: fine
    with pytest.raises(ResponseTooLarge, match="1025 bytes, past the limit of 1024"):
        parser.feed(_with_prelude(1025, 0))  # the prelude alone says so


def test_headers_over_their_limit_are_refused() -> None:
    with pytest.raises(ResponseTooLarge, match="bytes of headers"):
        EventStreamParser().feed(_with_prelude(200_000, 150_000))


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b"\x01x\x0a", "value type 10"),  # type 10 does not exist: botocore raises KeyError
        (b"\x02\xff\xfe\x00", "name is not UTF-8"),
        (b"\x01x\x07\x00\x02\xff\xfe", "string header 'x' is not UTF-8"),
        (b"\x01x\x05\x00\x00", "runs past"),  # a long needs 8 bytes
        (b"\x01x\x07\x00\x09ab", "runs past"),  # a string longer than the section
        (b"\x01x\x09\x00", "runs past"),  # a UUID needs 16 bytes
        (b"\x09x", "runs past"),  # a name longer than the section
        (b"\x01x\x00\x01x\x01", "appears twice"),
    ],
)
def test_malformed_headers_are_a_stream_format_error(header: bytes, message: str) -> None:
    with pytest.raises(StreamFormatError, match=message):
        EventStreamParser().feed(encode_message([header], b"{}"))


def test_a_message_cut_short_at_the_end_of_the_stream_is_an_error_never_dropped() -> None:
    parser = EventStreamParser()
    assert len(parser.feed(GOOD + GOOD[:-3])) == 1
    assert botocore_decode(GOOD[:-3]) == []  # botocore says nothing of it
    with pytest.raises(StreamFormatError, match=rf"\({len(GOOD) - 3} bytes of {len(GOOD)} received\): truncated"):
        parser.close()
    parser = EventStreamParser()
    parser.feed(GOOD[:5])  # not even a prelude
    with pytest.raises(StreamFormatError, match="5 bytes received"):
        parser.close()


def test_sse_bytes_are_not_an_event_stream() -> None:
    with pytest.raises(StreamFormatError, match="prelude CRC"):
        EventStreamParser().feed(b'data: {"choices":[]}\n\n')


def test_a_long_message_fed_in_small_pieces_is_held_in_place() -> None:
    """Linear: the bytes of an unfinished message grow in one bytearray; nothing is re-copied per read."""
    big = encode_message({":event-type": "x"}, b"y" * 200_000)
    parser = EventStreamParser()
    held = parser._held
    pieces = [big[i : i + 1000] for i in range(0, len(big), 1000)]
    for piece in pieces[:-1]:
        assert parser.feed(piece) == []
        assert parser._held is held
    [message] = parser.feed(pieces[-1])
    assert message.raw == big
