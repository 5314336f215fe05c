"""The AWS event stream (`application/vnd.amazon.eventstream`), sans-IO: the binary framing Bedrock's ConverseStream
answers with instead of SSE. Bytes in, in any split; whole, checked messages out.

One message, big-endian throughout (AWS, "Event stream encoding",
https://docs.aws.amazon.com/transcribe/latest/dg/event-stream.html; the same in Lex V2's and S3 Select's docs):

    total length    u32   the whole message: these 4 bytes through the message CRC (so never below 16)
    headers length  u32
    prelude CRC     u32   CRC32 of the 8 bytes above
    headers               per header: name length u8, name (UTF-8), value type u8, value
    payload               total - headers - 16 bytes (Bedrock: one JSON event)
    message CRC     u32   CRC32 of every byte before it

Header value types: 0 true, 1 false (no value bytes), 2 byte (i8), 3 short (i16), 4 integer (i32), 5 long (i64),
6 byte array and 7 string (u16 length, then the bytes; a string is UTF-8), 8 timestamp (i64, ms since the epoch),
9 UUID (16 bytes). AWS's own headers say what a message is: `:message-type` (`event`, `exception`, `error`),
`:event-type` (Bedrock: messageStart, contentBlockDelta, ...), `:exception-type`, `:error-code`, `:content-type`.

Why not botocore's `botocore.eventstream.EventStreamBuffer` (read in botocore 1.44; tests/wire/test_eventstream.py
shows each point):
- it is not linear: `add_data` is `self._data += data` and each parsed message is cut off with a slice copy, so a
  message fed in small reads is copied once per read (an 8 MB message in 4 KB reads: 0.44 s there, 0.02 s here);
- its limits are module constants (24 MB payload, 128 KB headers), not the caller's, and malformed messages escape
  its error class or pass: a total length of 0 raises struct.error, one of 12 (shorter than a message can be) is
  returned as a message, an unknown header type raises KeyError, bad UTF-8 in a name UnicodeDecodeError;
- it has no end of stream: a message cut short by EOF is dropped without a word;
- it keeps no message's bytes, and the trace counts frames by their size.
So this is ~150 lines of our own, and botocore is the oracle in the tests: every message they build is decoded by
botocore to the same headers and payload, and every corruption they make is one botocore refuses too.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from tokenpath.errors import ResponseTooLarge, StreamFormatError

PRELUDE_BYTES = 12  # total length, headers length, prelude CRC
CRC_BYTES = 4
MIN_MESSAGE_BYTES = PRELUDE_BYTES + CRC_BYTES  # a message with no headers and no payload
# One message may be this long before the parser gives up: the probe's limit for one SSE event (wire/sse.py
# MAX_EVENT_BYTES). A Bedrock event is a few hundred bytes; a total length past this is refused from the prelude,
# before any of its bytes are held.
MAX_MESSAGE_BYTES = 8 << 20
MAX_HEADERS_BYTES = 128 << 10  # botocore's limit: AWS's own headers are a few dozen bytes each

_PRELUDE = struct.Struct("!III")
_U32 = struct.Struct("!I")
_U16 = struct.Struct("!H")

HeaderValue = bool | int | bytes | str  # timestamps are ints (ms), UUIDs 16 bytes


class HeaderType(IntEnum):
    TRUE = 0
    FALSE = 1
    BYTE = 2
    SHORT = 3
    INTEGER = 4
    LONG = 5
    BYTE_ARRAY = 6
    STRING = 7
    TIMESTAMP = 8
    UUID = 9


# Fixed-size value types: their struct (None: no value bytes, the type is the value).
_FIXED: dict[int, struct.Struct | None] = {
    HeaderType.TRUE: None,
    HeaderType.FALSE: None,
    HeaderType.BYTE: struct.Struct("!b"),
    HeaderType.SHORT: struct.Struct("!h"),
    HeaderType.INTEGER: struct.Struct("!i"),
    HeaderType.LONG: struct.Struct("!q"),
    HeaderType.TIMESTAMP: struct.Struct("!q"),
}
_UUID_BYTES = 16
# Plain ints for the per-header branches (an IntEnum attribute is a descriptor lookup): strings first, as AWS's own
# headers all are.
_STRING, _BYTE_ARRAY, _UUID, _TRUE = int(HeaderType.STRING), int(HeaderType.BYTE_ARRAY), int(HeaderType.UUID), 0


@dataclass(frozen=True, slots=True)
class EventMessage:
    """One whole, CRC-checked message: its exact bytes and its decoded headers."""

    raw: bytes
    headers: dict[str, HeaderValue]
    headers_length: int

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def payload(self) -> bytes:
        return self.raw[PRELUDE_BYTES + self.headers_length : -CRC_BYTES]

    @property
    def data(self) -> bytes:
        """The payload: what a trace shows of a frame, as an SSE frame's data lines."""
        return self.payload

    def header(self, name: str) -> str | None:
        """A string header's value (`:event-type`, `:message-type`, ...), or None."""
        value = self.headers.get(name)
        return value if isinstance(value, str) else None


