"""The gateway's event-stream relay checks each message whole before the client gets it (issue 33): a message whose
payload, headers or CRC was altered, or whose prelude declares headers past the message or past MAX_HEADERS_BYTES,
ends the relay after the whole messages before it, however the upstream's reads split the bytes, so the client's SDK
parses those messages and then the gateway's error frame, never the corrupt message."""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable

import pytest

from tests.wire.battery import splits
from tokenpath.gateway.relay import Relay
from tokenpath.gateway.streamformat import FORMATS
from tokenpath.wire.apis import Api
from tokenpath.wire.eventstream import (
    CRC_BYTES,
    MAX_HEADERS_BYTES,
    PRELUDE_BYTES,
    EventStreamParser,
    encode_message,
    event_message,
    exception_message,
)

BEFORE = [
    event_message("messageStart", b'{"role":"assistant"}'),
    event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"hi"}}'),
]
TARGET = event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":" there"}}')
AFTER = event_message("messageStop", b'{"stopReason":"end_turn"}')


def _flip(message: bytes, at: int) -> bytes:
    bad = bytearray(message)
    bad[at] ^= 0x01
    return bytes(bad)


def _headers_length(message: bytes, headers_length: int) -> bytes:
    """The message with another headers length in its prelude, and both CRCs made right again: only the length
    is wrong."""
    head = message[:4] + struct.pack("!I", headers_length)
    body = head + struct.pack("!I", zlib.crc32(head)) + message[PRELUDE_BYTES:-CRC_BYTES]
    return body + struct.pack("!I", zlib.crc32(body))


def _prelude_only(total: int, headers_length: int) -> bytes:
    """A prelude with its CRC right, and a few bytes of the message it starts (the relay stops at the prelude)."""
    head = struct.pack("!II", total, headers_length)
    return head + struct.pack("!I", zlib.crc32(head)) + b"\x00" * 20


CORRUPTIONS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "payload byte": (lambda m: _flip(m, len(m) - CRC_BYTES - 5), "message's CRC"),
    "header byte": (lambda m: _flip(m, PRELUDE_BYTES + 3), "message's CRC"),  # in the first header's name
    "message CRC byte": (lambda m: _flip(m, len(m) - 1), "message's CRC"),
    "headers past the message": (lambda m: _headers_length(m, len(m) - 15), "bytes of headers"),
    "headers past their limit": (lambda m: _prelude_only(200_000, MAX_HEADERS_BYTES + 1), "past the limit of 131072"),
}


def relay_reads(pieces: list[bytes]) -> tuple[bytes, Relay]:
    """What the gateway's relay sends on for these upstream reads, with nothing after a failure."""
    relay = Relay(FORMATS[Api.BEDROCK], chunked=False)
    sent = b"".join(relay.feed(piece) for piece in pieces)
    if relay.failure is None:
        sent += relay.finish(by_close=True)[0]
    return sent, relay


@pytest.mark.parametrize("before", [0, len(BEFORE)], ids=["first", "after-whole-messages"])
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_message_stops_the_relay_after_the_whole_ones_at_every_split(corruption: str, before: int) -> None:
    corrupt, reason = CORRUPTIONS[corruption]
    whole = b"".join(BEFORE[:before])
    raw = whole + corrupt(TARGET) + AFTER
    for pieces in splits(raw):
        sent, relay = relay_reads(pieces)
        assert sent == whole, [len(p) for p in pieces]
        assert relay.failure is not None, [len(p) for p in pieces]
        assert relay.failure.broken is not None
        assert reason in relay.failure.broken
    # What the client parses: the whole messages, then the error frame (never the corrupt message)
    parser = EventStreamParser()
    messages = parser.feed(sent + relay.error_frame("upstream sent a corrupt message", "upstream_malformed"))
    assert [m.raw for m in messages[:-1]] == BEFORE[:before]
    assert messages[-1].header(":message-type") == "exception"
    assert parser.pending_bytes() == 0


def test_good_messages_split_anywhere_all_go_on() -> None:
    """The checks pass every message that holds, however split: one with no headers and no payload (16 bytes,
    its CRC right after its prelude) too."""
    raw = b"".join(BEFORE) + exception_message("throttlingException", b"{}") + encode_message({}, b"") + AFTER
    raw += event_message("contentBlockDelta", b"y" * 300)
    for pieces in splits(raw):
        sent, relay = relay_reads(pieces)
        assert relay.failure is None
        assert sent == raw


def test_one_flipped_bit_anywhere_stops_the_relay_at_its_message() -> None:
    """Random streams, one bit flipped at a random place, random reads: what goes on is exactly the messages before
    the one that holds the flipped bit (CRC32 catches every single-bit error, in the prelude or after it)."""
    rng = random.Random(33)
    for _ in range(300):
        messages = [event_message("contentBlockDelta", b"x" * rng.randint(0, 200)) for _ in range(rng.randint(1, 5))]
        raw = bytearray(b"".join(messages))
        at = rng.randrange(len(raw))
        raw[at] ^= 1 << rng.randrange(8)
        cuts = sorted(rng.sample(range(len(raw) + 1), min(len(raw) + 1, rng.randint(0, 8))))
        pieces = [bytes(raw[a:b]) for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        sent, relay = relay_reads(pieces)
        ends = [sum(map(len, messages[: i + 1])) for i in range(len(messages))]
        whole = sum(1 for end in ends if end <= at)
        assert sent == b"".join(messages[:whole]), (at, cuts)
        assert relay.failure is not None
        assert relay.failure.broken is not None
