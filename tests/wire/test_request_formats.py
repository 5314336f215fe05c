"""Each format's smallest streaming request: its body, its headers, and the route a base URL gets."""

from __future__ import annotations

import pytest

from tokenpath.wire.apis import Api
from tokenpath.wire.formats import anthropic
from tokenpath.wire.request import STREAM_HEADER, api_headers, endpoint_target, stream_body


def body(api: Api, max_tokens: int | None = 7) -> dict[str, object]:
    return stream_body(api, model="m", prompt="p", max_tokens=max_tokens, stream_id="tp-1")


def test_openai_is_the_chat_body() -> None:
    assert body(Api.OPENAI) == {
        "model": "m", "messages": [{"role": "user", "content": "p"}], "stream": True, "user": "tp-1", "max_tokens": 7,
    }  # fmt: skip


def test_responses_carries_the_stream_id_in_user() -> None:
    assert body(Api.RESPONSES) == {
        "model": "m", "input": "p", "stream": True, "user": "tp-1", "max_output_tokens": 7,
    }  # fmt: skip


def test_anthropic_always_has_max_tokens_and_the_stream_id_in_metadata() -> None:
    assert body(Api.ANTHROPIC) == {
        "model": "m", "max_tokens": 7, "messages": [{"role": "user", "content": "p"}], "stream": True,
        "metadata": {"user_id": "tp-1"},
    }  # fmt: skip
    assert body(Api.ANTHROPIC, None)["max_tokens"] == anthropic.DEFAULT_MAX_TOKENS


def test_gemini_and_bedrock_have_the_model_in_the_path_not_the_body() -> None:
    assert body(Api.GEMINI) == {
        "contents": [{"role": "user", "parts": [{"text": "p"}]}], "generationConfig": {"maxOutputTokens": 7},
    }  # fmt: skip
    assert body(Api.BEDROCK) == {
        "messages": [{"role": "user", "content": [{"text": "p"}]}], "inferenceConfig": {"maxTokens": 7},
    }  # fmt: skip


def test_ollama_streams_and_limits_with_num_predict() -> None:
    assert body(Api.OLLAMA) == {
        "model": "m", "messages": [{"role": "user", "content": "p"}], "stream": True, "options": {"num_predict": 7},
    }  # fmt: skip


@pytest.mark.parametrize("api", list(Api))
def test_no_limit_is_sent_unless_asked_except_anthropic_s_required_one(api: Api) -> None:
    sent = str(body(api, None))
    assert ("1024" in sent) is (api is Api.ANTHROPIC)


@pytest.mark.parametrize(
    ("api", "key_header"),
    [(Api.OPENAI, ("Authorization", "Bearer k")), (Api.RESPONSES, ("Authorization", "Bearer k")),
     (Api.ANTHROPIC, ("x-api-key", "k")), (Api.GEMINI, ("x-goog-api-key", "k")),
     (Api.BEDROCK, ("Authorization", "Bearer k")), (Api.OLLAMA, ("Authorization", "Bearer k"))],
)  # fmt: skip
def test_headers_the_stream_id_first_and_the_key_where_the_format_wants_it(
    api: Api, key_header: tuple[str, str]
) -> None:
    headers = api_headers(api, "tp-1", "k")
    assert headers[0] == (STREAM_HEADER, "tp-1")
    assert headers[-1] == key_header
    assert (("anthropic-version", anthropic.VERSION) in headers) is (api is Api.ANTHROPIC)
    assert api_headers(api, "tp-1", None)[-1] != key_header


@pytest.mark.parametrize(
    ("base", "api", "target"),
    [
        ("", Api.RESPONSES, "/v1/responses"),
        ("/v1", Api.RESPONSES, "/v1/responses"),
        ("/openai/v1/", Api.RESPONSES, "/openai/v1/responses"),
        ("/v1/responses", Api.RESPONSES, "/v1/responses"),
        ("", Api.ANTHROPIC, "/v1/messages"),
        ("/v1", Api.ANTHROPIC, "/v1/messages"),
        ("/anthropic", Api.ANTHROPIC, "/anthropic/v1/messages"),
        ("", Api.GEMINI, "/v1beta/models/gem-1:streamGenerateContent?alt=sse"),
        ("/v1beta", Api.GEMINI, "/v1beta/models/gem-1:streamGenerateContent?alt=sse"),
        ("?key=K", Api.GEMINI, "/v1beta/models/gem-1:streamGenerateContent?alt=sse&key=K"),
        ("/v1beta/models/other:streamGenerateContent?alt=sse", Api.GEMINI,
         "/v1beta/models/other:streamGenerateContent?alt=sse"),
        ("/v1beta/models/other:streamGenerateContent", Api.GEMINI,
         "/v1beta/models/other:streamGenerateContent?alt=sse"),
        ("", Api.BEDROCK, "/model/gem-1/converse-stream"),
        ("/model/x.y-v1:0/converse-stream", Api.BEDROCK, "/model/x.y-v1:0/converse-stream"),
        ("", Api.OLLAMA, "/api/chat"),
        ("/api", Api.OLLAMA, "/api/chat"),
        ("/api/chat", Api.OLLAMA, "/api/chat"),
    ],
)  # fmt: skip
def test_a_base_url_gets_the_format_s_route_and_a_full_endpoint_is_kept(base: str, api: Api, target: str) -> None:
    assert endpoint_target(base, api, "gem-1") == target


def test_the_model_is_percent_encoded_into_the_path() -> None:
    model = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    assert endpoint_target("", Api.BEDROCK, model) == f"/model/{model.replace(':', '%3A')}/converse-stream"
    assert endpoint_target("", Api.GEMINI, "a/b") == "/v1beta/models/a%2Fb:streamGenerateContent?alt=sse"
