"""Anthropic Messages (docs.claude.com/en/docs/build-with-claude/streaming), as tokenpath reads and writes it.

- Frames: `message_start`, `content_block_start`, `content_block_delta`, `content_block_stop`, `message_delta`,
  `message_stop`, `ping`, and `event: error`; a `content_block_delta` whose delta is a `text_delta` (or a tool's
  `input_json_delta`) is content, a `thinking_delta` reasoning; no [DONE], message_stop ends. The token text is the
  delta's `text`.
- The error before a head: `{"type": "error", "error": {"type", "message"}}`, the type named by the status
  (docs.claude.com/en/api/errors).
- The error after the head: `event: error` with `{"type": "error", "error": {"type": "api_error", "message"}}`, "an
  error event ... e.g. overloaded_error" mid-stream (streaming#error-events); the anthropic SDK raises
  APIStatusError on `event: error`.
- The request: `max_tokens` is required, `metadata.user_id`, and the `anthropic-version` header; the key goes in
  `x-api-key` (docs.claude.com/en/api/overview).
"""

from __future__ import annotations

from typing import Any

from tokenpath.wire.apispec import Api, ApiSpec, ErrorReply, Framing, Shape, StreamAsk, StreamFailure
from tokenpath.wire.formats.shared import compact_json, get_path, json_type, json_value, sse_event, tagged
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.sse import Frame

VERSION = "2023-06-01"  # the Messages API version header every Anthropic request must carry
# Anthropic requires max_tokens; without --max-tokens this is sent (a limit, not a request for that many).
DEFAULT_MAX_TOKENS = 1024
EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    }
)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def classify(frame: Frame) -> FrameKind:
    if frame.data is None:
        return FrameKind.COMMENT
    if frame.event == b"error":
        return FrameKind.ERROR
    obj = json_value(frame.data)
    kind = json_type(obj)
    if kind not in EVENTS:
        return FrameKind.FOREIGN
    if kind == "error":
        return FrameKind.ERROR
    if kind == "message_stop":
        return FrameKind.DONE
    if kind == "content_block_delta":
        delta = obj.get("delta")
        delta_type = json_type(delta)
        if delta_type == "text_delta" and delta.get("text"):
            return FrameKind.CONTENT
        if delta_type == "input_json_delta" and delta.get("partial_json"):
            return FrameKind.CONTENT
        if delta_type == "thinking_delta" and delta.get("thinking"):
            return FrameKind.REASONING
    return FrameKind.CONTROL  # start/stop events, ping, message_delta, signature and citation deltas


def recognises(shape: Shape) -> bool:
    return isinstance(shape.obj, dict) and shape.name in EVENTS


def content_text(obj: Any) -> object:
    return get_path(obj, "delta", "text")


def error_reply(status: int, message: str, code: str | None) -> ErrorReply:
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return ErrorReply(status, compact_json({"type": "error", "error": {"type": kind, "message": message}}))


def error_frame(failure: StreamFailure, last: bytes) -> bytes:
    message = tagged(failure.message, failure.code)
    return sse_event({"type": "error", "error": {"type": "api_error", "message": message}}, b"error")


def stream_body(ask: StreamAsk) -> dict[str, Any]:
    return {
        "model": ask.model,
        "max_tokens": DEFAULT_MAX_TOKENS if ask.max_tokens is None else ask.max_tokens,
        "messages": [{"role": "user", "content": ask.prompt}],
        "stream": True,
        "metadata": {"user_id": ask.stream_id},
    }


SPEC = ApiSpec(
    api=Api.ANTHROPIC,
    framing=Framing.SSE,
    route="/v1/messages",
    content_type="text/event-stream",
    display_name="Anthropic",
    otel_operation="chat",
    otel_provider="anthropic",
    classify=classify,
    recognises=recognises,
    content_text=content_text,
    error_reply=error_reply,
    error_frame=error_frame,
    stream_body=stream_body,
    key_header="x-api-key",
    headers=(("anthropic-version", VERSION),),
    # The API's own: "Event streams may also include any number of ping events" (Anthropic's streaming docs), in the
    # shape it sends them; the anthropic SDK skips them.
    keepalive=b'event: ping\ndata: {"type": "ping"}\n\n',
)
