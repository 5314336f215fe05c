"""OpenAI Realtime API, text only, as tokenpath reads and writes it: WebSocket only (`GET /v1/realtime?model=...` with
`Upgrade: websocket`), one JSON event per text message, each with its `type` and a server `event_id`.

Sources (GA event names; the beta's `response.text.delta` became `response.output_text.delta`): the API reference's
server and client events (platform.openai.com/docs/api-reference/realtime-server-events, -client-events) and the
openai-python 3.63 SDK's types (openai/types/realtime/: SessionCreatedEvent, ResponseTextDeltaEvent `{event_id,
type, response_id, item_id, output_index, content_index, delta}`, ResponseDoneEvent `{event_id, type, response}`
"always emitted, no matter the final state": completed / incomplete / cancelled / failed, RealtimeErrorEvent
`{event_id, type: error, error: {type, code, message, param, event_id}}`); its `realtime.connect()`
(resources/realtime/realtime.py) builds the URL as base_url + `/realtime?model=`. The OpenAPI document (2.3.0, as
docs.rs/openai-client-base renders it: RealtimeServerEventResponseDone, "always emitted, no matter the final state")
agrees; so does the `error` payload clients log for a second response.create (openai/openai-agents-python#1466).

- Frames: the session's events, read as SSE events named by their type (probe/wsstream.py re-frames each message).
  Content: `response.output_text.delta` (and `response.output_audio_transcript.delta`, the text of a spoken answer,
  `response.function_call_arguments.delta`, as tool-call deltas count elsewhere, and the beta's `response.text.delta`
  / `response.audio_transcript.delta`); the end: `response.done`
  (status completed or incomplete; cancelled or failed is an error); `error` an error. Every other known event
  (`session.*`, `conversation.*`, `response.*`, `rate_limits.updated`, `input_audio_buffer.*`) is control.
- The error before a WebSocket: OpenAI's (wire/formats/openai.py).
- The request: the client's `conversation.item.create` (a user message with one `input_text`) and `response.create`
  (its `response` object: `max_output_tokens`, `metadata`, ...); the key a bearer token.
"""

from __future__ import annotations

from typing import Any

from tokenpath.wire.apispec import Api, ApiSpec, Framing, Shape, StreamAsk, StreamFailure
from tokenpath.wire.formats import openai
from tokenpath.wire.formats.shared import event_name, get_path, json_type, json_value, sse_event
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.sse import Frame

CONTENT = frozenset(
    {
        "response.output_text.delta",
        "response.output_audio_transcript.delta",
        "response.function_call_arguments.delta",
        # The beta's names (a server still speaking it, `OpenAI-Beta: realtime=v1`): the same content, read as such.
        "response.text.delta",
        "response.audio_transcript.delta",
    }
)
TEXT_DELTAS = frozenset({"response.output_text.delta", "response.text.delta"})
DONE = "response.done"
ENDED_WELL = frozenset({"completed", "incomplete"})  # response.done's status; cancelled / failed say it broke
ERROR = "error"
CONTROL_PREFIXES = ("session.", "conversation.", "response.", "input_audio_buffer.", "output_audio_buffer.")
# Events only this API sends (Responses shares the `response.` prefix): what recognises a stray frame as Realtime's.
OWN = frozenset({"session.created", "session.updated", "conversation.item.added", "conversation.item.done", DONE})


def classify(frame: Frame) -> FrameKind:
    if frame.data is None:
        return FrameKind.COMMENT
    obj = json_value(frame.data)
    kind = json_type(obj) or event_name(frame)
    if kind in CONTENT:
        return FrameKind.CONTENT if get_path(obj, "delta") else FrameKind.CONTROL
    if kind == DONE:
        return FrameKind.DONE if get_path(obj, "response", "status") in ENDED_WELL else FrameKind.ERROR
    if kind == ERROR:
        return FrameKind.ERROR
    if kind is not None and (kind.startswith(CONTROL_PREFIXES) or kind == "rate_limits.updated"):
        return FrameKind.CONTROL
    return FrameKind.FOREIGN


def recognises(shape: Shape) -> bool:
    return isinstance(shape.obj, dict) and shape.name in OWN and "event_id" in shape.obj


def content_text(obj: Any) -> object:
    return get_path(obj, "delta") if get_path(obj, "type") in TEXT_DELTAS else None


def error_event(code: str | None, message: str, event_id: str, client_event_id: str | None = None) -> dict[str, Any]:
    """The `error` event: the session stays open after it (most errors are recoverable, the API reference says)."""
    error = {"type": "invalid_request_error", "code": code, "message": message, "param": None}
    return {"type": ERROR, "event_id": event_id, "error": {**error, "event_id": client_event_id}}


def error_frame(failure: StreamFailure, last: bytes) -> bytes:
    event = error_event(failure.code, failure.message, "event_tokenpath_error")
    event["error"]["type"] = "server_error"
    return sse_event(event, b"error")


def stream_body(ask: StreamAsk) -> dict[str, Any]:
    """What ws_request turns into the two client events: the text, and the `response` object's fields."""
    body: dict[str, Any] = {"input": ask.prompt, "metadata": {"user": ask.stream_id}}
    if ask.max_tokens is not None:
        body["max_output_tokens"] = ask.max_tokens
    return body


def ws_request(body: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """A user message with the body's `input`, then `response.create` with the rest (the model is the URL's)."""
    text = body.get("input", "")
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    response = {k: v for k, v in body.items() if k not in ("input", "model", "stream")}
    return {"type": "conversation.item.create", "item": item}, {"type": "response.create", "response": response}


SPEC = ApiSpec(
    api=Api.REALTIME,
    framing=Framing.SSE,  # the messages, re-framed as SSE events by whoever reads them
    route="/v1/realtime?model={model}",
    content_type="text/event-stream",  # no HTTP stream: what its events are read as
    display_name="Realtime API",
    otel_operation="chat",
    otel_provider="openai",
    classify=classify,
    recognises=recognises,
    content_text=content_text,
    error_reply=openai.error_reply,
    error_frame=error_frame,
    stream_body=stream_body,
    websocket=True,
    websocket_only=True,
    ws_request=ws_request,
    ws_session_events=("session.", "conversation.", "rate_limits.", "input_audio_buffer."),
)
