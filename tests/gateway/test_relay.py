"""gateway.relay.Relay, the sans-IO relay rules the gateway's hot path calls: fed every format's streams at every
split (and random LF/CRLF/CR splits), it sends whole frames only, counts them, and flags the read that completes
the first content frame, whatever the split."""

from __future__ import annotations

import random

import pytest

from tests.gateway.test_stream_formats import BEDROCK_STREAM, OLLAMA_LINES
from tests.wire.battery import splits
from tokenpath.gateway.relay import TTFT_SCAN_BYTES, Relay
from tokenpath.gateway.streamformat import StreamFormat, for_response
from tokenpath.wire.apis import Api
from tokenpath.wire.eventstream import event_message
from tokenpath.wire.framing import chunk
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import FrameReader
from tokenpath.wire.sse import MAX_EVENT_BYTES

ROLE = b'data: {"choices":[{"delta":{"role":"assistant"}}]}'
CONTENT = b'data: {"choices":[{"delta":{"content":"hi"}}]}'
OPENAI = [ROLE, b": keep-alive", CONTENT, CONTENT, b"data: [DONE]"]

SSE = for_response(Api.OPENAI, "text/event-stream")
BEDROCK = for_response(Api.BEDROCK, "application/vnd.amazon.eventstream")
OLLAMA = for_response(Api.OLLAMA, "application/x-ndjson")


def first_content_read(stream: StreamFormat, pieces: list[bytes]) -> int | None:
    """The index of the read that completes the first content frame, by the format's own parser."""
    reader = FrameReader(stream.api)
    for i, piece in enumerate(pieces):
        if any(reader.kind(f) is FrameKind.CONTENT for f in reader.feed(piece)):
            return i
    return None


def assert_relays(stream: StreamFormat | None, pieces: list[bytes]) -> None:
    """Whole frames per read (the format's parser, fed what was sent, holds nothing after each read), all of them
    counted, nothing lost or reordered, and first_token flagged at exactly the read that completed the first content
    frame (news raised then, cleared by the caller)."""
    assert stream is not None
    relay = Relay(stream, chunked=False)
    upstream, client = FrameReader(stream.api), FrameReader(stream.api)
    expected_first = first_content_read(stream, pieces)
    sent, total, first = [], 0, None
    for i, piece in enumerate(pieces):
        out = relay.feed(piece)
        if relay.news:
            relay.news = False
            if relay.first_token and first is None:
                first = i
        frames = upstream.feed(piece)
        assert [f.raw for f in client.feed(out)] == [f.raw for f in frames], pieces
        assert client.pending_bytes() == 0, pieces  # the client never reads half a frame
        total += len(frames)
        sent.append(out)
    assert relay.frames == total
    assert relay.failure is None
    assert first == expected_first, pieces
    raw = b"".join(pieces)
    held = relay.held
    assert b"".join(sent) + held == raw
    rest, cut = relay.finish(by_close=True)
    frames = FrameReader(stream.api).feed(raw)
    ends = [FrameReader(stream.api).ends(frame) for frame in frames]
    if held and not rest:
        assert cut is not None
        assert "inside a frame" in cut
    elif not any(ends):
        assert cut is not None
        assert "final event" in cut
    elif ends[-1]:
        assert cut is None
        assert b"".join(sent) + rest == raw


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_openai_sse_at_every_split_with_each_line_end(eol: bytes) -> None:
    raw = b"".join(line + eol + eol for line in OPENAI)
    for pieces in splits(raw):
        assert_relays(SSE, pieces)


def test_event_stream_and_ndjson_at_every_split() -> None:
    for pieces in splits(BEDROCK_STREAM):
        assert_relays(BEDROCK, pieces)
    raw = b"\n".join(OLLAMA_LINES) + b"\n"
    for pieces in splits(raw):
        assert_relays(OLLAMA, pieces)


def test_random_line_ends_and_splits() -> None:
    rng = random.Random(27)
    for _ in range(300):
        lines = [rng.choice(OPENAI) for _ in range(rng.randint(0, 8))]
        eols = [rng.choice([b"\n", b"\r\n", b"\r"]) for _ in lines]
        raw = b"".join(line + eol + eol for line, eol in zip(lines, eols, strict=True))
        raw += rng.choice([b"", CONTENT, CONTENT + b"\n"])  # sometimes a last event unfinished
        cuts = sorted(rng.sample(range(len(raw) + 1), min(len(raw) + 1, rng.randint(0, 8))))
        assert_relays(SSE, [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)])


