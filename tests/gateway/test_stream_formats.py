"""The gateway's per-format relay rule without a network: the event-stream and NDJSON cuts at every split point
(as the SSE relay's in tests/wire/test_conformance.py), each format's error frame read back by the format's own
parser and classifier, which format a response is relayed as, and which paths route where."""

from __future__ import annotations

import json
import random
import time
import zlib
from collections.abc import Callable

import pytest

from tests.wire.battery import splits
from tokenpath.gateway.cuts import LineRelay, MessageRelay
from tokenpath.gateway.routes import RouteMatch, match_route
from tokenpath.gateway.streamformat import FORMATS, SSECut, for_response
from tokenpath.wire.apis import SPECS, Api, Framing
from tokenpath.wire.eventstream import EventStreamParser, event_message
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.ndjson import NDJSONParser
from tokenpath.wire.reader import FrameReader

Relay = MessageRelay | LineRelay | SSECut


def relay_reads(relay: Relay, pieces: list[bytes]) -> tuple[list[bytes], bytes, int]:
    """What the gateway's relay (gateway.relay.Relay.feed) sends on for each upstream read, what it holds at the end
    and how many frames it counted: the same calls on the cut, in the same order (test_relay.py feeds Relay itself)."""
    sent = []
    frames = 0
    for piece in pieces:
        frames += relay.feed(piece)
        sent.append(relay.cut(piece) if relay.tail or relay.held else piece)
    return sent, bytes(relay.held), frames


def assert_whole_frames(new_relay: Callable[[], Relay], api: Api, pieces: list[bytes]) -> None:
    """Every read the relay sends on ends on a frame boundary (the format's parser, fed them, holds nothing after
    each), it completes exactly the frames the upstream read completed, counts them, and loses nothing."""
    sent, held, counted = relay_reads(new_relay(), pieces)
    upstream, client = FrameReader(api), FrameReader(api)
    total = 0
    for piece, out in zip(pieces, sent, strict=True):
        got = [f.raw for f in client.feed(out)]
        expected = [f.raw for f in upstream.feed(piece)]
        assert got == expected, (pieces, sent)
        assert client.pending_bytes() == 0, (pieces, sent)  # the client never reads half a frame
        total += len(expected)
    assert counted == total
    assert b"".join(sent) + held == b"".join(pieces)


BEDROCK_STREAM = (
    event_message("messageStart", b'{"role":"assistant"}')
    + event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"hi"}}')
    + event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":" there"}}')
    + event_message("messageStop", b'{"stopReason":"end_turn"}')
)
OLLAMA_LINES = [
    b'{"model":"m","message":{"role":"assistant","content":"hi"},"done":false}',
    b'{"model":"m","message":{"role":"assistant","content":" there"},"done":false}',
    b'{"model":"m","message":{"role":"assistant","content":""},"done":true}',
]


@pytest.mark.parametrize("tail", [b"", BEDROCK_STREAM[:7], BEDROCK_STREAM[:30]], ids=["whole", "prelude", "message"])
def test_the_event_stream_cut_never_ends_a_read_inside_a_message_at_any_split(tail: bytes) -> None:
    raw = BEDROCK_STREAM + tail  # and with a message unfinished at the end: in its prelude, or past it
    for pieces in splits(raw):
        assert_whole_frames(MessageRelay, Api.BEDROCK, pieces)
    for a in range(0, len(raw) + 1, 3):  # three pieces: a prelude split from its message, a message in two reads
        for b in range(a, len(raw) + 1, 37):
            assert_whole_frames(MessageRelay, Api.BEDROCK, [raw[:a], raw[a:b], raw[b:]])


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
@pytest.mark.parametrize("tail", [b"", b'{"model":"m","mess'], ids=["whole", "unfinished"])
def test_the_ndjson_cut_never_ends_a_read_inside_a_line_at_any_split(eol: bytes, tail: bytes) -> None:
    raw = eol.join(OLLAMA_LINES[:2]) + eol + eol + b"  " + eol + OLLAMA_LINES[2] + eol + tail  # blank lines too
    for pieces in splits(raw):
        assert_whole_frames(LineRelay, Api.OLLAMA, pieces)
    for a in range(0, len(raw) + 1, 2):
        for b in range(a, len(raw) + 1, 13):
            assert_whole_frames(LineRelay, Api.OLLAMA, [raw[:a], raw[a:b], raw[b:]])


def test_random_streams_and_splits_agree_with_the_parsers() -> None:
    rng = random.Random(26)
    for _ in range(200):
        messages = [event_message("contentBlockDelta", b"x" * rng.randint(0, 300)) for _ in range(rng.randint(0, 6))]
        lines = [b"{" + b'"a":1' * rng.randint(0, 40) + b"}" + rng.choice([b"\n", b"\r\n", b"\n\n"]) for _ in range(6)]
        for api, new, raw in (
            (Api.BEDROCK, MessageRelay, b"".join(messages)),
            (Api.OLLAMA, LineRelay, b"".join(lines)),
        ):
            cuts = sorted(rng.sample(range(len(raw) + 1), min(len(raw) + 1, rng.randint(0, 8))))
            pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
            assert_whole_frames(new, api, pieces)


