"""What each format writes, frame by frame: byte-exact templates, the frames around content, where the first content
is, stop reasons, padding, and the Bedrock event-stream messages checked by botocore's own parser."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from tests.helpers import HTTP_APIS
from tokenpath.audit import completion_id, stream_label
from tokenpath.errors import UsageError
from tokenpath.stub.config import Pacing
from tokenpath.stub.formats import FORMATS
from tokenpath.stub.formats.bedrock import message
from tokenpath.stub.frames import PLACEHOLDER_LABEL, StreamRequest, token_text
from tokenpath.wire.apis import Api
from tokenpath.wire.sse import SSEParser

OTHER_APIS = [a for a in HTTP_APIS if a is not Api.OPENAI]
PACING = Pacing(ttft_ms=10, interval_ms=5, tokens=2, frame_bytes=None, format="openai")


def request(api: Api, tokens: int = 2, truncated: bool = False, sid: str = "s1") -> StreamRequest:
    return StreamRequest(api.value, "m", sid, tokens, prompt_tokens=3, truncated=truncated, ttft_ms=10, interval_ms=5)


def frames(api: Api, tokens: int = 2, truncated: bool = False, frame_bytes: int | None = None) -> list[bytes]:
    pacing = Pacing(10, 5, tokens, frame_bytes, "openai")
    shape = FORMATS[api].shape(request(api, tokens, truncated), pacing)
    return shape.wire(False, completion_id("s1"))


def sse_data(frame: bytes) -> tuple[str | None, Any]:
    (event,) = SSEParser().feed(frame)
    assert event.raw == frame  # one frame is one whole event, nothing before or after it
    assert event.data is not None
    return (event.event.decode() if event.event else None), json.loads(event.data)


def decode_eventstream(data: bytes) -> list[tuple[dict[str, Any], Any]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(dict(m.headers), json.loads(m.payload)) for m in buffer]


def content_text(api: Api, frame: bytes) -> str | None:
    """The text a frame carries, read independently of the renderer (None: not a content frame)."""
    if api is Api.BEDROCK:
        ((headers, payload),) = decode_eventstream(frame)
        return payload["delta"]["text"] if headers[":event-type"] == "contentBlockDelta" else None
    if api is Api.OLLAMA:
        line = json.loads(frame)
        return line["message"]["content"] or None
    name, data = sse_data(frame)
    if api is Api.ANTHROPIC:
        return data["delta"]["text"] if name == "content_block_delta" else None
    if api is Api.RESPONSES:
        return data["delta"] if name == "response.output_text.delta" else None
    return data["candidates"][0]["content"]["parts"][0]["text"] or None  # Gemini


LABEL = stream_label("s1")
ANTHROPIC_2 = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_%s","type":"message","role":"assistant",'
    b'"model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
    % LABEL.encode(),
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text",'
    b'"text":""}}\n\n',
    b'event: ping\ndata: {"type": "ping"}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    b'"text":" alpha0"}}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    b'"text":" bravo1"}}\n\n',
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
    b'"usage":{"output_tokens":2}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]
GEMINI_2 = [
    b'data: {"candidates": [{"content": {"parts": [{"text": " alpha0"}],"role": "model"},"index": 0}],"usageMetadata": '
    b'{"promptTokenCount": 3,"candidatesTokenCount": 1,"totalTokenCount": 4},"modelVersion": "m","responseId": "%s"}'
    b"\r\n\r\n" % LABEL.encode(),
    b'data: {"candidates": [{"content": {"parts": [{"text": " bravo1"}],"role": "model"},"finishReason": "STOP",'
    b'"index": 0}],"usageMetadata": {"promptTokenCount": 3,"candidatesTokenCount": 2,"totalTokenCount": 5},'
    b'"modelVersion": "m","responseId": "%s"}\r\n\r\n' % LABEL.encode(),
]
OLLAMA_2 = [
    b'{"model":"m","created_at":"1970-01-01T00:00:00Z","message":{"role":"assistant","content":" alpha0"},'
    b'"done":false}\n',
    b'{"model":"m","created_at":"1970-01-01T00:00:00Z","message":{"role":"assistant","content":" bravo1"},'
    b'"done":false}\n',
    b'{"model":"m","created_at":"1970-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done_reason":'
    b'"stop","done":true,"total_duration":20000000,"load_duration":0,"prompt_eval_count":3,"prompt_eval_duration":'
    b'10000000,"eval_count":2,"eval_duration":10000000}\n',
]
RESPONSES_DELTA = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":5,'
    b'"item_id":"msg_%s","output_index":0,"content_index":0,"delta":" bravo1","logprobs":[]}\n\n' % LABEL.encode()
)
# messageStart as the framing spec builds it: total 118, headers 82, prelude CRC, 3 string headers, payload, CRC.
BEDROCK_START = bytes.fromhex(
    "0000007600000052"
    "96d5fade"
    "0b3a6576656e742d74797065"
    "07000c"
    "6d6573736167655374617274"
    "0d3a636f6e74656e742d74797065"
    "070010"
    "6170706c69636174696f6e2f6a736f6e"
    "0d3a6d6573736167652d74797065"
    "070005"
    "6576656e74"
    "7b22726f6c65223a22617373697374616e74227d"
    "6fa8c599"
)


@pytest.mark.parametrize(
    ("api", "expected"), [(Api.ANTHROPIC, ANTHROPIC_2), (Api.GEMINI, GEMINI_2), (Api.OLLAMA, OLLAMA_2)]
)
def test_frames_are_byte_exact(api: Api, expected: list[bytes]) -> None:
    assert frames(api) == expected


def test_responses_frames_are_byte_exact_and_numbered() -> None:
    got = frames(Api.RESPONSES)
    assert got[5] == RESPONSES_DELTA
    events = [sse_data(f) for f in got]
    assert [name for name, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(10))
    created, completed = events[0][1]["response"], events[-1][1]["response"]
    assert (created["id"], created["status"], created["output"], created["usage"]) == (
        f"resp_{LABEL}",
        "in_progress",
        [],
        None,
    )
    assert completed["status"] == "completed"
    assert completed["output"][0]["content"][0]["text"] == " alpha0 bravo1"
    assert completed["usage"]["output_tokens"] == 2
    for _, data in events[3:8]:  # every event about the text names where it goes
        assert (data["item_id"], data["output_index"], data["content_index"]) == (f"msg_{LABEL}", 0, 0)


def test_bedrock_messages_are_byte_exact_and_botocore_reads_them() -> None:
    got = frames(Api.BEDROCK)
    assert got[0] == BEDROCK_START == message("messageStart", {"role": "assistant"})
    decoded = decode_eventstream(b"".join(got))
    assert [h[":event-type"] for h, _ in decoded] == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert all(h[":content-type"] == "application/json" and h[":message-type"] == "event" for h, _ in decoded)
    assert [p for _, p in decoded][1:] == [
        {"contentBlockIndex": 0, "delta": {"text": " alpha0"}},
        {"contentBlockIndex": 0, "delta": {"text": " bravo1"}},
        {"contentBlockIndex": 0},
        {"stopReason": "end_turn"},
        {"usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}, "metrics": {"latencyMs": 30}},
    ]


def test_botocore_reads_bedrock_messages_fed_byte_by_byte_and_refuses_a_flipped_byte() -> None:
    data = b"".join(frames(Api.BEDROCK))
    buffer = EventStreamBuffer()
    seen: list[str] = []
    for i in range(len(data)):
        buffer.add_data(data[i : i + 1])
        seen.extend(m.headers[":event-type"] for m in buffer)
    assert len(seen) == 6
    for at in (9, 40, len(BEDROCK_START) - 6):  # the prelude CRC, a header, the payload: each CRC is checked
        broken = bytearray(BEDROCK_START)
        broken[at] ^= 0x01
        with pytest.raises(ChecksumMismatch):
            decode_eventstream(bytes(broken))


@pytest.mark.parametrize("api", OTHER_APIS, ids=lambda a: a.value)
def test_the_first_content_frame_is_where_the_shape_says_and_nothing_before_it_carries_text(api: Api) -> None:
    shape = FORMATS[api].shape(request(api, 5), PACING)
    got = shape.wire(False, completion_id("s1"))
    texts = [content_text(api, f) for f in got]
    assert texts[: shape.first_content] == [None] * shape.first_content
    assert texts[shape.first_content : shape.first_content + 5] == [token_text(i) for i in range(5)]
    assert shape.lead == shape.first_content  # the frames around content that lead leave with the head
    assert all(t is None for t in texts[shape.first_content + 5 :])


@pytest.mark.parametrize("api", OTHER_APIS, ids=lambda a: a.value)
def test_each_stream_carries_its_own_label_at_the_same_sizes(api: Api) -> None:
    shape = FORMATS[api].shape(request(api), PACING)
    one, two = shape.wire(True, completion_id("one")), shape.wire(True, completion_id("two"))
    assert [len(f) for f in one] == [len(f) for f in two]
    joined = b"".join(one)
    assert PLACEHOLDER_LABEL.encode() not in joined
    if api in (Api.BEDROCK, Api.OLLAMA):  # their events carry no id: the same bytes for every stream
        assert one == two
    else:
        assert stream_label("one").encode() in joined
        assert one != two


STOPS: dict[Api, Callable[[list[bytes]], Any]] = {
    Api.ANTHROPIC: lambda fs: sse_data(fs[-2])[1]["delta"]["stop_reason"],
    Api.RESPONSES: lambda fs: (sse_data(fs[-1])[0], sse_data(fs[-1])[1]["response"]["incomplete_details"]),
    Api.GEMINI: lambda fs: sse_data(fs[-1])[1]["candidates"][0]["finishReason"],
    Api.BEDROCK: lambda fs: decode_eventstream(fs[-2])[0][1]["stopReason"],
    Api.OLLAMA: lambda fs: json.loads(fs[-1])["done_reason"],
}
NATURAL = {
    Api.ANTHROPIC: "end_turn",
    Api.RESPONSES: ("response.completed", None),
    Api.GEMINI: "STOP",
    Api.BEDROCK: "end_turn",
    Api.OLLAMA: "stop",
}
CUT = {
    Api.ANTHROPIC: "max_tokens",
    Api.RESPONSES: ("response.incomplete", {"reason": "max_output_tokens"}),
    Api.GEMINI: "MAX_TOKENS",
    Api.BEDROCK: "max_tokens",
    Api.OLLAMA: "length",
}


@pytest.mark.parametrize("api", OTHER_APIS, ids=lambda a: a.value)
def test_the_stop_reason_says_whether_the_request_s_limit_ended_the_answer(api: Api) -> None:
    assert STOPS[api](frames(api)) == NATURAL[api]
    assert STOPS[api](frames(api, truncated=True)) == CUT[api]


@pytest.mark.parametrize("api", OTHER_APIS, ids=lambda a: a.value)
@pytest.mark.parametrize("size", [400, 1000])
def test_frame_bytes_pads_every_token_frame_exactly_and_it_stays_valid(api: Api, size: int) -> None:
    shape = FORMATS[api].shape(request(api, 12), Pacing(10, 5, 12, size, "openai"))
    got = shape.wire(False, completion_id("s1"))
    tokens = got[shape.first_content : shape.first_content + 12]
    assert {len(f) for f in tokens} == {size}
    assert [content_text(api, f) for f in tokens] == [token_text(i) for i in range(12)]


@pytest.mark.parametrize("api", OTHER_APIS, ids=lambda a: a.value)
def test_frame_bytes_too_small_for_a_token_frame_is_a_usage_error(api: Api) -> None:
    with pytest.raises(UsageError, match="frame_bytes=60"):
        FORMATS[api].shape(request(api), Pacing(10, 5, 2, 60, "openai"))


@pytest.mark.parametrize("api", OTHER_APIS, ids=lambda a: a.value)
def test_a_whole_answer_carries_the_same_text(api: Api) -> None:
    body = json.loads(FORMATS[api].whole(request(api, 3)))
    text = " alpha0 bravo1 charlie2"
    found = {
        Api.ANTHROPIC: lambda b: b["content"][0]["text"],
        Api.RESPONSES: lambda b: b["output"][0]["content"][0]["text"],
        Api.GEMINI: lambda b: b["candidates"][0]["content"]["parts"][0]["text"],
        Api.BEDROCK: lambda b: b["output"]["message"]["content"][0]["text"],
        Api.OLLAMA: lambda b: b["message"]["content"],
    }[api](body)
    assert found == text