class EventStreamParser:
    """Feed bytes in any split; get back the messages each feed completed, in order.

    Linear however a message is split: unfinished bytes sit in a bytearray that grows in place, and each message's
    prelude is checked once, as soon as its 12 bytes are in, so a bad or oversized length is refused before the
    parser holds anything of that message. Raises StreamFormatError for a broken message and ResponseTooLarge for
    one longer than `max_message_bytes`; after either the stream cannot be framed, so the caller stops reading."""

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._held = bytearray()  # bytes of the message being read (and nothing after it)
        self._total: int | None = None  # its checked total length, once its prelude is in
        self._max = max_message_bytes

    def feed(self, data: bytes) -> list[EventMessage]:
        held = self._held
        src: bytes | bytearray = data
        if held:
            held += data  # grows in place: amortised O(len(data))
            src = held
        messages: list[EventMessage] = []
        pos, end = 0, len(src)
        while end - pos >= PRELUDE_BYTES:
            total = self._total if self._total is not None else self._prelude(src, pos)
            self._total = total
            if end - pos < total:
                break
            messages.append(_message(bytes(src[pos : pos + total])))
            self._total = None
            pos += total
        if src is held:
            del held[:pos]  # moves only the unfinished message's bytes
        elif pos < end:
            held += memoryview(data)[pos:]
        return messages

    def _prelude(self, src: bytes | bytearray, pos: int) -> int:
        total, _ = check_prelude(src, pos)
        if total > self._max:
            raise ResponseTooLarge(
                f"an event-stream message declares {total} bytes, past the limit of {self._max}: "
                "not a token stream this client can measure"
            )
        return total

    def pending_bytes(self) -> int:
        """Bytes held for a message that has not ended yet."""
        return len(self._held)

    def close(self) -> list[EventMessage]:
        """The body ended. A message cut short is a StreamFormatError (never dropped in silence)."""
        if self._held:
            size = len(self._held)
            expected = f"of {self._total} " if self._total is not None else ""
            self._held = bytearray()
            raise StreamFormatError(
                f"the stream ended inside an event-stream message ({size} bytes {expected}received): truncated",
                truncated=True,
            )
        return []


# last_messages looks this far back per message: a stream's last messages (Bedrock's messageStop and metadata, an
# exception) are a few hundred bytes; a body whose last messages are longer is one that did not end with them (its
# answer is the same: no final event found).
TAIL_SCAN_BYTES = 16 << 10