def test_a_message_declaring_more_than_the_limit_is_refused_from_its_prelude() -> None:
    big = event_message("contentBlockDelta", b"x" * 2000)
    relay = MessageRelay(max_event_bytes=1000)
    relay.feed(BEDROCK_STREAM + big[:12])
    assert relay.cut(BEDROCK_STREAM + big[:12]) == BEDROCK_STREAM  # the whole ones before it go on
    assert relay.too_large  # from 12 bytes of it: the rest is never held
    assert len(relay.held) == 12


def test_a_prelude_whose_crc_fails_breaks_the_stream_after_the_whole_messages() -> None:
    bad = bytearray(event_message("contentBlockDelta", b"{}"))
    bad[2] ^= 0x01  # the total length: its prelude CRC no longer matches
    relay = MessageRelay()
    data = BEDROCK_STREAM + bytes(bad)
    assert relay.feed(data) == 4
    assert relay.broken is not None
    assert "prelude CRC" in relay.broken
    assert relay.cut(data) == BEDROCK_STREAM
    assert relay.feed(b"more") == 0
    assert relay.tail == 4
    short = MessageRelay()
    prelude = b"\x00\x00\x00\x08\x00\x00\x00\x00"  # 8 bytes: shorter than a message can be
    short.feed(prelude + zlib.crc32(prelude).to_bytes(4, "big"))
    assert short.broken is not None
    assert "declares 8 bytes" in short.broken


def test_a_line_longer_than_the_limit_is_too_large() -> None:
    relay = LineRelay(max_event_bytes=1000)
    for data in (OLLAMA_LINES[0] + b"\n{", b"x" * 900, b"x" * 200):
        relay.feed(data)
        assert relay.cut(data) == (OLLAMA_LINES[0] + b"\n" if data.startswith(OLLAMA_LINES[0]) else b"")
    assert relay.too_large


@pytest.mark.parametrize("new_relay", [MessageRelay, LineRelay])
def test_a_long_frame_fed_in_small_pieces_costs_what_holding_it_costs(new_relay: Callable[[], Relay]) -> None:
    """A relay that rescanned or re-copied what it holds on every read costs the square of the frame: 8 MiB in 512 B
    reads is 16384 reads and ~64 GiB of copying: seconds at the least. Measured beside the floor (the same pieces
    appended to one bytearray, best of 3 each), with a bound far from both: a linear relay costs a few floors
    (~0.03 s here; 0.3 s seen on a loaded host), the square never less than several seconds."""
    n_bytes = 8 << 20
    data = event_message("contentBlockDelta", b"x" * (n_bytes - 100)) if new_relay is MessageRelay else b"x" * n_bytes
    data += b"" if new_relay is MessageRelay else b"\n"
    pieces = [data[i : i + 512] for i in range(0, len(data), 512)]

    def floor() -> None:
        held = bytearray()
        for piece in pieces:
            held += piece
        bytes(held)

    def relay() -> None:
        sent, held, frames = relay_reads(new_relay(), pieces)
        assert frames == 1
        assert not held
        assert sum(map(len, sent)) == len(data)

    def best(run: Callable[[], None]) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        return min(times)

    assert best(relay) < 20 * best(floor) + 1.5


# --- each format's error frame -----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", list(Api))
@pytest.mark.parametrize("code", ["upstream_disconnected", "upstream_idle_timeout", "event_too_large", "shutdown"])
def test_the_error_frame_is_one_whole_frame_of_the_format_and_an_error_by_its_classifier(api: Api, code: str) -> None:
    frame_bytes = FORMATS[api].error("upstream failed mid-response (upstream_closed)", code, b"")
    reader = FrameReader(api)
    frames = list(reader.feed(frame_bytes)) + list(reader.close())
    assert [len(f.raw) for f in frames] == [len(frame_bytes)]
    assert reader.kind(frames[0]) is FrameKind.ERROR
    assert reader.pending_bytes() == 0


