"""Real clients against the stub process: the official openai client (sync and async) and curl -N."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import openai
import pytest

from tests.e2e.conftest import Start


def base(stub_url: str | None) -> str:
    assert stub_url is not None
    return stub_url + "/v1"


TOKENS = 8


@pytest.fixture(scope="module")
def stub_url(module_service: Start) -> str:
    """One stub for the openai client tests: each stream is its own, and a stub keeps nothing a later one reads."""
    stub = module_service("stub", "--port", "0", "--tokens", str(TOKENS), "--interval-ms", "5", "--ttft-ms", "10")
    return base(stub.url)


def test_openai_sync_client_streams_chat(stub_url: str) -> None:
    client = openai.OpenAI(base_url=stub_url, api_key="unused")
    stream = client.chat.completions.create(
        model="tokenpath-stub",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.usage:
            usage = chunk.usage
    assert len(pieces) == TOKENS
    assert len(set(pieces)) == TOKENS  # token text varies
    assert usage is not None
    assert usage.completion_tokens == TOKENS
    models = client.models.list()
    assert [m.id for m in models.data] == ["tokenpath-stub"]
    whole = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert whole.usage is not None
    assert whole.usage.completion_tokens == 3
    assert whole.choices[0].message.content == "".join(pieces[:3])


def test_openai_async_client_streams_chat_and_completions(stub_url: str) -> None:
    async def main() -> tuple[list[str], list[str]]:
        client = openai.AsyncOpenAI(base_url=stub_url, api_key="unused")
        chat = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=5
        )
        chat_pieces = [c.choices[0].delta.content async for c in chat if c.choices and c.choices[0].delta.content]
        comp = await client.completions.create(model="m", prompt="hi", stream=True, max_tokens=4)
        comp_pieces = [c.choices[0].text async for c in comp if c.choices and c.choices[0].text]
        await client.close()
        return chat_pieces, comp_pieces

    chat_pieces, comp_pieces = asyncio.run(main())
    assert len(chat_pieces) == 5
    assert comp_pieces == chat_pieces[:4]


def test_openai_client_sees_a_clear_error(stub_url: str) -> None:
    client = openai.OpenAI(base_url=stub_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="m", messages=[], stream=True)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_n_shows_frames_as_they_come(service: Start) -> None:
    stub = service(
        "stub", "--port", "0", "--format", "plain", "--tokens", "6", "--interval-ms", "150", "--ttft-ms", "0"
    )
    assert stub.url is not None
    body = '{"messages":[{"role":"user","content":"x"}],"stream":true}'
    argv = ["curl", "-sN", "-X", "POST", stub.url + "/v1/chat/completions", "-d", body]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        start = time.monotonic()
        first = proc.stdout.readline()
        first_at = time.monotonic() - start
        rest = proc.stdout.read()
        total = time.monotonic() - start
    assert first == b"data: 0\n"
    assert rest.count(b"data: ") == 5
    assert first_at < total - 0.5  # the first frame came long before the last: curl saw a stream
