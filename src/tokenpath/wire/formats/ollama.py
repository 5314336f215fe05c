"""Ollama `/api/chat` (docs.ollama.com/api/streaming, github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-
completion), as tokenpath reads and writes it.

- Frames (wire/ndjson.py): each line `{"model", "created_at", "message": {"role", "content", "thinking"?,
  "tool_calls"?}, "done"}`; `message.content` is content (and the token text), `message.thinking` reasoning,
  `"done": true` ends, whatever else the line carries.
- The error before a head: `{"error": "..."}` (docs.ollama.com/api/errors).
- The error after the head: a line of the same shape: "If an error occurs mid-stream, the error will be returned as
  an object in the application/x-ndjson format with an error property".
- The request: `messages`, `stream: true`, `options.num_predict`; a key (Ollama's cloud) is a bearer token. The
  OpenTelemetry conventions have no provider name for it: a custom value, as they allow.
"""

from __future__ import annotations

import json
from typing import Any

from tokenpath.wire.apispec import Api, ApiSpec, ErrorReply, Framing, Shape, StreamAsk, StreamFailure
from tokenpath.wire.formats.shared import compact_json, get_path, json_value, tagged
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.ndjson import JsonLine


def classify(line: JsonLine) -> FrameKind:
    obj = json_value(line.data)
    if not isinstance(obj, dict):
        return FrameKind.FOREIGN
    if "error" in obj:
        return FrameKind.ERROR
    message = obj.get("message")
    if not isinstance(message, dict):
        return FrameKind.FOREIGN  # /api/generate's lines carry `response`, not `message`
    if message.get("content") or message.get("tool_calls"):
        return FrameKind.CONTENT
    if message.get("thinking"):
        return FrameKind.REASONING
    if obj.get("done") is True:
        return FrameKind.DONE
    return FrameKind.CONTROL


def done(line: JsonLine) -> bool:
    """Ollama's last line says `"done": true`, whatever else it carries."""
    obj = json_value(line.data)
    return isinstance(obj, dict) and obj.get("done") is True


def recognises(shape: Shape) -> bool:
    return isinstance(shape.obj, dict) and isinstance(shape.obj.get("message"), dict) and "done" in shape.obj


def content_text(obj: Any) -> object:
    return get_path(obj, "message", "content")


def error_reply(status: int, message: str, code: str | None) -> ErrorReply:
    return ErrorReply(status, compact_json({"error": message}))


def error_frame(failure: StreamFailure, last: bytes) -> bytes:
    return json.dumps({"error": tagged(failure.message, failure.code)}).encode() + b"\n"


def stream_body(ask: StreamAsk) -> dict[str, Any]:
    body: dict[str, Any] = {"model": ask.model, "messages": [{"role": "user", "content": ask.prompt}], "stream": True}
    if ask.max_tokens is not None:
        body["options"] = {"num_predict": ask.max_tokens}
    return body


SPEC = ApiSpec(
    api=Api.OLLAMA,
    framing=Framing.NDJSON,
    route="/api/chat",
    content_type="application/x-ndjson",
    display_name="Ollama",
    otel_operation="chat",
    otel_provider="ollama",
    classify=classify,
    recognises=recognises,
    content_text=content_text,
    error_reply=error_reply,
    error_frame=error_frame,
    stream_body=stream_body,
    ends_also=done,
    # None: NDJSON has no comment, Ollama sends none, and its clients parse every line as JSON (an empty one fails).
    keepalive=None,
)