def last_messages(body: bytes, count: int) -> list[EventMessage]:
    """The body's last whole messages (at least `count` when it has them, and none of a message it ended inside),
    found from its end without parsing the rest: a message starts where a prelude's CRC holds and a parser started
    there reads whole, checked messages (a CRC in a payload that holds by chance fails the message's CRC). Looks
    TAIL_SCAN_BYTES back per message at most."""
    lowest = max(0, len(body) - TAIL_SCAN_BYTES * (count + 1))
    found: list[EventMessage] = []
    for pos in range(len(body) - PRELUDE_BYTES, lowest - 1, -1):
        total = _U32.unpack_from(body, pos)[0]
        if not MIN_MESSAGE_BYTES <= total <= TAIL_SCAN_BYTES or not _prelude_ok(body, pos):
            continue
        try:
            messages = EventStreamParser(MAX_MESSAGE_BYTES).feed(body[pos:])
        except (StreamFormatError, ResponseTooLarge):
            continue
        if len(messages) > len(found):
            found = messages
        if len(found) >= count:
            break
    return found


def _prelude_ok(body: bytes, pos: int) -> bool:
    crc: int = _PRELUDE.unpack_from(body, pos)[2]
    return crc == zlib.crc32(body[pos : pos + 8])


def check_prelude(src: bytes | bytearray, pos: int = 0) -> tuple[int, int]:
    """The total and headers lengths a message's prelude (at `pos`) declares, once its CRC holds, the lengths fit
    one message and the headers their limit: StreamFormatError or ResponseTooLarge otherwise. The parser and the
    gateway's relay (gateway/cuts.py MessageRelay, which checks messages without parsing them) share it."""
    total, headers_length, crc = _PRELUDE.unpack_from(src, pos)
    computed = zlib.crc32(src[pos : pos + 8])  # 8 bytes: a slice costs less than a memoryview
    if crc != computed:
        raise StreamFormatError(
            f"an event-stream message's prelude CRC is 0x{crc:08x}, its bytes give 0x{computed:08x}: "
            "the stream is corrupt or not an AWS event stream"
        )
    if total < MIN_MESSAGE_BYTES or headers_length > total - MIN_MESSAGE_BYTES:
        raise StreamFormatError(
            f"an event-stream message declares {total} bytes with {headers_length} bytes of headers: "
            f"a message is at least {MIN_MESSAGE_BYTES} bytes plus its headers"
        )
    if headers_length > MAX_HEADERS_BYTES:
        raise ResponseTooLarge(
            f"an event-stream message declares {headers_length} bytes of headers, past the limit of {MAX_HEADERS_BYTES}"
        )
    return int(total), int(headers_length)


def check_message_crc(expected: int, computed: int) -> None:
    """StreamFormatError unless a message's CRC (its last 4 bytes, `expected`) is `computed`, the CRC32 of every
    byte before it. The parser and the gateway's relay share it."""
    if expected != computed:
        raise StreamFormatError(
            f"an event-stream message's CRC is 0x{expected:08x}, its bytes give 0x{computed:08x}: the message was "
            "altered on its way (or the stream is not an AWS event stream)"
        )


def with_message_crc(raw: bytes) -> bytes:
    """A whole message whose bytes were changed in place (a recording's redacted text, same length): its last 4 bytes
    made the CRC32 of the bytes before them again, so a client's CRC check passes (the prelude's CRC covers only the
    two lengths, which did not change)."""
    body = raw[: len(raw) - CRC_BYTES]
    return body + _U32.pack(zlib.crc32(body))


def _message(raw: bytes) -> EventMessage:
    total = len(raw)
    (expected,) = _U32.unpack_from(raw, total - CRC_BYTES)
    check_message_crc(expected, zlib.crc32(memoryview(raw)[: total - CRC_BYTES]))
    (headers_length,) = _U32.unpack_from(raw, 4)
    return EventMessage(raw, _headers(raw, PRELUDE_BYTES, PRELUDE_BYTES + headers_length), headers_length)


