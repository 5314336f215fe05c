"""Builds HTTP/1.1 requests by hand, so the probe knows exactly which bytes it wrote and when: the smallest valid
streaming request of each API format (wire/apis.py), on that format's route.

Each body as its provider documents it: OpenAI chat (`messages`, `stream`, `user`), Responses (`input`, `stream`,
`user`, `max_output_tokens`), Anthropic Messages (`max_tokens` is required, `metadata.user_id`, and the
`anthropic-version` header), Gemini (`contents[].parts[].text`, `generationConfig.maxOutputTokens`; the model is in
the path), Bedrock Converse (`messages[].content[].text`, `inferenceConfig.maxTokens`; the modelId is in the path),
Ollama /api/chat (`messages`, `stream: true`, `options.num_predict`). The stream id rides in the
X-Tokenpath-Stream header always, and in the body where the format has a user field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote

from tokenpath.errors import UsageError
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.framing import request_head

STREAM_HEADER = "X-Tokenpath-Stream"
DEFAULT_PROMPT = "Count slowly from one to one hundred and say nothing else."
ANTHROPIC_VERSION = "2023-06-01"  # the Messages API version header every Anthropic request must carry
# Anthropic requires max_tokens; without --max-tokens this is sent (a limit, not a request for that many).
ANTHROPIC_DEFAULT_MAX_TOKENS = 1024


def chat_body(
    *, model: str, prompt: str, max_tokens: int | None, stream_id: str, stream: bool = True
) -> dict[str, Any]:
    """An OpenAI chat request. The stream id rides in `user` too, for proxies that drop unknown headers."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "stream": stream,
        "user": stream_id,
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def stream_body(api: Api, *, model: str, prompt: str, max_tokens: int | None, stream_id: str) -> dict[str, Any]:
    """The smallest valid streaming request body of `api`, with the stream id where the format has a user field."""
    if api is Api.OPENAI:
        return chat_body(model=model, prompt=prompt, max_tokens=max_tokens, stream_id=stream_id)
    body: dict[str, Any]
    if api is Api.RESPONSES:
        body = {"model": model, "input": prompt, "stream": True, "user": stream_id}
        if max_tokens is not None:
            body["max_output_tokens"] = max_tokens
    elif api is Api.ANTHROPIC:
        body = {
            "model": model,
            "max_tokens": ANTHROPIC_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "metadata": {"user_id": stream_id},
        }
    elif api is Api.GEMINI:
        body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
        if max_tokens is not None:
            body["generationConfig"] = {"maxOutputTokens": max_tokens}
    elif api is Api.BEDROCK:
        body = {"messages": [{"role": "user", "content": [{"text": prompt}]}]}
        if max_tokens is not None:
            body["inferenceConfig"] = {"maxTokens": max_tokens}
    else:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True}
        if max_tokens is not None:
            body["options"] = {"num_predict": max_tokens}
    return body


def api_headers(api: Api, stream_id: str, api_key: str | None) -> list[tuple[str, str]]:
    """The stream id header, the format's own required headers, and the API key where the format expects it
    (Anthropic `x-api-key`, Gemini `x-goog-api-key`, the rest a bearer token: Bedrock's API keys are bearer tokens;
    AWS SigV4 signing is not done here)."""
    headers = [(STREAM_HEADER, stream_id)]
    if api is Api.ANTHROPIC:
        headers.append(("anthropic-version", ANTHROPIC_VERSION))
    if api_key:
        if api is Api.ANTHROPIC:
            headers.append(("x-api-key", api_key))
        elif api is Api.GEMINI:
            headers.append(("x-goog-api-key", api_key))
        else:
            headers.append(("Authorization", f"Bearer {api_key}"))
    return headers


def endpoint_target(base: str, api: Api, model: str) -> str:
    """The request target for `api` from a base URL's path and query (`""`, `/v1`, `/v1beta`, a gateway's prefix)
    or a full endpoint path, which is kept: one that already ends as the format's route does (`/v1/messages`,
    `:streamGenerateContent`, `/converse-stream`, `/api/chat`). A base that ends with the route's first segment
    (`/v1`) does not get it twice. The model is percent-encoded into the path (Bedrock ids hold `:`), and the
    route's query (Gemini's `alt=sse`) joins the URL's own (an API `key=`)."""
    path, _, query = base.partition("?")
    path = path.rstrip("/")
    route = SPECS[api].route
    route_path, _, route_query = route.partition("?")
    ending = route_path.rsplit("/", 1)[-1].replace("{model}", "")  # "messages", ":streamGenerateContent", ...
    if not path.endswith(ending):
        first = "/" + route_path.split("/")[1]
        filled = route_path.replace("{model}", quote(model, safe=""))
        path += filled.removeprefix(first) if path.endswith(first) else filled
    have = {name for name, _ in parse_qsl(query, keep_blank_values=True)}
    extra = [pair for pair in route_query.split("&") if pair and pair.split("=", 1)[0] not in have]
    query = "&".join(q for q in (*extra, query) if q)
    return f"{path}?{query}" if query else path


def build_request(
    method: str,
    host: str,
    target: str,
    *,
    body: bytes = b"",
    headers: Iterable[tuple[str, str]] = (),
    keep_alive: bool = False,
) -> bytes:
    fields = [("Host", host)]
    names = set()
    for name, value in headers:
        check_header(name, value)
        names.add(name.lower())
        fields.append((name, value))
    if "connection" not in names:
        fields.append(("Connection", "keep-alive" if keep_alive else "close"))
    if body or method in ("POST", "PUT", "PATCH"):
        fields.append(("Content-Length", str(len(body))))
    return request_head(method, target, fields) + body


def build_json_request(
    host: str,
    target: str,
    payload: Mapping[str, Any],
    *,
    headers: Iterable[tuple[str, str]] = (),
    keep_alive: bool = False,
    accept: str = "text/event-stream",
) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode()
    all_headers = [("Content-Type", "application/json"), ("Accept", accept), *headers]
    return build_request("POST", host, target, body=body, headers=all_headers, keep_alive=keep_alive)


def check_header(name: str, value: str) -> None:
    if not name or any(c in name for c in " \t\r\n:"):
        raise UsageError(f"invalid header name {name!r}")
    if "\r" in value or "\n" in value:
        raise UsageError(f"header {name} has a line break in its value")


def parse_header_arg(arg: str) -> tuple[str, str]:
    """`NAME:VALUE` (as curl's -H takes it) → (name, value)."""
    name, sep, value = arg.partition(":")
    if not sep or not name.strip():
        raise UsageError(f"header {arg!r} is not NAME:VALUE")
    name, value = name.strip(), value.strip()
    check_header(name, value)
    return name, value