def test_chunked_client_gets_one_chunk_per_read_and_never_the_unfinished_frame() -> None:
    relay = Relay(SSE, chunked=True)
    assert relay.feed(ROLE + b"\n\n" + CONTENT[:10]) == chunk(ROLE + b"\n\n")
    assert relay.feed(CONTENT[10:]) == b""  # the event is not whole yet: nothing, not an empty chunk (the end)
    assert relay.held == CONTENT
    assert relay.finish(by_close=True) == (
        b"",
        f"the body ended inside a frame ({len(CONTENT)} bytes of it held, never sent)",
    )


@pytest.mark.parametrize("stream", [SSE, BEDROCK, OLLAMA], ids=["sse", "bedrock", "ollama"])
def test_a_body_that_ends_before_its_final_event_is_cut_at_every_split(stream: StreamFormat | None) -> None:
    """Was (issue 33): a close-delimited upstream that closed between frames before the format's final event ended
    cleanly through the gateway (150 of 150), and one cut inside a frame gave the client the half frame too (any
    framing: the relay held it, then sent it at the end)."""
    assert stream is not None
    whole = {SSE: b"".join(line + b"\n\n" for line in OPENAI), BEDROCK: BEDROCK_STREAM,
             OLLAMA: b"\n".join(OLLAMA_LINES) + b"\n"}[stream]  # fmt: skip
    frames = FrameReader(stream.api).feed(whole)
    last = frames[-1].raw
    assert FrameReader(stream.api).ends(frames[-1])
    assert whole.endswith(last)
    whole_at = len(whole) - (1 if stream is OLLAMA else 0)  # an NDJSON line is whole JSON before its line end
    start = len(whole) - len(last)
    for end in {*range(start, whole_at, 5), whole_at - 1}:  # cuts between the last frame's start and its end
        for pieces in splits(whole[:end]):
            relay = Relay(stream, chunked=False)
            sent = b"".join(relay.feed(piece) for piece in pieces)
            held = relay.held
            rest, cut = relay.finish(by_close=True)
            assert cut is not None, (end, pieces)
            assert rest == b""
            assert not sent.endswith(last)
            if not held:  # between frames: a chunked or HTTP/2 body's end is the upstream's own word
                relay = Relay(stream, chunked=False)
                for piece in pieces:
                    relay.feed(piece)
                assert relay.finish(by_close=False) == (b"", None)
    relay = Relay(stream, chunked=False)  # the whole stream completes, at every split
    for pieces in splits(whole):
        relay = Relay(stream, chunked=False)
        assert b"".join(relay.feed(p) for p in pieces) + relay.finish(by_close=True)[0] == whole
        assert relay.finish(by_close=True)[1] is None


def test_an_ndjson_last_line_that_the_end_completes_is_sent() -> None:
    assert OLLAMA is not None
    relay = Relay(OLLAMA, chunked=True)
    body = b"\n".join(OLLAMA_LINES)  # the last line without its line end: whole JSON, a line by JSON Lines' rule
    out = relay.feed(body)
    assert relay.finish(by_close=True) == (chunk(OLLAMA_LINES[-1]), None)
    assert out == chunk(b"\n".join(OLLAMA_LINES[:-1]) + b"\n")


def test_a_body_that_is_no_token_stream_passes_as_it_comes_and_its_first_byte_is_its_first_token() -> None:
    relay = Relay(None, chunked=True)
    assert relay.feed(b'{"partial') == chunk(b'{"partial')
    assert take_news(relay)
    assert relay.first_byte
    assert relay.first_token
    assert relay.feed(b"}") == chunk(b"}")
    assert not take_news(relay)
    assert relay.frames == 0
    assert relay.bytes == 10
    assert Relay(None, chunked=False).feed(b"x") == b"x"


def take_news(relay: Relay) -> bool:
    """What the gateway does after each feed: read the flag, then clear it."""
    news, relay.news = relay.news, False
    return news


