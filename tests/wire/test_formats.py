"""Where the first token is, per API format: each provider's documented stream (tests/wire/samples.py) read by the
one frame reader, the same at every split; errors in each format's own shape; a frame of another format is FOREIGN
and named."""

from __future__ import annotations

import json

import pytest

from tests.wire.battery import splits
from tests.wire.samples import ERRORS, STREAMS, js, sse
from tokenpath.errors import ResponseTooLarge, StreamFormatError
from tokenpath.wire import openai
from tokenpath.wire.apis import Api, recognise
from tokenpath.wire.eventstream import encode_message, event_message
from tokenpath.wire.formats.shared import hint
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.ndjson import JsonLine
from tokenpath.wire.reader import apis_for_content_type, frame_reader
from tokenpath.wire.sse import Frame, SSEParser

APIS = list(Api)


def read(api: Api, pieces: list[bytes]) -> list[tuple[bytes, FrameKind]]:
    reader = frame_reader(api)
    frames = [f for piece in pieces for f in reader.feed(piece)]
    frames += reader.close()
    return [(f.raw, reader.kind(f)) for f in frames]


@pytest.mark.parametrize("api", APIS)
def test_each_format_s_frames_and_kinds(api: Api) -> None:
    body, kinds = STREAMS[api]
    got = read(api, [body])
    assert [kind for _, kind in got] == kinds
    assert b"".join(raw for raw, _ in got) == body


@pytest.mark.parametrize("api", APIS)
def test_each_format_reads_the_same_at_every_split_and_byte_by_byte(api: Api) -> None:
    body, _ = STREAMS[api]
    whole = read(api, [body])
    for pieces in splits(body):
        assert read(api, pieces) == whole


@pytest.mark.parametrize("api", [api for api in APIS if api is not Api.REALTIME])  # Realtime streams no reasoning
def test_reasoning_comes_first_and_is_not_content(api: Api) -> None:
    kinds = [kind for _, kind in read(api, [STREAMS[api][0]])]
    assert kinds.index(FrameKind.REASONING) < kinds.index(FrameKind.CONTENT)


@pytest.mark.parametrize(("api", "index"), [(api, i) for api in APIS for i in range(len(ERRORS[api]))])
def test_errors_in_each_format_s_own_shape(api: Api, index: int) -> None:
    assert [kind for _, kind in read(api, [ERRORS[api][index]])] == [FrameKind.ERROR]


@pytest.mark.parametrize("api", [Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC, Api.GEMINI])
def test_a_comment_is_a_comment_in_every_sse_format(api: Api) -> None:
    assert read(api, [b": keep-alive\n\n"]) == [(b": keep-alive\n\n", FrameKind.COMMENT)]


# --- each format's rules, one frame at a time ------------------------------------------------------------------


def kind_of(api: Api, raw: bytes) -> FrameKind:
    [(_, kind)] = read(api, [raw])
    return kind


@pytest.mark.parametrize(
    ("delta", "kind"),
    [
        ({"content": "hi"}, FrameKind.CONTENT),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}, FrameKind.CONTENT),
        ({"reasoning_content": "hm"}, FrameKind.REASONING),  # was CONTENT: reasoning is never TTFT
        ({"reasoning": "hm"}, FrameKind.REASONING),
        ({"reasoning_content": "hm", "content": "hi"}, FrameKind.CONTENT),
        ({"reasoning_content": ""}, FrameKind.CONTROL),
        ({"role": "assistant"}, FrameKind.CONTROL),
    ],
)
def test_openai_deltas(delta: dict[str, object], kind: FrameKind) -> None:
    assert kind_of(Api.OPENAI, sse({"choices": [{"index": 0, "delta": delta}]})) is kind


def test_every_openai_reasoning_field_is_read_as_reasoning() -> None:
    """classify spells the fields out: one added to REASONING_FIELDS and not there fails here."""
    for name in openai.REASONING_FIELDS:
        assert kind_of(Api.OPENAI, sse({"choices": [{"index": 0, "delta": {name: "hm"}}]})) is FrameKind.REASONING


