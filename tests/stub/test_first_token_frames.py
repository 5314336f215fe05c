"""What real servers send before and around the first token (issue 24 §4), as rendered and planned before the first
write: reasoning deltas in each format's own shape (checked byte for byte and against the readers' classification
in wire/formats.py), the first content frame padded, keep-alives merged into the schedule, the head held for the
first token, the ticks frames share, and the options' validation as flags and as a request's `tokenpath` member."""

from __future__ import annotations

import json

import pytest
from botocore.eventstream import EventStreamBuffer

from tests.helpers import HTTP_APIS
from tokenpath.audit import StreamLog, Write, completion_id, stream_label
from tokenpath.errors import BadRequest, UsageError
from tokenpath.stub.config import MAX_FIRST_EVENT_BYTES, MAX_HEARTBEATS, Pacing, StubConfig
from tokenpath.stub.formats import FORMATS, check_start
from tokenpath.stub.frames import StreamRequest, StreamShape, reasoning_text, token_text
from tokenpath.stub.pacing import schedule_offsets_ns
from tokenpath.stub.plan import plan_writes
from tokenpath.wire.apis import Api
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import frame_reader

SSE_APIS = [Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC, Api.GEMINI]
L = stream_label("s1").encode()
MS = 1_000_000


def pacing(**kw: object) -> Pacing:
    return Pacing(10, 5, 2, None, "openai", **kw)  # type: ignore[arg-type]


def shape(api: Api, **kw: object) -> StreamShape:
    kind = "chat" if api is Api.OPENAI else api.value
    req = StreamRequest(kind, "m", "s1", 2, prompt_tokens=3, ttft_ms=10, interval_ms=5)
    return FORMATS[api].shape(req, pacing(**kw))


def wire(api: Api, **kw: object) -> list[bytes]:
    return shape(api, **kw).wire(False, completion_id("s1"))


def kinds(api: Api, frames: list[bytes]) -> list[FrameKind]:
    """What the format's reader (the probe's, load's) makes of each frame: one frame per write."""
    reader = frame_reader(api, 1 << 20)
    read = [*reader.feed(b"".join(frames)), *reader.close()]
    assert [f.raw for f in read] == frames
    return [reader.kind(f) for f in read]


# --- reasoning ---------------------------------------------------------------------------------------------------

REASONING_FRAME = {
    Api.OPENAI: b'data: {"id":"cmpl-%s","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,'
    b'"delta":{"reasoning_content":" hotel-thought0"},"finish_reason":null}]}\n\n' % L,
    Api.RESPONSES: b"event: response.reasoning_summary_text.delta\ndata: {"
    b'"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_%s","output_index":0,'
    b'"summary_index":0,"delta":" hotel-thought0"}\n\n' % L,
    Api.ANTHROPIC: b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"thinking_delta","thinking":" hotel-thought0"}}\n\n',
    Api.GEMINI: b'data: {"candidates": [{"content": {"parts": [{"text": " hotel-thought0","thought": true}],'
    b'"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 3,"candidatesTokenCount": 0,'
    b'"totalTokenCount": 4,"thoughtsTokenCount": 1},"modelVersion": "m","responseId": "%s"}\r\n\r\n' % L,
    Api.OLLAMA: b'{"model":"m","created_at":"1970-01-01T00:00:00Z","message":{"role":"assistant","content":"",'
    b'"thinking":" hotel-thought0"},"done":false}\n',
}

# Each format's frames with 2 reasoning tokens and 2 tokens, as its reader classifies them.
C, R, K, D = FrameKind.CONTROL, FrameKind.REASONING, FrameKind.CONTENT, FrameKind.DONE
REASONING_KINDS = {
    Api.OPENAI: [C, R, R, K, K, C, D],
    Api.RESPONSES: [C, C, C, C, R, R, C, C, C, C, C, K, K, C, C, C, D],
    Api.ANTHROPIC: [C, C, C, R, R, C, C, C, K, K, C, C, D],
    Api.GEMINI: [R, R, K, K],
    # the reader counts the signature delta (reasoningContent.signature) as reasoning too; the stub marks only text
    Api.BEDROCK: [C, R, R, R, C, K, K, C, D, C],
    Api.OLLAMA: [R, R, K, K, D],
}


