"""The OpenAI Realtime API, text only (`GET /v1/realtime?model=...`, WebSocket only): one response's server events,
each a JSON event with its `type` and a unique `event_id` (wire/formats/realtime.py cites the shapes).

Per `response.create`: `response.created`, `response.output_item.added` (an assistant message) and
`response.content_part.added` (an empty text part) leave at once; one `response.output_text.delta` per token (the
first is the first content); then `response.output_text.done`, `response.content_part.done`,
`response.output_item.done` and `response.done` with the whole response and its usage (status incomplete,
status_details.reason max_output_tokens, when max_output_tokens ended it). The events are written as SSE events
(stub/websocket.py sends each one's data as a text message, as it does the Responses WebSocket mode's), so the shape
cache, the padding and the audit are every format's. The session's own events (session.created, the conversation's)
are stub/realtime.py's.
"""

from __future__ import annotations

from typing import Any

from tokenpath.audit import stream_label
from tokenpath.errors import BadRequest, UsageError
from tokenpath.serve.http import Request
from tokenpath.stub.config import Pacing
from tokenpath.stub.formats.base import (
    TEXT_SLOT,
    ApiFormat,
    Ask,
    Route,
    cached_render,
    compact_json,
    filled_steps,
    full_text,
    full_text_steps,
    model_field,
    object_field,
    positive_int,
)
from tokenpath.stub.frames import (
    PLACEHOLDER_LABEL,
    StreamRequest,
    StreamShape,
    build_shape,
    extend_steps,
    padded,
    token_bytes,
    token_text,
)
from tokenpath.stub.loopshare import Steps
from tokenpath.wire.apis import Api

LEAD = 3  # response.created, response.output_item.added, response.content_part.added


class RealtimeFormat(ApiFormat):
    api = Api.REALTIME
    max_tokens_field = "max_output_tokens"
    ws_dialect = "conversation"
    heartbeat = None  # a WebSocket is kept alive by pings, never by an event the client would have to skip
    no_heartbeat = "the Realtime API is WebSocket only: a session is kept alive by pings, not by keep-alive events"

    def routes(self) -> dict[str, str]:
        return {"/v1/realtime": self.api.value}

    def describe(self) -> str:
        return "GET /v1/realtime (WebSocket)"

    def parse(self, body: dict[str, Any], request: Request, route: Route, default_model: str) -> Ask:
        """`body`: the session's text so far (`input`) and the response.create's `response` object's fields."""
        given = body.get("input", "")
        if not isinstance(given, str):
            raise BadRequest("'input' must be the conversation's text")
        object_field(body, "metadata")
        return Ask(
            model=model_field(body, default_model),
            stream=True,
            max_tokens=positive_int(body.get("max_output_tokens"), "response.max_output_tokens"),
            prompt_chars=len(given),
        )

    def shape_steps(self, req: StreamRequest, pacing: Pacing) -> Steps[StreamShape]:
        if pacing.reasoning_tokens:
            raise UsageError("`reasoning_tokens`: the Realtime API streams no reasoning deltas")
        return (
            yield from cached_render(
                (self.name, req.model, req.tokens, req.prompt_tokens, req.truncated), req, pacing, render
            )
        )

    def whole(self, req: StreamRequest) -> bytes:
        """Never asked (a Realtime response always streams): the final response object."""
        return compact_json(
            _response(
                req,
                stream_label(req.stream_id),
                _status(req),
                [_item(stream_label(""), full_text(req.tokens), _status(req))],
            )
        )


def render(
    req: StreamRequest, frame_bytes: int | None, reasoning: int = 0, first_event_bytes: int | None = None
) -> Steps[StreamShape]:
    label = PLACEHOLDER_LABEL
    response_id = f"resp_{label}"
    where = {"response_id": response_id, "item_id": f"item_{label}", "output_index": 0, "content_index": 0}
    status = _status(req)
    text = yield from full_text_steps(req.tokens)
    # Each event encoded as it is made (responses.py says why).
    frames = [
        _frame(label, 0, {"type": "response.created", "response": _response(req, label, "in_progress", [])}),
        _frame(
            label,
            1,
            {
                "type": "response.output_item.added",
                "response_id": response_id,
                "output_index": 0,
                "item": _item(label, "", "in_progress"),
            },
        ),
        _frame(label, 2, {"type": "response.content_part.added", **where, "part": {"type": "text", "text": ""}}),
    ]
    first_content = len(frames)
    yield from extend_steps(
        frames,
        (
            _frame(
                label,
                first_content + i,
                {"type": "response.output_text.delta", **where, "delta": token_text(i)},
                token_bytes(i, frame_bytes, first_event_bytes),
            )
            for i in range(req.tokens)
        ),
        req.max_bytes,
    )
    # Each closing event holds the whole text: encoded with a slot, the text put in in steps (base.filled_steps).
    slot = TEXT_SLOT if text else ""
    done_item = _item(label, slot, status)
    closing: list[dict[str, Any]] = [
        {"type": "response.output_text.done", **where, "text": slot},
        {"type": "response.content_part.done", **where, "part": {"type": "text", "text": slot}},
        {"type": "response.output_item.done", "response_id": response_id, "output_index": 0, "item": done_item},
        {"type": "response.done", "response": _response(req, label, status, [done_item])},
    ]
    for body in closing:
        frames.append((yield from filled_steps(_frame(label, len(frames), body), {TEXT_SLOT: text})))
    return (yield from build_shape(frames, lead=LEAD, first_content=first_content, relabel=True))


def _frame(label: str, seq: int, body: dict[str, Any], size: int | None = None) -> bytes:
    return padded(_event_bytes, _identified(label, seq, body), size, "pad")


def _identified(label: str, seq: int, body: dict[str, Any]) -> dict[str, Any]:
    """event_id follows type, unique per stream (the label is the stream's)."""
    return {"type": body["type"], "event_id": f"event_{label}_{seq}", **{k: v for k, v in body.items() if k != "type"}}


def _event_bytes(data: dict[str, Any]) -> bytes:
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + compact_json(data) + b"\n\n"


def _status(req: StreamRequest) -> str:
    return "incomplete" if req.truncated else "completed"


def _item(label: str, text: str, status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text}] if text else []
    return {
        "id": f"item_{label}",
        "object": "realtime.item",
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _response(req: StreamRequest, label: str, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    done = status != "in_progress"
    details = {"type": status, "reason": "max_output_tokens"} if status == "incomplete" else None
    usage = {
        "total_tokens": req.prompt_tokens + req.tokens,
        "input_tokens": req.prompt_tokens,
        "output_tokens": req.tokens,
    }
    return {
        "object": "realtime.response",
        "id": f"resp_{label}",
        "status": status,
        "status_details": details,
        "output": output,
        "conversation_id": f"conv_{label}",
        "output_modalities": ["text"],
        "max_output_tokens": "inf",
        "usage": usage if done else None,
        "metadata": None,
    }
