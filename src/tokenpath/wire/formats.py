"""What each frame of each streaming API format is (FrameKind): where the first content and the first reasoning
are, what ends a stream, what is an error. One function per format; `recognise` names the format a frame of
another one belongs to, so a stream read with the wrong --api says which one to pass.

Each format as its provider documents it:

- OpenAI chat (wire/openai.py): `choices[].delta.content` or `.tool_calls` is content, `reasoning_content` /
  `reasoning` is reasoning, `data: [DONE]` ends (platform.openai.com/docs/api-reference/chat-streaming).
- OpenAI Responses: SSE events named by `type` with a `sequence_number`; `response.output_text.delta` (and, as
  chat's tool-call deltas and refusals count, `response.function_call_arguments.delta` and
  `response.refusal.delta`) are content, `response.reasoning_text.delta` / `response.reasoning_summary_text.delta`
  reasoning; `response.completed` / `response.incomplete` end, `response.failed` and `error` are errors
  (platform.openai.com/docs/api-reference/responses-streaming).
- Anthropic Messages: `message_start`, `content_block_start`, `content_block_delta`, `content_block_stop`,
  `message_delta`, `message_stop`, `ping`, and `event: error`; a `content_block_delta` whose delta is a
  `text_delta` (or a tool's `input_json_delta`) is content, a `thinking_delta` reasoning; no [DONE], message_stop
  ends (docs.claude.com/en/docs/build-with-claude/streaming).
- Gemini `streamGenerateContent?alt=sse`: each event's data is a whole GenerateContentResponse; content is the first
  candidate part with `text` (or a `functionCall`), a part with `"thought": true` is reasoning; the stream ends
  at EOF; an error is `{"error": {code, message, status}}` (ai.google.dev/api/generate-content,
  ai.google.dev/gemini-api/docs/thinking).
- Bedrock ConverseStream (wire/eventstream.py): `:message-type` event with `:event-type` messageStart,
  contentBlockStart, contentBlockDelta, contentBlockStop, messageStop, metadata; the payload is the event's JSON;
  a contentBlockDelta's `delta.text` / `delta.toolUse` is content, `delta.reasoningContent` reasoning;
  `:message-type` exception (throttlingException, modelStreamErrorException, ...) or error is an error
  (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStreamOutput.html,
  API_runtime_ContentBlockDelta.html).
- Ollama `/api/chat` (wire/ndjson.py): each line `{"model", "created_at", "message": {"role", "content",
  "thinking"?, "tool_calls"?}, "done"}`; `message.content` is content, `message.thinking` reasoning, `"done": true`
  ends; an error mid-stream is a line `{"error": "..."}` (docs.ollama.com/api/streaming,
  github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-completion).

A delta that is present but empty carries nothing: CONTROL, as an empty OpenAI delta is.
"""

from __future__ import annotations

import json
from typing import Any

from tokenpath.wire import openai
from tokenpath.wire.apis import Api
from tokenpath.wire.eventstream import EventMessage
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.ndjson import JsonLine
from tokenpath.wire.sse import Frame

RESPONSES_CONTENT = frozenset(
    {"response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta"}
)
RESPONSES_REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
RESPONSES_DONE = frozenset({"response.completed", "response.incomplete"})
RESPONSES_ERROR = frozenset({"response.failed", "error"})
ANTHROPIC_EVENTS = frozenset(
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
BEDROCK_EVENTS = frozenset(
    {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
)


def _json(data: bytes | None) -> Any:
    """The JSON value of a frame's data, or None when it is not JSON (or too deep to parse)."""
    if not data:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _type(obj: Any) -> str | None:
    kind = obj.get("type") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) else None


# --- SSE formats --------------------------------------------------------------------------------------------------


def classify_openai(frame: Frame) -> FrameKind:
    return openai.classify(frame.data)


def classify_responses(frame: Frame) -> FrameKind:
    if frame.data is None:
        return FrameKind.COMMENT
    obj = _json(frame.data)
    kind = _type(obj) or (frame.event.decode("utf-8", "replace") if frame.event else None)
    delta = obj.get("delta") if isinstance(obj, dict) else None
    if kind in RESPONSES_CONTENT:
        return FrameKind.CONTENT if delta else FrameKind.CONTROL
    if kind in RESPONSES_REASONING:
        return FrameKind.REASONING if delta else FrameKind.CONTROL
    if kind in RESPONSES_DONE or frame.data.strip() == b"[DONE]":
        return FrameKind.DONE
    if kind in RESPONSES_ERROR:
        return FrameKind.ERROR
    if kind is not None and kind.startswith("response."):
        return FrameKind.CONTROL  # created, in_progress, output_item.added, content_part.done, ...
    return FrameKind.FOREIGN


def classify_anthropic(frame: Frame) -> FrameKind:
    if frame.data is None:
        return FrameKind.COMMENT
    if frame.event == b"error":
        return FrameKind.ERROR
    obj = _json(frame.data)
    kind = _type(obj)
    if kind not in ANTHROPIC_EVENTS:
        return FrameKind.FOREIGN
    if kind == "error":
        return FrameKind.ERROR
    if kind == "message_stop":
        return FrameKind.DONE
    if kind == "content_block_delta":
        delta = obj.get("delta")
        delta_type = _type(delta)
        if delta_type == "text_delta" and delta.get("text"):
            return FrameKind.CONTENT
        if delta_type == "input_json_delta" and delta.get("partial_json"):
            return FrameKind.CONTENT
        if delta_type == "thinking_delta" and delta.get("thinking"):
            return FrameKind.REASONING
    return FrameKind.CONTROL  # start/stop events, ping, message_delta, signature and citation deltas


def classify_gemini(frame: Frame) -> FrameKind:
    if frame.data is None:
        return FrameKind.COMMENT
    obj = _json(frame.data)
    if not isinstance(obj, dict):
        return FrameKind.FOREIGN
    if "error" in obj:
        return FrameKind.ERROR
    if not {"candidates", "usageMetadata", "promptFeedback"} & obj.keys():
        return FrameKind.FOREIGN
    kind = FrameKind.CONTROL
    candidates = obj.get("candidates")
    for candidate in candidates if isinstance(candidates, list) else ():
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict):
                continue
            if part.get("thought") is True:
                if part.get("text"):
                    kind = FrameKind.REASONING  # unless a later part carries content
            elif part.get("text") or part.get("functionCall"):
                return FrameKind.CONTENT
    return kind