@pytest.mark.parametrize("api", [a for a in HTTP_APIS if a is not Api.BEDROCK], ids=lambda a: a.value)
def test_a_reasoning_delta_is_written_as_the_api_writes_it(api: Api) -> None:
    s = shape(api, reasoning_tokens=2)
    assert wire(api, reasoning_tokens=2)[s.reasoning.start] == REASONING_FRAME[api]


def test_bedrock_reasoning_is_a_reasoning_content_delta_then_its_signature_and_block_stop() -> None:
    s = shape(Api.BEDROCK, reasoning_tokens=2)
    buffer = EventStreamBuffer()
    buffer.add_data(b"".join(wire(Api.BEDROCK, reasoning_tokens=2)))
    events = [(m.headers[":event-type"], json.loads(m.payload)) for m in buffer]
    assert events[1:6] == [
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": reasoning_text(0)}}}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": reasoning_text(1)}}}),
        (
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "dG9rZW5wYXRoLXN0dWI="}}},
        ),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": token_text(0)}}),
    ]
    assert list(s.reasoning) == [1, 2]
    assert s.first_content == 5
    assert s.with_next == {3, 4}


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_reasoning_comes_before_content_and_the_shape_says_where(api: Api) -> None:
    s = shape(api, reasoning_tokens=2)
    got = kinds(api, wire(api, reasoning_tokens=2))
    assert got == REASONING_KINDS[api]
    assert got[s.first_content] is FrameKind.CONTENT
    assert FrameKind.CONTENT not in got[: s.first_content]
    assert s.first_token == s.reasoning.start == got.index(FrameKind.REASONING)
    assert all(got[i] is FrameKind.REASONING for i in s.reasoning)
    # Without the option: no reasoning at all, as every stub has always written
    assert FrameKind.REASONING not in kinds(api, wire(api))


def test_anthropic_closes_the_thinking_block_and_opens_the_text_one_with_the_first_text() -> None:
    s = shape(Api.ANTHROPIC, reasoning_tokens=2)
    frames = wire(Api.ANTHROPIC, reasoning_tokens=2)
    assert b'"content_block":{"type":"thinking","thinking":""}' in frames[1]
    assert frames[5:8] == [
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"signature_delta","signature":"dG9rZW5wYXRoLXN0dWI="}}\n\n',
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
        b'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
        b'"content_block":{"type":"text","text":""}}\n\n',
    ]
    assert b'"index":1,"delta":{"type":"text_delta"' in frames[8]
    assert s.with_next == {5, 6, 7}


