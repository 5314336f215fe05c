"""OpenAI chat completions (platform.openai.com/docs/api-reference/chat-streaming), as tokenpath reads and writes it.

- Frames (wire/openai.py): `choices[].delta.content` or `.tool_calls` is content, `reasoning_content` / `reasoning`
  is reasoning, `data: [DONE]` ends.
- The error before a head: `{"error": {message, type, param, code}}`, type `invalid_request_error` under 500, else
  `server_error` (platform.openai.com/docs/guides/error-codes).
- The error after the head: `event: error` with the same object; the openai SDK raises APIError on any data with an
  `error` member.
- The request: `messages`, `stream`, `user` (the stream id rides there too, for proxies that drop unknown headers),
  `max_tokens`; the key a bearer token.
"""

from __future__ import annotations

from typing import Any

from tokenpath.wire import openai
from tokenpath.wire.apispec import Api, ApiSpec, ErrorReply, Framing, Shape, StreamAsk, StreamFailure
from tokenpath.wire.formats.shared import compact_json, get_path, sse_event
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.sse import Frame


def classify(frame: Frame) -> FrameKind:
    return openai.classify(frame.data)


def recognises(shape: Shape) -> bool:
    if shape.data is not None and shape.data.strip() == b"[DONE]":
        return True
    return isinstance(shape.obj, dict) and "choices" in shape.obj


def content_text(obj: Any) -> object:
    return get_path(obj, "choices", 0, "delta", "content")


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error object, which OpenAI clients turn into a readable exception."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def openai_kind(status: int) -> str:
    return "invalid_request_error" if status < 500 else "server_error"


def error_reply(status: int, message: str, code: str | None) -> ErrorReply:
    return ErrorReply(status, compact_json(error_body(message, openai_kind(status), code)))


def error_frame(failure: StreamFailure, last: bytes) -> bytes:
    return sse_event(error_body(failure.message, "server_error", failure.code), b"error")


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


def stream_body(ask: StreamAsk) -> dict[str, Any]:
    return chat_body(model=ask.model, prompt=ask.prompt, max_tokens=ask.max_tokens, stream_id=ask.stream_id)


SPEC = ApiSpec(
    api=Api.OPENAI,
    framing=Framing.SSE,
    route="/v1/chat/completions",
    content_type="text/event-stream",
    display_name="OpenAI",
    otel_operation="chat",
    otel_provider="openai",
    classify=classify,
    recognises=recognises,
    content_text=content_text,
    error_reply=error_reply,
    error_frame=error_frame,
    stream_body=stream_body,
    # An SSE comment line: the WHATWG event-stream rules make every parser ignore it (the openai SDK's does;
    # OpenRouter sends `: OPENROUTER PROCESSING` the same way).
    keepalive=b": keep-alive\n\n",
)
