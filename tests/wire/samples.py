"""One stream of each API format, shaped as its provider documents it (wire/formats/ cites each): a reasoning
delta before the first content, the events around it, and the format's end. `STREAMS[api]` is (the body's bytes,
the kind of each frame in order); the wire and probe tests share them."""

from __future__ import annotations

import json
from typing import Any

from tokenpath.wire.apis import Api
from tokenpath.wire.eventstream import encode_message, event_message, exception_message
from tokenpath.wire.kinds import FrameKind

C, R, X, D, E = FrameKind.CONTROL, FrameKind.REASONING, FrameKind.CONTENT, FrameKind.DONE, FrameKind.ERROR


def js(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def sse(obj: Any, event: str | None = None, eol: bytes = b"\n") -> bytes:
    head = b"event: " + event.encode() + eol if event else b""
    return head + b"data: " + js(obj) + eol + eol


def _openai() -> tuple[bytes, list[FrameKind]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    body = (
        chunk({"role": "assistant", "content": ""})
        + chunk({"reasoning_content": "Let me think."})
        + chunk({"content": "Hello"})
        + chunk({}, "stop")
        + b"data: [DONE]\n\n"
    )
    return body, [C, R, X, C, D]


def _responses() -> tuple[bytes, list[FrameKind]]:
    events: list[tuple[dict[str, Any], FrameKind]] = [
        ({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}, C),
        ({"type": "response.in_progress", "response": {"id": "resp_1", "status": "in_progress"}}, C),
        ({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning"}}, C),
        ({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "Thinking"}, R),
        ({"type": "response.output_item.added", "output_index": 1, "item": {"type": "message"}}, C),
        ({"type": "response.content_part.added", "item_id": "msg_1", "part": {"type": "output_text"}}, C),
        ({"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hello"}, X),
        ({"type": "response.output_text.done", "item_id": "msg_1", "text": "Hello"}, C),
        ({"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}, D),
    ]
    body = b"".join(sse({**obj, "sequence_number": i}, obj["type"]) for i, (obj, _) in enumerate(events))
    return body, [kind for _, kind in events]


def _realtime() -> tuple[bytes, list[FrameKind]]:
    """As probe/wsstream.py re-frames the session's messages: each its type as the event name."""
    where = {"response_id": "resp_1", "item_id": "item_1", "output_index": 0, "content_index": 0}
    events: list[tuple[dict[str, Any], FrameKind]] = [
        ({"type": "session.created", "session": {"id": "sess_1"}}, C),
        ({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}, C),
        ({"type": "response.content_part.added", **where, "part": {"type": "text", "text": ""}}, C),
        ({"type": "response.output_text.delta", **where, "delta": "Hello"}, X),
        ({"type": "response.output_text.done", **where, "text": "Hello"}, C),
        ({"type": "response.done", "response": {"id": "resp_1", "status": "completed"}}, D),
    ]
    body = b"".join(sse({"event_id": f"event_{i}", **obj}, obj["type"]) for i, (obj, _) in enumerate(events))
    return body, [kind for _, kind in events]


def _anthropic() -> tuple[bytes, list[FrameKind]]:
    events: list[tuple[dict[str, Any], FrameKind]] = [
        ({"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": []}}, C),
        ({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}, C),
        ({"type": "ping"}, C),
        ({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hm."}}, R),
        ({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "x"}}, C),
        ({"type": "content_block_stop", "index": 0}, C),
        ({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}, C),
        ({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello"}}, X),
        ({"type": "content_block_stop", "index": 1}, C),
        ({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}, C),
        ({"type": "message_stop"}, D),
    ]
    return b"".join(sse(obj, obj["type"]) for obj, _ in events), [kind for _, kind in events]


def _gemini() -> tuple[bytes, list[FrameKind]]:
    def response(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return {"candidates": [candidate], "usageMetadata": {"promptTokenCount": 4}, "modelVersion": "m"}

    frames = [
        response([{"text": "Considering", "thought": True}]),
        response([{"text": "Hello"}]),
        response([{"text": ""}], "STOP"),
    ]
    return b"".join(sse(f, eol=b"\r\n") for f in frames), [R, X, C]  # Google's SSE ends lines with CRLF


def _bedrock() -> tuple[bytes, list[FrameKind]]:
    events: list[tuple[str, dict[str, Any], FrameKind]] = [
        ("messageStart", {"role": "assistant"}, C),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Hm."}}}, R),
        ("contentBlockStop", {"contentBlockIndex": 0}, C),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "Hello"}, "p": "abcd"}, X),
        ("contentBlockStop", {"contentBlockIndex": 1}, C),
        ("messageStop", {"stopReason": "end_turn"}, D),
        ("metadata", {"usage": {"inputTokens": 4, "outputTokens": 2, "totalTokens": 6}}, C),
    ]
    return b"".join(event_message(name, js(obj)) for name, obj, _ in events), [kind for *_, kind in events]


def _ollama() -> tuple[bytes, list[FrameKind]]:
    def line(message: dict[str, Any], done: bool = False) -> bytes:
        obj = {"model": "m", "created_at": "2025-01-01T00:00:00Z", "message": {"role": "assistant", **message}}
        return js({**obj, "done": done}) + b"\n"

    body = line({"content": "", "thinking": "Hm."}) + line({"content": "Hello"}) + line({"content": ""}, done=True)
    return body, [R, X, D]


STREAMS: dict[Api, tuple[bytes, list[FrameKind]]] = {
    Api.OPENAI: _openai(),
    Api.RESPONSES: _responses(),
    Api.REALTIME: _realtime(),
    Api.ANTHROPIC: _anthropic(),
    Api.GEMINI: _gemini(),
    Api.BEDROCK: _bedrock(),
    Api.OLLAMA: _ollama(),
}

# An error in each format's own shape, as one frame.
ERRORS: dict[Api, list[bytes]] = {
    Api.OPENAI: [sse({"error": {"message": "boom", "type": "server_error"}})],
    Api.RESPONSES: [
        sse(
            {"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error"}}},
            "response.failed",
        ),
        sse({"type": "error", "code": "ERR_SOMETHING", "message": "boom", "sequence_number": 1}, "error"),
    ],
    Api.REALTIME: [
        sse({"type": "error", "event_id": "e1", "error": {"type": "server_error", "message": "boom"}}, "error"),
        sse({"type": "response.done", "event_id": "e2", "response": {"status": "failed"}}, "response.done"),
    ],
    Api.ANTHROPIC: [sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error")],
    Api.GEMINI: [sse({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}})],
    Api.BEDROCK: [
        exception_message("throttlingException", js({"message": "Too many requests"})),
        encode_message({":message-type": "error", ":error-code": "InternalFailure", ":error-message": "boom"}, b""),
    ],
    Api.OLLAMA: [js({"error": "model 'm' not found"}) + b"\n"],
}
