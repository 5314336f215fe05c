"""Anthropic Messages (`POST /v1/messages`): SSE events with `event:` names and no `[DONE]`.

As documented in "Streaming messages" (docs.claude.com/en/docs/build-with-claude/streaming, "Event types" and
"Basic streaming request"): `message_start` with an empty Message, then per content block `content_block_start`,
`content_block_delta` events (`text_delta`), `content_block_stop`, then `message_delta` (stop_reason, cumulative
output usage) and `message_stop`; `ping` events may come anywhere (the API sends one after the first block
starts; its data is written `{"type": "ping"}`, with the space, as the API writes it). Errors:
`{"type": "error", "error": {"type": ..., "message": ...}}` (docs.claude.com/en/api/errors). Requests: `model`,
`messages`, `max_tokens` (required), `stream`, `metadata.user_id` (the stream id when no header names one).

message_start, content_block_start and ping leave with the head, as the API sends them before the first token;
the first content_block_delta is the first content. The keep-alive (--heartbeat-ms) is the same `ping` event, as
the API sends during a long silence, never an SSE comment.

With reasoning (extended thinking, "Streaming with extended thinking" on the same page): block 0 is a `thinking`
block of `thinking_delta`s, closed by a `signature_delta` and content_block_stop; the text is block 1. The
events that close the thinking block and open the text one leave with the first text delta.
"""

from __future__ import annotations

from typing import Any

from tokenpath.audit import stream_label
from tokenpath.errors import BadRequest
from tokenpath.serve.http import Request
from tokenpath.stub.config import Pacing
from tokenpath.stub.formats.base import (
    ApiFormat,
    Ask,
    Route,
    cached_render,
    compact_json,
    full_text,
    message_list,
    model_field,
    object_field,
    positive_int,
    stream_field,
    text_chars,
)
from tokenpath.stub.frames import (
    PLACEHOLDER_LABEL,
    StreamRequest,
    StreamShape,
    build_shape,
    extend_steps,
    padded,
    reasoning_text,
    token_bytes,
    token_text,
)
from tokenpath.stub.loopshare import Steps
from tokenpath.wire.apis import Api

LEAD = 3  # message_start, content_block_start, ping
PING = b'event: ping\ndata: {"type": "ping"}\n\n'
SIGNATURE = "dG9rZW5wYXRoLXN0dWI="  # the thinking block's signature_delta (opaque base64 to clients)


class AnthropicFormat(ApiFormat):
    api = Api.ANTHROPIC
    max_tokens_field = "max_tokens"
    # The API's own keep-alive: a `ping` event ("Event types": "Event streams may also include any number of ping
    # events"), which the SDKs read and skip; a reader counts it as a frame without content (wire/formats/).
    heartbeat = PING

    def parse(self, body: dict[str, Any], request: Request, route: Route, default_model: str) -> Ask:
        messages = message_list(body, "messages")
        if "max_tokens" not in body:
            raise BadRequest("'max_tokens' is required")
        limit = positive_int(body["max_tokens"], "max_tokens")
        object_field(body, "metadata")  # checked here; its user_id is read only when no header names the stream
        return Ask(
            model=model_field(body, default_model),
            stream=stream_field(body, False),
            max_tokens=limit,
            prompt_chars=sum(text_chars(m.get("content")) for m in messages) + text_chars(body.get("system")),
        )

    def body_stream_id(self, body: dict[str, Any], route: Route) -> str | None:
        user = object_field(body, "metadata").get("user_id")
        return user if isinstance(user, str) and user else None

    def shape_steps(self, req: StreamRequest, pacing: Pacing) -> Steps[StreamShape]:
        return cached_render((self.name, req.model, req.tokens, req.prompt_tokens, req.truncated), req, pacing, render)

    def whole(self, req: StreamRequest) -> bytes:
        message = _message(req, stream_label(req.stream_id))
        message.update(content=[{"type": "text", "text": full_text(req.tokens)}], stop_reason=_stop(req))
        message["usage"] = {"input_tokens": req.prompt_tokens, "output_tokens": req.tokens}
        return compact_json(message)


def render(
    req: StreamRequest, frame_bytes: int | None, reasoning: int = 0, first_event_bytes: int | None = None
) -> Steps[StreamShape]:
    """Every event of one answer: LEAD events, `reasoning` thinking deltas (and the three events that close the
    thinking block and open the text one), one content_block_delta per token, then the three that end it."""
    start = _message(req, PLACEHOLDER_LABEL)
    block = {"type": "thinking", "thinking": ""} if reasoning else {"type": "text", "text": ""}
    frames = [
        event("message_start", {"type": "message_start", "message": start}),
        event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        PING,
    ]
    with_next: set[int] = set()
    text_index = 0
    if reasoning:
        yield from extend_steps(
            frames,
            (
                padded(
                    _delta_event,
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": t}},
                    frame_bytes,
                    "pad",
                )
                for t in map(reasoning_text, range(reasoning))
            ),
            req.max_bytes,
        )
        signature = {"type": "signature_delta", "signature": SIGNATURE}
        text_start = {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}
        with_next.update(range(len(frames), len(frames) + 3))
        frames += [
            event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": signature}),
            event("content_block_stop", {"type": "content_block_stop", "index": 0}),
            event("content_block_start", text_start),
        ]
        text_index = 1
    first_content = len(frames)
    yield from extend_steps(
        frames,
        (
            padded(
                _delta_event,
                {
                    "type": "content_block_delta",
                    "index": text_index,
                    "delta": {"type": "text_delta", "text": token_text(i)},
                },
                token_bytes(i, frame_bytes, first_event_bytes),
                "pad",
            )
            for i in range(req.tokens)
        ),
        req.max_bytes,
    )
    delta = {"stop_reason": _stop(req), "stop_sequence": None}
    frames += [
        event("content_block_stop", {"type": "content_block_stop", "index": text_index}),
        event("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": req.tokens}}),
        event("message_stop", {"type": "message_stop"}),
    ]
    return (
        yield from build_shape(
            frames,
            lead=LEAD,
            first_content=first_content,
            relabel=True,
            reasoning=range(LEAD, LEAD + reasoning),
            with_next=frozenset(with_next),
        )
    )


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + compact_json(data) + b"\n\n"


def _delta_event(data: dict[str, Any]) -> bytes:
    return event("content_block_delta", data)


def _message(req: StreamRequest, label: str) -> dict[str, Any]:
    """The Message object as message_start carries it: no content yet, output_tokens 1 (as the API reports)."""
    return {
        "id": f"msg_{label}",
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": req.prompt_tokens, "output_tokens": 1},
    }


def _stop(req: StreamRequest) -> str:
    return "max_tokens" if req.truncated else "end_turn"