def test_responses_numbers_every_event_and_reports_the_reasoning_item_and_tokens() -> None:
    frames = wire(Api.RESPONSES, reasoning_tokens=2)
    bodies = [json.loads(f.split(b"\ndata: ", 1)[1]) for f in frames]
    assert [b["sequence_number"] for b in bodies] == list(range(len(frames)))
    final = bodies[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 2
    assert bodies[11]["output_index"] == 1  # the message follows the reasoning item


def test_reasoning_is_paced_like_tokens_and_content_follows_at_its_own_tick() -> None:
    s = shape(Api.ANTHROPIC, reasoning_tokens=2)
    offsets = schedule_offsets_ns(len(s.sizes), lead_frames=s.lead, ttft_ms=10, interval_ms=5, with_next=s.with_next)
    assert offsets[:3] == [0, 0, 0]  # message_start, thinking block start, ping: with the head
    assert offsets[3:5] == [10 * MS, 15 * MS]  # the reasoning deltas, at the TTFT then one interval on
    assert offsets[5:9] == [20 * MS] * 4  # signature, block stop, text block start: with the first text delta
    assert offsets[9] == 25 * MS


def test_frames_sharing_a_tick_share_one_jittered_deadline() -> None:
    from random import Random

    from tokenpath.stub.config import Jitter

    offsets = schedule_offsets_ns(
        5, lead_frames=0, ttft_ms=10, interval_ms=5, jitter=Jitter("uniform", 2), rng=Random(1), with_next={1, 2}
    )
    assert offsets[1] == offsets[2] == offsets[3]
    assert offsets == sorted(offsets)


@pytest.mark.parametrize("where", ["plain", "completion"])
def test_openai_frames_without_a_reasoning_field_refuse_reasoning(where: str) -> None:
    fmt = "plain" if where == "plain" else "openai"
    kind = "completion" if where == "completion" else "chat"
    with pytest.raises(UsageError, match="no reasoning field"):
        FORMATS[Api.OPENAI].shape(StreamRequest(kind, "m", "s", 2), Pacing(0, 1, 2, None, fmt, reasoning_tokens=1))  # type: ignore[arg-type]


# --- the first event padded ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_the_first_content_frame_alone_is_padded_to_first_event_bytes(api: Api) -> None:
    plain, big = wire(api), wire(api, first_event_bytes=3000)
    s = shape(api)
    first = s.first_content
    assert len(big[first]) == 3000
    assert big[:first] == plain[:first]
    assert big[first + 1 :] == plain[first + 1 :]
    assert kinds(api, big)[first] is FrameKind.CONTENT


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_first_event_bytes_pads_the_first_content_after_reasoning_too(api: Api) -> None:
    s = shape(api, reasoning_tokens=1, first_event_bytes=2000)
    sizes = dict(enumerate(s.sizes))
    assert sizes[s.first_content] == 2000
    assert all(sizes[i] < 2000 for i in s.reasoning)


def test_a_plain_first_event_is_padded_after_a_space() -> None:
    frames = FORMATS[Api.OPENAI].shape(
        StreamRequest("chat", "m", "s", 2), Pacing(0, 1, 2, 12, "plain", first_event_bytes=20)
    )
    assert frames.wire(False, "x") == [b"data: 0 ..........\n\n", b"data: 1 ..\n\n"]


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_a_first_event_smaller_than_its_frame_is_refused(api: Api) -> None:
    with pytest.raises(UsageError, match="smaller than"):
        shape(api, first_event_bytes=10)


# --- keep-alives and the held head: the write plan ---------------------------------------------------------------


def plan_shape() -> StreamShape:
    # lead, reasoning, content, content, end: as a chat stream with one reasoning delta
    return StreamShape([b"L", b"R", b"C0", b"C1", b"E"], lead=1, first_content=2, reasoning=range(1, 2))


def test_keep_alives_are_merged_on_their_grid_and_never_after_the_last_frame() -> None:
    s = plan_shape()
    offsets = [0, 10 * MS, 15 * MS, 20 * MS, 25 * MS]
    plan = plan_writes(s, s.wire(False, ""), offsets, heartbeat=(b": ping\n\n", 8), heartbeat_ms=4)
    p = b": ping\n\n"
    assert plan.wire == [b"L", p, p, b"R", p, b"C0", p, b"C1", p, p, b"E"]
    assert plan.offsets == [0, 4 * MS, 8 * MS, 10 * MS, 12 * MS, 15 * MS, 16 * MS, 20 * MS, 20 * MS, 24 * MS, 25 * MS]
    assert plan.sizes == [1, 8, 8, 1, 8, 2, 8, 2, 8, 8, 1]
    assert plan.heartbeats == (1, 2, 4, 6, 8, 9)
    assert plan.reasoning == (3,)
    assert plan.first_content == 5
    assert plan.head_offset_ns == 0


def test_a_keep_alive_due_with_a_frame_goes_after_it() -> None:
    s = plan_shape()
    plan = plan_writes(s, s.wire(False, ""), [0, 10 * MS, 20 * MS, 30 * MS, 40 * MS], heartbeat=(b"P", 1),
                       heartbeat_ms=10)  # fmt: skip
    assert plan.wire == [b"L", b"R", b"P", b"C0", b"P", b"C1", b"P", b"E"]


def test_the_held_head_takes_the_lead_frames_with_the_first_token_and_keep_alives_start_after_it() -> None:
    s = plan_shape()
    offsets = [0, 10 * MS, 15 * MS, 20 * MS, 25 * MS]
    plan = plan_writes(s, s.wire(False, ""), offsets, heartbeat=(b"P", 1), heartbeat_ms=4, head_at_first_token=True)
    assert plan.head_offset_ns == 10 * MS  # the first token: the reasoning delta
    assert plan.wire == [b"L", b"R", b"P", b"C0", b"P", b"C1", b"P", b"E"]
    assert plan.offsets == [10 * MS, 10 * MS, 14 * MS, 15 * MS, 18 * MS, 20 * MS, 22 * MS, 25 * MS]
    held = plan_writes(s, s.wire(False, ""), offsets, head_at_first_token=True)
    assert held.offsets == [10 * MS, 10 * MS, 15 * MS, 20 * MS, 25 * MS]
    assert held.heartbeats == ()
    assert held.first_content == 2


@pytest.mark.parametrize("api", [api for api in SSE_APIS if api is not Api.ANTHROPIC], ids=lambda a: a.value)
def test_an_sse_keep_alive_is_a_comment_in_the_stream_s_line_ends(api: Api) -> None:
    beat = FORMATS[api].heartbeat
    assert beat == (b": ping\r\n\r\n" if api is Api.GEMINI else b": ping\n\n")
    assert kinds(api, [beat]) == [FrameKind.COMMENT]


def test_anthropic_s_keep_alive_is_its_own_ping_event_and_no_content() -> None:
    beat = FORMATS[Api.ANTHROPIC].heartbeat
    assert beat == b'event: ping\ndata: {"type": "ping"}\n\n'  # what the API sends ("Event types": ping)
    assert kinds(Api.ANTHROPIC, [beat]) == [FrameKind.CONTROL]  # a frame, never content: TTFT does not start


@pytest.mark.parametrize("api", [Api.BEDROCK, Api.OLLAMA], ids=lambda a: a.value)
def test_a_format_without_a_keep_alive_is_refused_at_start_in_one_line(api: Api) -> None:
    assert FORMATS[api].heartbeat is None
    with pytest.raises(UsageError, match=f"`heartbeat_ms`: --api {api.value}: .*no keep-alive") as info:
        check_start(StubConfig(api=api.value, heartbeat_ms=100))
    assert "\n" not in str(info.value)
    check_start(StubConfig(api="all", heartbeat_ms=100))  # every route: the OpenAI routes are held to it at start


def test_start_refuses_reasoning_in_plain_frames_and_a_too_small_first_event() -> None:
    with pytest.raises(UsageError, match="no reasoning field"):
        check_start(StubConfig(format="plain", reasoning_tokens=2))
    with pytest.raises(UsageError, match=r"--api anthropic: .*smaller than"):
        check_start(StubConfig(api="anthropic", first_event_bytes=20))
    check_start(StubConfig(reasoning_tokens=2, first_event_bytes=4096, heartbeat_ms=50, head_at="first-token"))


# --- the options as flags and as a request's pacing ---------------------------------------------------------------


def test_the_flags_reach_the_pacing() -> None:
    cfg = StubConfig(heartbeat_ms=15, reasoning_tokens=3, first_event_bytes=900, head_at="first-token")
    assert cfg.pacing == Pacing(90, 14, 128, None, "openai", 15, 3, 900, "first-token")
    assert not StubConfig().pacing.before_first_token
    assert StubConfig(head_at="first-token").pacing.before_first_token


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"head_at": "later"}, "head_at"),
        ({"reasoning_tokens": -1}, "reasoning_tokens"),
        ({"first_event_bytes": MAX_FIRST_EVENT_BYTES + 1}, "first_event_bytes"),
        ({"heartbeat_ms": -5.0}, "heartbeat_ms"),
        ({"heartbeat_ms": 0.001}, str(MAX_HEARTBEATS)),
    ],
)
def test_bad_flags_fail_at_start(kw: dict[str, object], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        StubConfig(**kw)  # type: ignore[arg-type]


def test_a_request_overrides_each_option() -> None:
    base = StubConfig().pacing
    got = base.override(
        {"heartbeat_ms": 20, "reasoning_tokens": 4, "first_event_bytes": 5000, "head_at": "first-token"}
    )
    assert (got.heartbeat_ms, got.reasoning_tokens, got.first_event_bytes, got.head_at) == (20, 4, 5000, "first-token")
    assert base.override({"heartbeat_ms": 0}).heartbeat_ms is None  # 0: off
    assert base.override({"first_event_bytes": None}).first_event_bytes is None
    assert set(Pacing.OVERRIDABLE) >= {"heartbeat_ms", "reasoning_tokens", "first_event_bytes", "head_at"}


@pytest.mark.parametrize(
    "body",
    [
        {"head_at": "end"},
        {"head_at": 1},
        {"reasoning_tokens": 1.5},
        {"reasoning_tokens": True},
        {"first_event_bytes": 0},
        {"heartbeat_ms": "10"},
        {"heartbeat_ms": 0.01, "tokens": 100_000},
        {"reasoning_tokens": 100_000, "interval_ms": 100},  # paced like tokens: past the stream's time limit
        {"tokens": 10**400},  # past a float's range: math.isfinite raised OverflowError, a 500
        {"ttft_ms": 10**400},
    ],
)
def test_a_bad_override_is_that_request_s_bad_request(body: dict[str, object]) -> None:
    with pytest.raises(BadRequest, match="tokenpath"):
        StubConfig().pacing.override(body)


# --- the audit marks them ------------------------------------------------------------------------------------------


def test_the_audit_log_carries_reasoning_and_keep_alive_writes_and_the_first_token() -> None:
    writes = tuple(Write(i, i, i, 1) for i in range(6))
    log = StreamLog("s", 5.0, 0, "complete", writes, first_content=4, reasoning=(2, 3), heartbeats=(1, 5))
    doc = log.to_json()
    assert doc["reasoning"] == [2, 3]
    assert doc["heartbeats"] == [1, 5]
    assert StreamLog.from_json(doc) == log
    assert log.first_token == 2
    plain = StreamLog("s", 5.0, 0, "complete", writes, first_content=1)
    assert "reasoning" not in plain.to_json()
    assert "heartbeats" not in plain.to_json()
    assert plain.first_token == 1


def test_each_flag_reaches_the_stub_s_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import tokenpath.stub.server
    from tokenpath.cli import app

    seen: list[StubConfig] = []
    monkeypatch.setattr(tokenpath.stub.server, "run", lambda cfg, announce, loop: seen.append(cfg))
    args = ["--heartbeat-ms", "15", "--reasoning-tokens", "3", "--first-event-bytes", "900", "--head-at", "first-token"]
    out = CliRunner().invoke(app, ["stub", *args])
    assert out.exit_code == 0, out.output
    assert seen[0].pacing == Pacing(90, 14, 128, None, "openai", 15, 3, 900, "first-token")
    out = CliRunner().invoke(app, ["stub", "--head-at", "later"])
    assert out.exit_code != 0
    assert "--head-at 'later': expected start or first-token" in out.output