def test_openai_content_in_a_later_choice_wins_over_reasoning_in_an_earlier_one() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"reasoning": "hm"}}, {"index": 1, "delta": {"content": "x"}}]}
    assert kind_of(Api.OPENAI, sse(chunk)) is FrameKind.CONTENT


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        ({"type": "response.output_text.delta", "delta": "hi"}, FrameKind.CONTENT),
        ({"type": "response.output_text.delta", "delta": ""}, FrameKind.CONTROL),
        ({"type": "response.function_call_arguments.delta", "delta": "{"}, FrameKind.CONTENT),
        ({"type": "response.refusal.delta", "delta": "no"}, FrameKind.CONTENT),
        ({"type": "response.reasoning_text.delta", "delta": "hm"}, FrameKind.REASONING),
        ({"type": "response.incomplete", "response": {}}, FrameKind.DONE),
        ({"type": "response.output_item.done", "item": {}}, FrameKind.CONTROL),
        ({"type": "message_start"}, FrameKind.FOREIGN),
        ({"choices": []}, FrameKind.FOREIGN),
    ],
)
def test_responses_events(obj: dict[str, object], kind: FrameKind) -> None:
    assert kind_of(Api.RESPONSES, sse(obj)) is kind


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        ({"type": "response.output_text.delta", "delta": "hi"}, FrameKind.CONTENT),
        ({"type": "response.output_text.delta", "delta": ""}, FrameKind.CONTROL),
        ({"type": "response.output_audio_transcript.delta", "delta": "hi"}, FrameKind.CONTENT),
        ({"type": "response.text.delta", "delta": "hi"}, FrameKind.CONTENT),  # the beta's name for the same
        ({"type": "response.done", "response": {"status": "completed"}}, FrameKind.DONE),
        ({"type": "response.done", "response": {"status": "incomplete"}}, FrameKind.DONE),
        ({"type": "response.done", "response": {"status": "cancelled"}}, FrameKind.ERROR),
        ({"type": "response.done", "response": {"status": "failed"}}, FrameKind.ERROR),
        ({"type": "error", "error": {"message": "x"}}, FrameKind.ERROR),
        ({"type": "session.created", "session": {}}, FrameKind.CONTROL),
        ({"type": "conversation.item.added", "item": {}}, FrameKind.CONTROL),
        ({"type": "rate_limits.updated", "rate_limits": []}, FrameKind.CONTROL),
        ({"type": "response.completed", "response": {}}, FrameKind.CONTROL),  # Responses' end is not Realtime's
        ({"type": "message_start"}, FrameKind.FOREIGN),
    ],
)
def test_realtime_events(obj: dict[str, object], kind: FrameKind) -> None:
    assert kind_of(Api.REALTIME, sse(obj)) is kind


def test_responses_events_are_named_by_type_or_by_event_name() -> None:
    assert kind_of(Api.RESPONSES, b"event: response.output_text.delta\ndata: not json\n\n") is FrameKind.CONTROL
    assert kind_of(Api.RESPONSES, b"event: response.completed\ndata: {}\n\n") is FrameKind.DONE
    assert kind_of(Api.RESPONSES, b"data: [DONE]\n\n") is FrameKind.DONE  # some compatible servers add it


@pytest.mark.parametrize(
    ("delta", "kind"),
    [
        ({"type": "text_delta", "text": "hi"}, FrameKind.CONTENT),
        ({"type": "text_delta", "text": ""}, FrameKind.CONTROL),
        ({"type": "input_json_delta", "partial_json": '{"a"'}, FrameKind.CONTENT),
        ({"type": "input_json_delta", "partial_json": ""}, FrameKind.CONTROL),
        ({"type": "thinking_delta", "thinking": "hm"}, FrameKind.REASONING),
        ({"type": "citations_delta", "citation": {}}, FrameKind.CONTROL),
    ],
)
def test_anthropic_deltas(delta: dict[str, object], kind: FrameKind) -> None:
    event = {"type": "content_block_delta", "index": 0, "delta": delta}
    assert kind_of(Api.ANTHROPIC, sse(event, "content_block_delta")) is kind