def test_first_byte_is_news_before_the_first_token() -> None:
    relay = Relay(SSE, chunked=False)
    relay.feed(ROLE + b"\n\n")
    assert take_news(relay)
    assert relay.first_byte
    assert not relay.first_token  # a role-only delta is not a token
    relay.feed(b": keep-alive\n\n")
    assert not take_news(relay)
    relay.feed(CONTENT + b"\n\n")
    assert take_news(relay)
    assert relay.first_token


def test_the_first_token_is_looked_for_only_so_far() -> None:
    relay = Relay(SSE, chunked=False)
    relay.feed(b": pad\n\n" * (TTFT_SCAN_BYTES // 7 + 1))
    relay.feed(CONTENT + b"\n\n")
    assert not relay.first_token
    assert relay.frames == TTFT_SCAN_BYTES // 7 + 2


def test_a_frame_too_large_sends_the_whole_ones_then_stops() -> None:
    stream = for_response(Api.OLLAMA, "application/x-ndjson")
    assert stream is not None
    relay = Relay(stream, chunked=False)
    relay._cut.max_event_bytes = 100  # type: ignore[union-attr]  # the format's limit is 8 MB
    line = OLLAMA_LINES[0] + b"\n"
    assert relay.feed(line + b"{" + b"x" * 150) == line  # the whole line before it still goes out
    assert relay.news
    assert relay.failure is not None
    assert relay.failure.broken is None
    assert relay.failure.held == 151
    assert relay.last_out == line  # what the error frame follows
    assert relay.feed(b"more\n" + line) == b""  # nothing after the failure, even whole frames
    assert relay.finish(by_close=True) == (b"", None)  # the failure ended it already
    assert b'"error"' in relay.error_frame("too large", "event_too_large")


def test_a_broken_event_stream_is_a_failure_with_its_reason() -> None:
    bad = bytearray(event_message("contentBlockDelta", b"{}"))
    bad[2] ^= 0x01  # the prelude CRC no longer matches
    relay = Relay(BEDROCK, chunked=False)
    assert relay.feed(BEDROCK_STREAM + bytes(bad)) == BEDROCK_STREAM
    assert relay.failure is not None
    assert relay.failure.broken is not None
    assert "prelude CRC" in relay.failure.broken


@pytest.mark.parametrize("stream", [SSE, None], ids=["sse", "not-a-token-stream"])
def test_an_empty_read_is_framed_to_nothing_never_to_the_last_chunk(stream: StreamFormat | None) -> None:
    relay = Relay(stream, chunked=True)
    assert relay.feed(b'data: {"a":1}\n\n') == chunk(b'data: {"a":1}\n\n')
    assert relay.feed(b"") == b""  # b"0\r\n\r\n" would end the client's body mid-stream


def _event(size: int) -> bytes:
    """One whole SSE event of exactly `size` bytes."""
    return b"data: " + b"x" * (size - 8) + b"\n\n"


CHUNK_TABLE = [
    [b""],  # empty data: frames to nothing, never to the last chunk
    [_event(9)],
    [_event(15), _event(16), _event(255), _event(256), _event(4095), _event(4096)],  # the hex size's digits change
    [_event(16_384), _event(65_536)],
    [_event(MAX_EVENT_BYTES)],  # the largest event the cut lets through
    [CONTENT[:10], CONTENT[10:] + b"\n\n"],  # held, then whole: the first read sends nothing
    [CONTENT + b"\n\n" + ROLE[:5], ROLE[5:] + b"\n\n", b""],  # a whole event and a held piece, then the rest
    [b"".join(f + b"\n\n" for f in OPENAI)],
]


@pytest.mark.parametrize("pieces", CHUNK_TABLE)
@pytest.mark.parametrize("stream", [SSE, None])
def test_feed_s_inlined_chunk_is_wire_framing_s_chunk(stream: StreamFormat | None, pieces: list[bytes]) -> None:
    """Relay.feed inlines wire.framing.chunk for speed (once per relayed read): over a chunked response each read's
    bytes are exactly chunk(what the same read sends over a response that is not chunked)."""
    chunked, plain = Relay(stream, chunked=True), Relay(stream, chunked=False)
    for piece in pieces:
        assert chunked.feed(piece) == chunk(plain.feed(piece))
