"""Every format's route on an in-process stub over loopback: requests parsed per format, bad input refused in the
format's own error shape, max-tokens fields, stream ids, --api, non-streamed answers, and the audit's first content
at the TTFT."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer

from tests.helpers import HTTP_APIS, exchange, post
from tokenpath.errors import UsageError
from tokenpath.stub.config import StubConfig
from tokenpath.stub.formats import check_frame_bytes
from tokenpath.stub.frames import token_text
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.request import STREAM_HEADER
from tokenpath.wire.sse import SSEParser

StartStub = Callable[..., StubServer]
OTHER_APIS = [a for a in HTTP_APIS if a is not Api.OPENAI]
PATHS = {
    Api.OPENAI: "/v1/chat/completions",
    Api.RESPONSES: "/v1/responses",
    Api.ANTHROPIC: "/v1/messages",
    Api.GEMINI: "/v1beta/models/gem-1:streamGenerateContent?alt=sse",
    Api.BEDROCK: "/model/anthropic.claude-v2%3A1/converse-stream",
    Api.OLLAMA: "/api/chat",
}
BODIES: dict[Api, dict[str, Any]] = {
    Api.OPENAI: {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    Api.RESPONSES: {"model": "m", "input": "hi", "stream": True},
    Api.ANTHROPIC: {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], "stream": True},
    Api.GEMINI: {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    Api.BEDROCK: {"messages": [{"role": "user", "content": [{"text": "hi"}]}]},
    Api.OLLAMA: {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
}
LIMITS: dict[Api, Callable[[int], dict[str, Any]]] = {
    Api.OPENAI: lambda n: {"max_tokens": n},
    Api.RESPONSES: lambda n: {"max_output_tokens": n},
    Api.ANTHROPIC: lambda n: {"max_tokens": n},
    Api.GEMINI: lambda n: {"generationConfig": {"maxOutputTokens": n}},
    Api.BEDROCK: lambda n: {"inferenceConfig": {"maxTokens": n}},
    Api.OLLAMA: lambda n: {"options": {"num_predict": n}},
}


def call(
    port: int,
    api: Api,
    body: dict[str, Any] | bytes,
    *,
    sid: str | None = None,
    path: str | None = None,
    version: str = "1.1",
) -> tuple[int, dict[str, str], bytes]:
    """One request on the format's route: status, head (names lower-cased), the body with its framing removed."""
    extra = f"{STREAM_HEADER}: {sid}\r\n" if sid else ""
    raw = exchange(port, post(path or PATHS[api], body, version=version, extra=extra))
    parser = ResponseParser("POST")
    data = parser.feed(raw)
    parser.feed_eof()
    assert parser.head is not None
    return parser.head.status, {k.lower(): v for k, v in parser.head.headers}, data


def texts(api: Api, body: bytes) -> list[str]:
    """The token texts of a streamed body, read with the format's own framing."""
    if api is Api.BEDROCK:
        buffer = EventStreamBuffer()
        buffer.add_data(body)
        payloads = [json.loads(m.payload) for m in buffer if m.headers[":event-type"] == "contentBlockDelta"]
        return [p["delta"]["text"] for p in payloads]
    if api is Api.OLLAMA:
        return [line["message"]["content"] for line in map(json.loads, body.splitlines()) if not line["done"]]
    events = [(e.event, json.loads(e.data)) for e in SSEParser().feed(body) if e.data and e.data != b"[DONE]"]
    if api is Api.OPENAI:
        return [d["choices"][0]["delta"]["content"] for _, d in events if d["choices"][0]["delta"].get("content")]
    if api is Api.ANTHROPIC:
        return [d["delta"]["text"] for name, d in events if name == b"content_block_delta"]
    if api is Api.RESPONSES:
        return [d["delta"] for name, d in events if name == b"response.output_text.delta"]
    return [d["candidates"][0]["content"]["parts"][0]["text"] for _, d in events]