def gemini_finished(frame: Frame) -> bool:
    """Gemini has no end event: the stream's last GenerateContentResponse names a candidate's `finishReason`
    (ai.google.dev/api/generate-content#FinishReason); a stream that stops before one did not finish."""
    obj = _json(frame.data)
    candidates = obj.get("candidates") if isinstance(obj, dict) else None
    return any(isinstance(c, dict) and c.get("finishReason") for c in candidates or () if isinstance(candidates, list))


# --- Bedrock (event stream) and Ollama (NDJSON) ----------------------------------------------------------------


def classify_bedrock(message: EventMessage) -> FrameKind:
    message_type = message.header(":message-type")
    if message_type in ("exception", "error"):
        return FrameKind.ERROR
    event_type = message.header(":event-type")
    if message_type != "event" or event_type not in BEDROCK_EVENTS:
        return FrameKind.FOREIGN  # e.g. InvokeModelWithResponseStream's `chunk` events: another Bedrock API
    if event_type == "messageStop":
        return FrameKind.DONE
    if event_type == "contentBlockDelta":
        obj = _json(message.payload)
        delta = obj.get("delta") if isinstance(obj, dict) else None
        if isinstance(delta, dict):
            if delta.get("text") or delta.get("toolUse"):
                return FrameKind.CONTENT
            if delta.get("reasoningContent"):
                return FrameKind.REASONING
    return FrameKind.CONTROL


def classify_ollama(line: JsonLine) -> FrameKind:
    obj = _json(line.data)
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


def ollama_done(line: JsonLine) -> bool:
    """Ollama's last line says `"done": true`, whatever else it carries."""
    obj = _json(line.data)
    return isinstance(obj, dict) and obj.get("done") is True


# --- which format a frame belongs to ---------------------------------------------------------------------------


def recognise(data: bytes | None, event: bytes | None = None) -> Api | None:
    """The API format a JSON frame (an SSE event's data, or an NDJSON line) is in, when its shape says so."""
    if data is not None and data.strip() == b"[DONE]":
        return Api.OPENAI
    obj = _json(data)
    if not isinstance(obj, dict):
        return None
    kind = _type(obj) or (event.decode("utf-8", "replace") if event else "")
    if "choices" in obj:
        return Api.OPENAI
    if kind.startswith("response."):
        return Api.RESPONSES
    if kind in ANTHROPIC_EVENTS:
        return Api.ANTHROPIC
    if {"candidates", "usageMetadata", "promptFeedback"} & obj.keys():
        return Api.GEMINI
    if isinstance(obj.get("message"), dict) and "done" in obj:
        return Api.OLLAMA
    return None


def hint(data: bytes | None, event: bytes | None = None) -> str:
    """What a foreign frame calls itself, for a note: its `event:` name, its JSON "type", or its first keys."""
    if event:
        return "event: " + event.decode("utf-8", "replace")[:64]
    obj = _json(data)
    kind = _type(obj)
    if kind is not None:
        return f'"type": {kind[:64]}'
    if isinstance(obj, dict):
        return "JSON with keys " + ", ".join(list(obj)[:4])[:80]
    return "not JSON"