def _headers(raw: bytes, pos: int, end: int) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    while pos < end:
        name_end = pos + 1 + raw[pos]
        if name_end + 1 > end:
            raise StreamFormatError("an event-stream header runs past the message's headers section")
        try:
            name = raw[pos + 1 : name_end].decode()
        except UnicodeDecodeError:
            raise StreamFormatError("an event-stream header name is not UTF-8") from None
        kind = raw[name_end]
        pos = name_end + 1
        value: HeaderValue
        if kind in (_STRING, _BYTE_ARRAY):
            if pos + 2 > end:
                raise StreamFormatError(f"event-stream header {name!r} runs past the headers section")
            (length,) = _U16.unpack_from(raw, pos)
            value, pos = raw[pos + 2 : pos + 2 + length], pos + 2 + length
            if pos > end:
                raise StreamFormatError(f"event-stream header {name!r} runs past the headers section")
            if kind == _STRING:
                try:
                    value = value.decode()
                except UnicodeDecodeError:
                    raise StreamFormatError(f"event-stream string header {name!r} is not UTF-8") from None
        elif kind in _FIXED:
            fixed = _FIXED[kind]
            if fixed is None:
                value = kind == _TRUE
            else:
                if pos + fixed.size > end:
                    raise StreamFormatError(f"event-stream header {name!r} runs past the headers section")
                (value,) = fixed.unpack_from(raw, pos)
                pos += fixed.size
        elif kind == _UUID:
            value, pos = raw[pos : pos + _UUID_BYTES], pos + _UUID_BYTES
        else:
            raise StreamFormatError(f"event-stream header {name!r} has value type {kind}; the format defines types 0-9")
        if pos > end:
            raise StreamFormatError(f"event-stream header {name!r} runs past the headers section")
        if name in headers:
            raise StreamFormatError(f"event-stream header {name!r} appears twice in one message")
        headers[name] = value
    return headers


# --- writing (the stub's Bedrock stream and the tests) -------------------------------------------------------------


def encode_header(name: str, kind: HeaderType, value: HeaderValue = b"") -> bytes:
    """One header of any type (`value` ignored for TRUE/FALSE; a TIMESTAMP is ms since the epoch)."""
    encoded = name.encode()
    out = bytes([len(encoded)]) + encoded + bytes([kind])
    fixed = _FIXED.get(kind)
    if fixed is not None:
        return out + fixed.pack(value)
    if kind in (HeaderType.TRUE, HeaderType.FALSE):
        return out
    if kind == HeaderType.UUID:
        assert isinstance(value, bytes), "a UUID header is 16 bytes"
        assert len(value) == _UUID_BYTES, "a UUID header is 16 bytes"
        return out + value
    data = value.encode() if isinstance(value, str) else value
    assert isinstance(data, bytes)
    return out + _U16.pack(len(data)) + data


def encode_message(headers: Mapping[str, str] | Iterable[bytes], payload: bytes) -> bytes:
    """One message: string headers by name (what AWS services send), or headers already encoded with
    encode_header, then the payload; both CRCs computed."""
    if isinstance(headers, Mapping):
        block = b"".join(encode_header(k, HeaderType.STRING, v) for k, v in headers.items())
    else:
        block = b"".join(headers)
    total = MIN_MESSAGE_BYTES + len(block) + len(payload)
    head = struct.pack("!II", total, len(block))
    body = head + _U32.pack(zlib.crc32(head)) + block + payload
    return body + _U32.pack(zlib.crc32(body))


def event_message(event_type: str, payload: bytes, content_type: str = "application/json") -> bytes:
    """An `event` message as Bedrock sends one (`:event-type` messageStart, contentBlockDelta, ...)."""
    return encode_message({":event-type": event_type, ":content-type": content_type, ":message-type": "event"}, payload)


def exception_message(exception_type: str, payload: bytes, content_type: str = "application/json") -> bytes:
    """An `exception` message (`:exception-type` throttlingException, modelStreamErrorException, ...)."""
    return encode_message(
        {":exception-type": exception_type, ":content-type": content_type, ":message-type": "exception"}, payload
    )
