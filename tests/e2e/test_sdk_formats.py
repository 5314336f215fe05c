"""The official SDKs as clients (issue 26 §4): each streams straight from one stub process on its own format's
route, gets the whole text in order, and the stub's audit (read over its control endpoint) has the stream with the
write of its first content frame at the TTFT."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from typing import Any

import anthropic
import boto3
import openai
import pytest
from botocore.config import Config as BotoConfig
from google import genai
from google.genai import types as genai_types

from tests.e2e.conftest import Start
from tokenpath.audit import StreamLog
from tokenpath.clock import NS_PER_MS
from tokenpath.serve.procs import tokenpath_argv
from tokenpath.stub.control import fetch_audit
from tokenpath.stub.frames import token_text
from tokenpath.wire.apis import Api
from tokenpath.wire.request import STREAM_HEADER

pytestmark = pytest.mark.e2e

TOKENS, TTFT_MS, INTERVAL_MS = 8, 40, 5
MODEL = "tokenpath-stub"
TEXT = "".join(token_text(i) for i in range(TOKENS))
PROMPT = "hi"
# Where the first content frame is in each format's stream: after the frames that leave with the head.
FIRST_CONTENT = {Api.OPENAI: 1, Api.RESPONSES: 4, Api.ANTHROPIC: 3, Api.GEMINI: 0, Api.BEDROCK: 1, Api.OLLAMA: 0}


@pytest.fixture(scope="module")
def stub_url(module_service: Start) -> str:
    stub = module_service(
        "stub", "--port", "0", "--tokens", str(TOKENS), "--ttft-ms", str(TTFT_MS), "--interval-ms", str(INTERVAL_MS)
    )
    url: str | None = stub.url
    assert url is not None
    return url


def openai_chat(url: str, sid: str) -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
        extra_headers={STREAM_HEADER: sid},
    )
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def openai_responses(url: str, sid: str) -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    stream = client.responses.create(model=MODEL, input=PROMPT, stream=True, extra_headers={STREAM_HEADER: sid})
    events = list(stream)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == TEXT
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def anthropic_messages(url: str, sid: str) -> str:
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    with client.messages.stream(
        model=MODEL,
        max_tokens=1024,
        messages=[{"role": "user", "content": PROMPT}],
        extra_headers={STREAM_HEADER: sid},
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == TOKENS
    return text


def gemini_stream(url: str, sid: str) -> str:
    options = genai_types.HttpOptions(base_url=url, headers={STREAM_HEADER: sid})
    client = genai.Client(api_key="unused", http_options=options)
    chunks = list(client.models.generate_content_stream(model=MODEL, contents=PROMPT))
    assert chunks[-1].candidates is not None
    assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP
    return "".join(c.text or "" for c in chunks)


def bedrock_converse(url: str, sid: str) -> str:
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="unused",
        aws_secret_access_key="unused",
        config=BotoConfig(retries={"max_attempts": 1}),
    )

    def add_stream_id(request: Any, **_: Any) -> None:
        request.headers[STREAM_HEADER] = sid

    client.meta.events.register("before-sign.bedrock-runtime.ConverseStream", add_stream_id)
    answer = client.converse_stream(modelId=MODEL, messages=[{"role": "user", "content": [{"text": PROMPT}]}])
    events = list(answer["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds == ["messageStart", *["contentBlockDelta"] * TOKENS, "contentBlockStop", "messageStop", "metadata"]
    assert events[-2]["messageStop"]["stopReason"] == "end_turn"
    assert events[-1]["metadata"]["usage"]["outputTokens"] == TOKENS
    return "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)


CLIENTS: dict[Api, Callable[[str, str], str]] = {
    Api.OPENAI: openai_chat,
    Api.RESPONSES: openai_responses,
    Api.ANTHROPIC: anthropic_messages,
    Api.GEMINI: gemini_stream,
    Api.BEDROCK: bedrock_converse,
}


@pytest.mark.parametrize("api", list(CLIENTS), ids=lambda a: a.value)
def test_the_sdk_streams_the_whole_text_in_order_and_the_audit_has_its_first_content(stub_url: str, api: Api) -> None:
    sid = f"sdk-{api.value}"
    assert CLIENTS[api](stub_url, sid) == TEXT
    entry = fetch_audit(stub_url, [sid]).by_id()[sid]
    assert entry.verdict.state == "complete"
    log = entry.log
    assert log is not None
    first = _first_content(log)
    assert log.first_content == FIRST_CONTENT[api]
    # The frames before it left with the head; it was due at the TTFT, and written then (never early).
    assert all(w.scheduled_ns == log.started_ns for w in log.writes[: FIRST_CONTENT[api]])
    assert first.scheduled_ns - log.started_ns == TTFT_MS * NS_PER_MS
    assert first.actual_ns >= first.scheduled_ns


def test_the_async_anthropic_client_streams_too(stub_url: str) -> None:
    async def main() -> str:
        client = anthropic.AsyncAnthropic(base_url=stub_url, api_key="unused", max_retries=0)
        async with client.messages.stream(
            model=MODEL, max_tokens=3, messages=[{"role": "user", "content": PROMPT}]
        ) as stream:
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
        await client.close()
        assert final.stop_reason == "max_tokens"  # max_tokens lowered the stub's 8 and says so
        return text

    assert asyncio.run(main()) == TEXT[: len("".join(token_text(i) for i in range(3)))]


def test_each_sdk_raises_the_stub_s_400_as_its_own_error(stub_url: str) -> None:
    with pytest.raises(anthropic.BadRequestError, match="messages"):
        anthropic.Anthropic(base_url=stub_url, api_key="unused", max_retries=0).messages.create(
            model=MODEL, max_tokens=5, messages=[]
        )
    with pytest.raises(openai.BadRequestError, match="input"):
        openai.OpenAI(base_url=stub_url + "/v1", api_key="unused", max_retries=0).responses.create(
            model=MODEL, input=[], stream=True
        )
    bedrock = boto3.client(
        "bedrock-runtime",
        endpoint_url=stub_url,
        region_name="us-east-1",
        aws_access_key_id="unused",
        aws_secret_access_key="unused",
        config=BotoConfig(parameter_validation=False),  # botocore would refuse maxTokens 0 itself
    )
    with pytest.raises(bedrock.exceptions.ValidationException, match="maxTokens"):
        bedrock.converse_stream(
            modelId=MODEL,
            messages=[{"role": "user", "content": [{"text": PROMPT}]}],
            inferenceConfig={"maxTokens": 0},
        )


def test_the_api_flag_reaches_the_stub() -> None:
    done = subprocess.run(
        tokenpath_argv("stub", "--port", "0", "--api", "grpc"), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert "unknown API format 'grpc'" in done.stderr


def _first_content(log: StreamLog) -> Any:
    write = log.first_content_write
    assert write is not None
    return write