def error_message(api: Api, body: bytes) -> str:
    doc = json.loads(body)
    if api is Api.ANTHROPIC:
        assert doc["type"] == "error"
        return str(doc["error"]["message"])
    if api is Api.GEMINI:
        assert doc["error"]["status"] in ("INVALID_ARGUMENT", "NOT_FOUND")
        return str(doc["error"]["message"])
    if api is Api.BEDROCK:
        return str(doc["message"])
    if api is Api.OLLAMA:
        return str(doc["error"])
    assert doc["error"]["type"] == "invalid_request_error"
    return str(doc["error"]["message"])


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_each_route_streams_its_format_and_the_audit_has_the_first_content_at_the_ttft(
    start_stub: StartStub, api: Api
) -> None:
    stub = start_stub(tokens=4, ttft_ms=30, interval_ms=2)
    status, head, body = call(stub.port, api, BODIES[api], sid=f"fmt-{api.value}")
    assert status == 200
    assert head["content-type"] == SPECS[api].content_type
    assert head["transfer-encoding"] == "chunked"
    assert head[STREAM_HEADER.lower()] == f"fmt-{api.value}"
    assert texts(api, body) == [token_text(i) for i in range(4)]
    log = stub.audit.get(f"fmt-{api.value}")
    assert log is not None
    snapshot = log.snapshot()
    first = snapshot.first_content_write
    assert first is not None
    assert snapshot.first_content == {Api.OPENAI: 1, Api.RESPONSES: 4, Api.ANTHROPIC: 3}.get(
        api, int(api is Api.BEDROCK)
    )
    assert all(w.scheduled_ns == snapshot.started_ns for w in snapshot.writes[: snapshot.first_content])
    assert first.scheduled_ns - snapshot.started_ns == 30_000_000
    assert first.actual_ns >= first.scheduled_ns
    assert log.state == "complete"


def test_gemini_and_bedrock_take_the_model_from_the_path(start_stub: StartStub) -> None:
    stub = start_stub(tokens=1, ttft_ms=0, interval_ms=0)
    _, _, body = call(stub.port, Api.GEMINI, BODIES[Api.GEMINI])
    assert json.loads(SSEParser().feed(body)[0].data or b"")["modelVersion"] == "gem-1"
    _, _, body = call(stub.port, Api.GEMINI, BODIES[Api.GEMINI], path="/v1/models/gem-2:streamGenerateContent?alt=sse")
    assert json.loads(SSEParser().feed(body)[0].data or b"")["modelVersion"] == "gem-2"
    status, _, _ = call(stub.port, Api.BEDROCK, {**BODIES[Api.BEDROCK], "tokenpath": {"tokens": 1}})
    assert status == 200


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_the_format_s_max_tokens_field_lowers_the_count_and_never_raises_it(start_stub: StartStub, api: Api) -> None:
    stub = start_stub(tokens=5, ttft_ms=0, interval_ms=0)
    _, _, body = call(stub.port, api, {**BODIES[api], **LIMITS[api](2)})
    assert len(texts(api, body)) == 2
    _, _, body = call(stub.port, api, {**BODIES[api], **LIMITS[api](50)})
    assert len(texts(api, body)) == 5


@pytest.mark.parametrize(
    ("api", "body", "text"),
    [
        (Api.RESPONSES, {"model": "m", "stream": True}, "'input'"),
        (Api.RESPONSES, {"input": [], "stream": True}, "'input'"),
        (Api.RESPONSES, {"input": "hi", "max_output_tokens": 0}, "'max_output_tokens'"),
        (Api.ANTHROPIC, {"messages": [{"role": "user", "content": "hi"}], "stream": True}, "'max_tokens' is required"),
        (Api.ANTHROPIC, {"max_tokens": 5, "messages": []}, "'messages'"),
        (Api.ANTHROPIC, {**BODIES[Api.ANTHROPIC], "max_tokens": -1}, "'max_tokens'"),
        (Api.ANTHROPIC, {**BODIES[Api.ANTHROPIC], "stream": "yes"}, "'stream'"),
        (Api.ANTHROPIC, {**BODIES[Api.ANTHROPIC], "metadata": "x"}, "'metadata'"),
        (Api.GEMINI, {"contents": "hi"}, "'contents'"),
        (Api.GEMINI, {**BODIES[Api.GEMINI], "generationConfig": {"maxOutputTokens": 0}}, "maxOutputTokens"),
        (Api.BEDROCK, {"messages": "hi"}, "'messages'"),
        (Api.BEDROCK, {**BODIES[Api.BEDROCK], "inferenceConfig": {"maxTokens": 0}}, "inferenceConfig.maxTokens"),
        (Api.OLLAMA, {"model": "m"}, "'messages'"),
        (Api.OLLAMA, {**BODIES[Api.OLLAMA], "options": {"num_predict": 0}}, "num_predict"),
        (Api.OLLAMA, {**BODIES[Api.OLLAMA], "model": "m" * 300}, "longer than 256"),
        (Api.ANTHROPIC, {**BODIES[Api.ANTHROPIC], "tokenpath": {"format": "plain"}}, "for the OpenAI routes"),
        (Api.ANTHROPIC, {**BODIES[Api.ANTHROPIC], "tokenpath": {"frame_bytes": 50}}, "frame_bytes=50"),
        (Api.GEMINI, {**BODIES[Api.GEMINI], "tokenpath": {"speed": 2}}, "unknown keys"),
        (Api.OPENAI, {**BODIES[Api.OPENAI], "stream_options": {"include_usage": "x"}}, "include_usage"),  # was true
    ],
)
def test_bad_input_is_a_400_in_the_format_s_own_shape(start_stub: StartStub, api: Api, body: Any, text: str) -> None:
    stub = start_stub(tokens=2, ttft_ms=0, interval_ms=0)
    status, head, data = call(stub.port, api, body)
    assert status == 400
    assert text in error_message(api, data)
    if api is Api.BEDROCK:  # what botocore turns into its ValidationException
        assert head["x-amzn-errortype"] == "ValidationException"
    assert stub.audit.all() == []