def test_anthropic_error_event_and_foreign_frames() -> None:
    assert kind_of(Api.ANTHROPIC, b"event: error\ndata: not json\n\n") is FrameKind.ERROR
    assert kind_of(Api.ANTHROPIC, sse({"choices": [{"delta": {"content": "x"}}]})) is FrameKind.FOREIGN
    assert kind_of(Api.ANTHROPIC, b"data: hello\n\n") is FrameKind.FOREIGN


@pytest.mark.parametrize(
    ("parts", "kind"),
    [
        ([{"text": "hi"}], FrameKind.CONTENT),
        ([{"functionCall": {"name": "f", "args": {}}}], FrameKind.CONTENT),
        ([{"text": "hm", "thought": True}], FrameKind.REASONING),
        ([{"text": "hm", "thought": True}, {"text": "hi"}], FrameKind.CONTENT),
        ([{"text": ""}], FrameKind.CONTROL),
        ([{"thoughtSignature": "abc"}], FrameKind.CONTROL),
    ],
)
def test_gemini_parts(parts: list[dict[str, object]], kind: FrameKind) -> None:
    frame = sse({"candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}]})
    assert kind_of(Api.GEMINI, frame) is kind


def test_gemini_usage_only_is_control_and_other_json_foreign() -> None:
    assert kind_of(Api.GEMINI, sse({"usageMetadata": {"totalTokenCount": 3}})) is FrameKind.CONTROL
    assert kind_of(Api.GEMINI, sse({"type": "message_start"})) is FrameKind.FOREIGN


@pytest.mark.parametrize(
    ("event_type", "payload", "kind"),
    [
        ("contentBlockDelta", {"delta": {"text": "hi"}}, FrameKind.CONTENT),
        ("contentBlockDelta", {"delta": {"toolUse": {"input": "{"}}}, FrameKind.CONTENT),
        ("contentBlockDelta", {"delta": {"reasoningContent": {"text": "hm"}}}, FrameKind.REASONING),
        ("contentBlockDelta", {"delta": {"text": ""}}, FrameKind.CONTROL),
        ("contentBlockStart", {"start": {"toolUse": {"name": "f"}}}, FrameKind.CONTROL),
        ("messageStop", {"stopReason": "end_turn"}, FrameKind.DONE),
        ("chunk", {"bytes": "eyJhIjoxfQ=="}, FrameKind.FOREIGN),  # InvokeModelWithResponseStream
    ],
)
def test_bedrock_events(event_type: str, payload: dict[str, object], kind: FrameKind) -> None:
    assert kind_of(Api.BEDROCK, event_message(event_type, js(payload))) is kind


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        ({"message": {"role": "assistant", "content": "hi"}, "done": False}, FrameKind.CONTENT),
        ({"message": {"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}}, FrameKind.CONTENT),
        ({"message": {"role": "assistant", "content": "", "thinking": "hm"}, "done": False}, FrameKind.REASONING),
        ({"message": {"role": "assistant", "content": "last"}, "done": True}, FrameKind.CONTENT),
        ({"message": {"role": "assistant", "content": ""}, "done": False}, FrameKind.CONTROL),
        ({"response": "hi", "done": False}, FrameKind.FOREIGN),  # /api/generate's shape
    ],
)
def test_ollama_lines(obj: dict[str, object], kind: FrameKind) -> None:
    assert kind_of(Api.OLLAMA, js(obj) + b"\n") is kind


def test_an_ndjson_line_that_is_not_json_is_foreign() -> None:
    assert kind_of(Api.OLLAMA, b"data: {}\n") is FrameKind.FOREIGN


# --- recognising the format of a foreign frame ------------------------------------------------------------------


@pytest.mark.parametrize("api", [Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC, Api.GEMINI])
def test_every_sse_format_s_frames_are_recognised_read_as_any_other(api: Api) -> None:
    frames = SSEParser().feed(STREAMS[api][0])
    named = {recognise(f) for f in frames}
    assert named == {api}
    for other in {Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC, Api.GEMINI} - {api}:
        reader = frame_reader(other)
        foreign = [f for f in reader.feed(STREAMS[api][0]) if reader.kind(f) is FrameKind.FOREIGN]
        assert foreign, (api, other)
        assert {reader.recognise(f) for f in foreign} == {api}


def test_ollama_and_bedrock_frames_are_recognised() -> None:
    lines = frame_reader(Api.OLLAMA).feed(STREAMS[Api.OLLAMA][0])
    assert {recognise(line) for line in lines} == {Api.OLLAMA}
    reader = frame_reader(Api.BEDROCK)
    assert {reader.recognise(m) for m in reader.feed(STREAMS[Api.BEDROCK][0])} == {Api.BEDROCK}
    assert reader.recognise(reader.feed(event_message("chunk", b"{}"))[0]) is None


def test_hints_name_what_a_frame_calls_itself() -> None:
    assert hint(b'{"type":"message_start"}', b"message_start") == "event: message_start"
    assert hint(b'{"type":"response.created"}') == '"type": response.created'
    assert hint(b'{"candidates":[],"usageMetadata":{}}') == "JSON with keys candidates, usageMetadata"
    assert hint(b"hello") == "not JSON"
    reader = frame_reader(Api.BEDROCK)
    [message] = reader.feed(event_message("chunk", b"{}"))
    assert reader.hint(message) == ":event-type chunk, :message-type event"


def test_content_types_name_their_formats() -> None:
    assert apis_for_content_type("application/vnd.amazon.eventstream") == [Api.BEDROCK]
    assert apis_for_content_type("application/x-ndjson") == [Api.OLLAMA]
    sse_apis = {Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC, Api.GEMINI}  # never Realtime's: it has no HTTP stream
    assert set(apis_for_content_type("text/event-stream")) == sse_apis
    assert apis_for_content_type("application/json") == []


# --- the reader's end and limits ----------------------------------------------------------------------------------


def test_an_unfinished_sse_event_at_the_end_is_dropped_as_the_spec_says() -> None:
    reader = frame_reader(Api.ANTHROPIC)
    assert reader.feed(b"event: ping\ndata: {}") == []
    assert reader.close() == []
    assert reader.pending_bytes() == len(b"event: ping\ndata: {}")


def test_a_truncated_last_frame_raises_in_the_binary_and_ndjson_formats() -> None:
    bedrock = frame_reader(Api.BEDROCK)
    bedrock.feed(STREAMS[Api.BEDROCK][0][:-1])
    with pytest.raises(StreamFormatError, match="truncated"):
        bedrock.close()
    ollama = frame_reader(Api.OLLAMA)
    ollama.feed(STREAMS[Api.OLLAMA][0][:-5])
    with pytest.raises(StreamFormatError, match="truncated"):
        ollama.close()


def test_the_last_ndjson_line_without_a_line_end_is_returned_by_close() -> None:
    reader = frame_reader(Api.OLLAMA)
    body = STREAMS[Api.OLLAMA][0].rstrip(b"\n")
    assert len(reader.feed(body)) == 2
    [last] = reader.close()
    assert isinstance(last, JsonLine)
    assert reader.kind(last) is FrameKind.DONE


@pytest.mark.parametrize(
    ("api", "big"),
    [
        (Api.ANTHROPIC, b"data: " + b"x" * 200),
        (Api.BEDROCK, encode_message({}, b"x" * 200)),
        (Api.OLLAMA, b"x" * 200),
    ],
)
def test_every_reader_takes_the_callers_frame_limit(api: Api, big: bytes) -> None:
    with pytest.raises(ResponseTooLarge):
        frame_reader(api, max_frame_bytes=100).feed(big)
    assert frame_reader(api).feed(big[:150]) == []  # the default limits are far above


def test_wrong_format_bytes_fail_clearly_in_the_binary_reader() -> None:
    with pytest.raises(StreamFormatError):
        frame_reader(Api.BEDROCK).feed(STREAMS[Api.ANTHROPIC][0])


def test_sse_frames_keep_their_openai_kind_for_the_callers_that_read_it_directly() -> None:
    """The gateway's TTFT and the load client read Frame.kind (OpenAI rules): reasoning is not content there either."""
    frame = Frame(raw=b"", data=json.dumps({"choices": [{"delta": {"reasoning_content": "hm"}}]}).encode())
    assert frame.kind is FrameKind.REASONING