def test_the_error_shapes_are_the_ones_each_provider_documents() -> None:
    msg = "upstream failed mid-response"

    def sse(api: Api) -> tuple[bytes | None, dict[str, object]]:
        frame = FrameReader(api).feed(FORMATS[api].error(msg, "upstream_disconnected", b""))[0]
        return getattr(frame, "event", None), json.loads(frame.data or b"")

    assert sse(Api.OPENAI) == (
        b"error",
        {"error": {"message": msg, "type": "server_error", "param": None, "code": "upstream_disconnected"}},
    )
    event, obj = sse(Api.ANTHROPIC)
    assert event == b"error"
    assert obj["type"] == "error"
    assert obj["error"] == {"type": "api_error", "message": f"{msg} (tokenpath gateway: upstream_disconnected)"}
    event, obj = sse(Api.RESPONSES)
    assert event == b"error"
    assert obj == {
        "type": "error",
        "code": "upstream_disconnected",
        "message": msg,
        "param": None,
        "sequence_number": 0,
    }
    event, obj = sse(Api.GEMINI)
    assert event is None
    assert list(obj) == ["error"]
    assert obj["error"] == {"code": 503, "message": f"{msg} (tokenpath gateway: upstream_disconnected)",
                            "status": "UNAVAILABLE"}  # fmt: skip
    (message,) = EventStreamParser().feed(FORMATS[Api.BEDROCK].error(msg, "upstream_disconnected", b""))
    assert message.header(":message-type") == "exception"
    assert message.header(":exception-type") == "modelStreamErrorException"
    assert json.loads(message.payload) == {"message": f"{msg} (tokenpath gateway: upstream_disconnected)"}
    (line,) = NDJSONParser().feed(FORMATS[Api.OLLAMA].error(msg, "upstream_disconnected", b""))
    assert json.loads(line.data) == {"error": f"{msg} (tokenpath gateway: upstream_disconnected)"}


def test_a_responses_error_follows_the_last_sequence_number_relayed() -> None:
    last = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":41}\n\n'
    frame = FrameReader(Api.RESPONSES).feed(FORMATS[Api.RESPONSES].error("m", "c", b"x" + last + last[:-30]))[0]
    assert json.loads(frame.data or b"")["sequence_number"] == 42


def test_timeouts_and_shutdowns_say_so_in_the_shapes_that_can() -> None:
    def gemini(code: str) -> object:
        return json.loads(FORMATS[Api.GEMINI].error("m", code, b"")[6:])["error"]["status"]

    def bedrock(code: str) -> str | None:
        return EventStreamParser().feed(FORMATS[Api.BEDROCK].error("m", code, b""))[0].header(":exception-type")

    assert [gemini(c) for c in ("upstream_idle_timeout", "total_timeout", "shutdown", "internal")] == [
        "DEADLINE_EXCEEDED",
        "DEADLINE_EXCEEDED",
        "UNAVAILABLE",
        "INTERNAL",
    ]
    assert [bedrock(c) for c in ("upstream_idle_timeout", "shutdown", "event_too_large")] == [
        "modelStreamErrorException",
        "serviceUnavailableException",
        "internalServerException",
    ]


# --- which format, which route ---------------------------------------------------------------------------------


def test_the_route_names_the_api_and_the_content_type_confirms_the_framing() -> None:
    for api, spec in SPECS.items():
        chosen = for_response(api, spec.content_type + "; charset=utf-8")
        assert chosen is not None
        assert chosen.api is api
    sse = for_response(None, "Text/Event-Stream")  # a /v1/ path past the known ones: as the gateway always did
    assert sse is not None
    assert sse.api is Api.OPENAI
    assert sse.framing is Framing.SSE
    mismatch = for_response(Api.OLLAMA, "text/event-stream")  # the route's API, but SSE came back
    assert mismatch is not None
    assert mismatch.api is Api.OPENAI
    eventstream = for_response(None, "application/vnd.amazon.eventstream")
    assert eventstream is not None
    assert eventstream.api is Api.BEDROCK
    assert for_response(Api.ANTHROPIC, "application/json") is None  # not streamed: relayed as it comes
    assert for_response(Api.ANTHROPIC, None) is None


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/v1/chat/completions", RouteMatch(Api.OPENAI)),
        ("/v1/responses", RouteMatch(Api.RESPONSES)),
        ("/v1/messages?beta=true", RouteMatch(Api.ANTHROPIC)),
        ("/v1/models", RouteMatch(None)),
        ("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse", RouteMatch(Api.GEMINI, "gemini-2.0-flash")),
        (
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
            RouteMatch(Api.BEDROCK, "anthropic.claude-3-haiku-20240307-v1:0"),
        ),
        ("/v1/models/gemini-2.0-flash:streamGenerateContent?alt=sse", RouteMatch(Api.GEMINI, "gemini-2.0-flash")),
        ("/api/chat", RouteMatch(Api.OLLAMA)),
        ("/api/generate", None),
        ("/v1beta/models/a/b:streamGenerateContent", None),  # a model is one segment
        ("/v1beta/models/m:generateContent", None),
        ("/model/m/converse", None),
        ("/admin", None),
        ("/v1", None),
    ],
)
def test_routes(target: str, expected: RouteMatch | None) -> None:
    assert match_route(target) == expected
