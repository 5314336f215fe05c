"""OpenAI Responses API (platform.openai.com/docs/api-reference/responses-streaming), as tokenpath reads and writes
it.

- Frames: SSE events named by `type` with a `sequence_number`; `response.output_text.delta` (and, as chat's tool-call
  deltas and refusals count, `response.function_call_arguments.delta` and `response.refusal.delta`) are content,
  `response.reasoning_text.delta` / `response.reasoning_summary_text.delta` reasoning; `response.completed` /
  `response.incomplete` end, `response.failed` and `error` are errors. A `keepalive` event (`{"type": "keepalive",
  "sequence_number"}`), which servers of this format are reported to send during a long silence (none of the
  openai-python 3.63 event types names it), is read as control should one come: no content, never TTFT. The
  token text is an output_text delta's `delta`.
- The error before a head: OpenAI's (wire/formats/openai.py).
- The error after the head: the `error` event, `{"type": "error", "code", "message", "param", "sequence_number"}`
  (responses-streaming/error; ResponseErrorEvent in the SDKs); its sequence number follows the last one relayed.
- The request: `input`, `stream`, `user`, `max_output_tokens`; the key a bearer token.
"""

from __future__ import annotations

import re
from typing import Any

from tokenpath.wire.apispec import Api, ApiSpec, Framing, Shape, StreamAsk, StreamFailure
from tokenpath.wire.formats import openai
from tokenpath.wire.formats.shared import event_name, get_path, json_type, json_value, sse_event
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.sse import Frame

CONTENT = frozenset({"response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta"})
REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
DONE = frozenset({"response.completed", "response.incomplete"})
ERROR = frozenset({"response.failed", "error"})
KEEPALIVE = "keepalive"  # a keep-alive event during a silence: data, but no content
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


def classify(frame: Frame) -> FrameKind:
    if frame.data is None:
        return FrameKind.COMMENT
    obj = json_value(frame.data)
    kind = json_type(obj) or event_name(frame)
    delta = obj.get("delta") if isinstance(obj, dict) else None
    if kind in CONTENT:
        return FrameKind.CONTENT if delta else FrameKind.CONTROL
    if kind in REASONING:
        return FrameKind.REASONING if delta else FrameKind.CONTROL
    if kind in DONE or frame.data.strip() == b"[DONE]":
        return FrameKind.DONE
    if kind in ERROR:
        return FrameKind.ERROR
    if kind == KEEPALIVE or (kind is not None and kind.startswith("response.")):
        return FrameKind.CONTROL  # created, in_progress, output_item.added, content_part.done, ...
    return FrameKind.FOREIGN


def recognises(shape: Shape) -> bool:
    return isinstance(shape.obj, dict) and shape.name.startswith("response.")


def content_text(obj: Any) -> object:
    return get_path(obj, "delta") if get_path(obj, "type") == "response.output_text.delta" else None


def error_frame(failure: StreamFailure, last: bytes) -> bytes:
    numbers = _SEQUENCE.findall(last)
    sequence = int(numbers[-1]) + 1 if numbers else 0
    event = {
        "type": "error",
        "code": failure.code,
        "message": failure.message,
        "param": None,
        "sequence_number": sequence,
    }
    return sse_event(event, b"error")


def ws_request(body: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The WebSocket mode's one client event: `response.create` with the POST body's fields, `stream` implied (OpenAI:
    "should not be sent")."""
    return ({"type": "response.create", **{k: v for k, v in body.items() if k != "stream"}},)


def stream_body(ask: StreamAsk) -> dict[str, Any]:
    body: dict[str, Any] = {"model": ask.model, "input": ask.prompt, "stream": True, "user": ask.stream_id}
    if ask.max_tokens is not None:
        body["max_output_tokens"] = ask.max_tokens
    return body


SPEC = ApiSpec(
    api=Api.RESPONSES,
    framing=Framing.SSE,
    route="/v1/responses",
    content_type="text/event-stream",
    display_name="Responses API",
    otel_operation="chat",
    otel_provider="openai",
    classify=classify,
    recognises=recognises,
    content_text=content_text,
    error_reply=openai.error_reply,
    error_frame=error_frame,
    stream_body=stream_body,
    # An SSE comment line, which the openai SDK's parser skips for Responses as for chat.
    keepalive=b": keep-alive\n\n",
    # developers.openai.com/api/reference/resources/responses/websocket-events: `response.create` carries the POST
    # body's top-level fields (stream implied, background refused); the server events are the SSE stream's.
    websocket=True,
    ws_request=ws_request,
)