@pytest.mark.parametrize("api", OTHER_APIS, ids=lambda a: a.value)
def test_bad_json_is_a_400_in_the_format_s_own_shape(start_stub: StartStub, api: Api) -> None:
    stub = start_stub()
    status, _, data = call(stub.port, api, b"{nope")
    assert status == 400
    assert "not valid JSON" in error_message(api, data)


def test_gemini_without_alt_sse_is_refused_with_the_reason(start_stub: StartStub) -> None:
    stub = start_stub()
    status, _, data = call(stub.port, Api.GEMINI, BODIES[Api.GEMINI], path="/v1beta/models/g:streamGenerateContent")
    assert status == 400
    assert "alt=sse" in error_message(Api.GEMINI, data)


@pytest.mark.parametrize("api", OTHER_APIS, ids=lambda a: a.value)
def test_a_get_on_a_format_route_is_a_405_in_its_shape(start_stub: StartStub, api: Api) -> None:
    stub = start_stub()
    path = PATHS[api]
    raw = exchange(stub.port, f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405")
    assert b"\r\nAllow: POST" in head
    assert "use POST" in error_message(api, body)


@pytest.mark.parametrize("served", [Api.ANTHROPIC, Api.BEDROCK, Api.OPENAI], ids=lambda a: a.value)
def test_api_serves_only_its_route_and_the_others_say_so_in_their_shape(start_stub: StartStub, served: Api) -> None:
    stub = start_stub(api=served.value, tokens=2, ttft_ms=0, interval_ms=0)
    status, _, body = call(stub.port, served, BODIES[served])
    assert status == 200
    assert len(texts(served, body)) == 2
    for api in HTTP_APIS:
        if api is served:
            continue
        status, _, body = call(stub.port, api, BODIES[api])
        assert status == 404
        message = error_message(api, body)
        assert f"--api {served.value}" in message
        assert f"start it with --api {api.value} or --api all" in message


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_the_stream_id_header_names_the_stream_and_a_bad_one_is_refused(start_stub: StartStub, api: Api) -> None:
    stub = start_stub(tokens=1, ttft_ms=0, interval_ms=0)
    status, head, _ = call(stub.port, api, BODIES[api], sid="hdr-1")
    assert (status, head[STREAM_HEADER.lower()]) == (200, "hdr-1")
    assert stub.audit.get("hdr-1") is not None
    status, _, body = call(stub.port, api, BODIES[api], sid="a" * 200)
    assert status == 400
    assert "visible ASCII" in error_message(api, body)


def test_anthropic_takes_the_stream_id_from_metadata_user_id(start_stub: StartStub) -> None:
    stub = start_stub(tokens=1, ttft_ms=0, interval_ms=0)
    body = {**BODIES[Api.ANTHROPIC], "metadata": {"user_id": "from-meta"}}
    _, head, _ = call(stub.port, Api.ANTHROPIC, body)
    assert head[STREAM_HEADER.lower()] == "from-meta"
    _, head, _ = call(stub.port, Api.ANTHROPIC, body, sid="from-header")
    assert head[STREAM_HEADER.lower()] == "from-header"  # the header wins


def test_the_responses_api_takes_the_stream_id_from_the_header_only(start_stub: StartStub) -> None:
    stub = start_stub(tokens=1, ttft_ms=0, interval_ms=0)
    _, head, _ = call(stub.port, Api.RESPONSES, {**BODIES[Api.RESPONSES], "user": "from-user"})
    assert head[STREAM_HEADER.lower()] != "from-user"


@pytest.mark.parametrize(
    ("api", "body", "text_of"),
    [
        (Api.ANTHROPIC, {**BODIES[Api.ANTHROPIC], "stream": False}, lambda d: d["content"][0]["text"]),
        (Api.RESPONSES, {"model": "m", "input": "hi"}, lambda d: d["output"][0]["content"][0]["text"]),
        (Api.OLLAMA, {**BODIES[Api.OLLAMA], "stream": False}, lambda d: d["message"]["content"]),
    ],
)
def test_an_unstreamed_request_gets_the_whole_answer_when_the_last_token_would_come(
    start_stub: StartStub, api: Api, body: dict[str, Any], text_of: Callable[[Any], str]
) -> None:
    stub = start_stub(tokens=3, ttft_ms=40, interval_ms=10)
    started = time.monotonic()
    status, head, data = call(stub.port, api, body)
    assert time.monotonic() - started >= 0.055  # ttft + 2 intervals: never early
    assert (status, head["content-type"]) == (200, "application/json")
    assert text_of(json.loads(data)) == "".join(token_text(i) for i in range(3))


def test_ollama_streams_unless_told_not_to_and_minus_one_means_no_limit(start_stub: StartStub) -> None:
    stub = start_stub(tokens=3, ttft_ms=0, interval_ms=0)
    _, head, body = call(stub.port, Api.OLLAMA, {**BODIES[Api.OLLAMA], "options": {"num_predict": -1}})
    assert head["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in body.splitlines()]
    assert [line["done"] for line in lines] == [False, False, False, True]
    assert (lines[-1]["done_reason"], lines[-1]["eval_count"]) == ("stop", 3)


def test_a_request_s_pacing_member_applies_to_every_format(start_stub: StartStub) -> None:
    stub = start_stub(tokens=50, ttft_ms=500, interval_ms=100)
    body = {**BODIES[Api.ANTHROPIC], "tokenpath": {"tokens": 3, "ttft_ms": 0, "interval_ms": 1}}
    started = time.monotonic()
    _, _, data = call(stub.port, Api.ANTHROPIC, body)
    assert time.monotonic() - started < 0.4
    assert len(texts(Api.ANTHROPIC, data)) == 3


def test_an_http10_client_gets_a_close_delimited_event_stream(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, ttft_ms=0, interval_ms=0)
    status, head, body = call(stub.port, Api.BEDROCK, BODIES[Api.BEDROCK], version="1.0")
    assert status == 200
    assert "transfer-encoding" not in head
    assert texts(Api.BEDROCK, body) == [token_text(0), token_text(1)]


def test_health_lists_the_apis_served(start_stub: StartStub) -> None:
    stub = start_stub(api="gemini")
    raw = exchange(stub.port, b"GET /_tokenpath/health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert json.loads(raw.partition(b"\r\n\r\n")[2])["apis"] == ["gemini"]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"api": "grpc"}, "unknown API format 'grpc'"),
        ({"api": "anthropic", "format": "plain"}, "`format` plain is the OpenAI routes'"),
        ({"api": "bedrock", "frame_bytes": 40}, "--api bedrock"),
        ({"api": "responses", "frame_bytes": 90}, "--api responses"),
    ],
)
def test_a_stub_that_cannot_serve_its_flags_fails_at_start(kwargs: dict[str, Any], text: str) -> None:
    with pytest.raises(UsageError, match=text.replace("(", r"\(")):
        check_frame_bytes(StubConfig(**kwargs))


def test_a_stub_for_every_api_takes_a_frame_size_openai_fits_and_the_others_answer_why_not(
    start_stub: StartStub,
) -> None:
    """60-byte plain frames are the seed article's condition: `--api all` (the default) starts with them, and a
    request in a format whose frames cannot be that small is a 400 with the reason, not a stub refused at start."""
    check_frame_bytes(StubConfig(frame_bytes=60, format="plain"))
    stub = start_stub(frame_bytes=90, format="plain")
    status, _, data = call(stub.port, Api.RESPONSES, BODIES[Api.RESPONSES])
    assert status == 400
    assert "frame_bytes" in error_message(Api.RESPONSES, data)
    status, _, _ = call(stub.port, Api.OPENAI, BODIES[Api.OPENAI])
    assert status == 200
