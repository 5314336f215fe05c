"""The OpenAI Responses API (`POST /v1/responses`): SSE events with `event:` names, each carrying its `type` and a
`sequence_number` that counts from 0; no `[DONE]`.

As documented in the API reference's "Streaming events" (platform.openai.com/docs/api-reference/responses-streaming)
and the streaming guide (platform.openai.com/docs/guides/streaming-responses): `response.created` and
`response.in_progress` (the Response object, status in_progress), `response.output_item.added` (a message item),
`response.content_part.added` (an empty output_text part), one `response.output_text.delta` per token (`item_id`,
`output_index`, `content_index`, `delta`, `logprobs`), then `response.output_text.done`, `response.content_part.done`,
`response.output_item.done` and `response.completed` with the whole Response and its usage; when
`max_output_tokens` ended the answer the last event is `response.incomplete` (status incomplete,
incomplete_details.reason max_output_tokens). Requests: `model`, `input` (a string or a list of items),
`max_output_tokens`, `stream`. Errors: the OpenAI error shape.

The four events before the first delta leave with the head; the first output_text.delta is the first content.

With reasoning (the reasoning summary's events, as the same reference documents them): output item 0 is a
`reasoning` item whose summary part streams as `response.reasoning_summary_text.delta`s; its part.added leads
with the head in place of the message's, and the events that close it (reasoning_summary_text.done,
reasoning_summary_part.done, output_item.done) and open the message as output item 1 leave with the first text
delta; usage counts them as output_tokens_details.reasoning_tokens.
"""

from __future__ import annotations

from typing import Any

from tokenpath.audit import stream_label
from tokenpath.errors import BadRequest
from tokenpath.serve.http import Request
from tokenpath.stub.config import Pacing
from tokenpath.stub.formats.base import (
    MAX_PROMPT_PARTS,
    TEXT_SLOT,
    THOUGHT_SLOT,
    ApiFormat,
    Ask,
    Route,
    cached_render,
    compact_json,
    filled_steps,
    full_text,
    full_text_steps,
    model_field,
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

LEAD = 4  # response.created, response.in_progress, response.output_item.added, response.content_part.added


class ResponsesFormat(ApiFormat):
    api = Api.RESPONSES
    max_tokens_field = "max_output_tokens"
    # Keep-alive: an SSE comment line (the default), as servers of this format send (vLLM's
    # --sse-keep-alive-interval); openai-python's SSE decoder skips comment lines (openai/_streaming.py). A typed
    # `keepalive` event would take a sequence number, which a write planned apart from the frames cannot know
    # (wire/formats/responses.py reads one as control should a server send it).

    def parse(self, body: dict[str, Any], request: Request, route: Route, default_model: str) -> Ask:
        given = body.get("input")
        if isinstance(given, str) and given:
            prompt_chars = len(given)
        elif isinstance(given, list) and given and all(isinstance(i, dict) for i in given):
            prompt_chars = sum(text_chars(i.get("content")) for i in given[:MAX_PROMPT_PARTS])
        else:
            raise BadRequest("'input' must be a non-empty string or a non-empty list of input items")
        return Ask(
            model=model_field(body, default_model),
            stream=stream_field(body, False),
            max_tokens=positive_int(body.get("max_output_tokens"), "max_output_tokens"),
            prompt_chars=prompt_chars + text_chars(body.get("instructions")),
        )

    def shape_steps(self, req: StreamRequest, pacing: Pacing) -> Steps[StreamShape]:
        return cached_render((self.name, req.model, req.tokens, req.prompt_tokens, req.truncated), req, pacing, render)

    def whole(self, req: StreamRequest) -> bytes:
        label = stream_label(req.stream_id)
        return compact_json(_response(req, label, _status(req), [_item(label, _status(req), full_text(req.tokens))]))


def render(
    req: StreamRequest, frame_bytes: int | None, reasoning: int = 0, first_event_bytes: int | None = None
) -> Steps[StreamShape]:
    label = PLACEHOLDER_LABEL
    item_id = f"msg_{label}"
    out = 1 if reasoning else 0  # the message's output index: after the reasoning item when there is one
    where = {"item_id": item_id, "output_index": out, "content_index": 0}
    running = _response(req, label, "in_progress", [])
    status = _status(req)
    text = yield from full_text_steps(req.tokens)
    done_part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    opening: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": out, "item": _item(label, "in_progress", "")},
        {
            "type": "response.content_part.added",
            **where,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""},
        },
    ]
    # Each event is encoded as it is made (its sequence number: the frames so far): 100,000 event dicts kept until
    # the end would set off full passes of the cyclic collector, ~20 ms each, in one step.
    frames = [
        _frame(0, {"type": "response.created", "response": running}),
        _frame(1, {"type": "response.in_progress", "response": running}),
    ]
    with_next: set[int] = set()
    thought = ""
    if reasoning:
        summary = {"item_id": f"rs_{label}", "output_index": 0, "summary_index": 0}
        thought = yield from full_text_steps(reasoning, reasoning_text)
        thought_item = _reasoning_item(label, [_summary(THOUGHT_SLOT)])
        frames += [
            _frame(2, {"type": "response.output_item.added", "output_index": 0, "item": _reasoning_item(label, [])}),
            _frame(3, {"type": "response.reasoning_summary_part.added", **summary, "part": _summary("")}),
        ]
        yield from extend_steps(
            frames,
            (
                _frame(4 + i, {"type": "response.reasoning_summary_text.delta", **summary, "delta": t}, frame_bytes)
                for i, t in enumerate(map(reasoning_text, range(reasoning)))
            ),
            req.max_bytes,
        )
        closing: list[dict[str, Any]] = [
            {"type": "response.reasoning_summary_text.done", **summary, "text": THOUGHT_SLOT},
            {"type": "response.reasoning_summary_part.done", **summary, "part": _summary(THOUGHT_SLOT)},
            {"type": "response.output_item.done", "output_index": 0, "item": thought_item},
        ]
        with_next.update(range(len(frames), len(frames) + len(closing) + len(opening)))
        for body in closing + opening:  # those that hold the whole thought: their text put in, in steps
            frames.append((yield from filled_steps(_frame(len(frames), body), {THOUGHT_SLOT: thought})))
    else:
        frames += [_frame(len(frames) + k, body) for k, body in enumerate(opening)]
    first_content = len(frames)
    yield from extend_steps(
        frames,
        (
            _frame(
                first_content + i,
                {"type": "response.output_text.delta", **where, "delta": token_text(i), "logprobs": []},
                token_bytes(i, frame_bytes, first_event_bytes),
            )
            for i in range(req.tokens)
        ),
        req.max_bytes,
    )
    # Each closing event holds the whole text (and the last, the thought): encoded with slots, the texts put in in
    # steps (base.filled_steps).
    slot = TEXT_SLOT if text else ""
    texts = {TEXT_SLOT: text, THOUGHT_SLOT: thought}
    items = [_item(label, status, slot)]
    if reasoning:
        items.insert(0, _reasoning_item(label, [_summary(THOUGHT_SLOT)]))
    final = _response(req, label, status, items, reasoning)
    ending = "response.completed" if status == "completed" else "response.incomplete"
    ends: list[dict[str, Any]] = [
        {"type": "response.output_text.done", **where, "text": slot, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": {**done_part, "text": slot}},
        {"type": "response.output_item.done", "output_index": out, "item": _item(label, status, slot)},
        {"type": ending, "response": final},
    ]
    for body in ends:
        frames.append((yield from filled_steps(_frame(len(frames), body), texts)))
    lead = LEAD
    return (
        yield from build_shape(
            frames,
            lead=lead,
            first_content=first_content,
            relabel=True,
            reasoning=range(lead, lead + reasoning),
            with_next=frozenset(with_next),
        )
    )


def _frame(seq: int, body: dict[str, Any], size: int | None = None) -> bytes:
    """Event number `seq`, padded to `size`."""
    return padded(_event_bytes, _numbered(seq, body), size, "pad")


def _numbered(seq: int, body: dict[str, Any]) -> dict[str, Any]:
    """sequence_number follows type, as the API writes it."""
    return {"type": body["type"], "sequence_number": seq, **{k: v for k, v in body.items() if k != "type"}}


def _summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _reasoning_item(label: str, summary: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": f"rs_{label}", "type": "reasoning", "summary": summary}


def event(seq: int, body: dict[str, Any]) -> bytes:
    """One event; sequence_number follows type, as the API writes it."""
    return _event_bytes(_numbered(seq, body))


def _event_bytes(data: dict[str, Any]) -> bytes:
    name: str = data["type"]
    return b"event: " + name.encode() + b"\ndata: " + compact_json(data) + b"\n\n"


def _status(req: StreamRequest) -> str:
    return "incomplete" if req.truncated else "completed"


def _item(label: str, status: str, text: str) -> dict[str, Any]:
    """The message output item; its one output_text part holds the text so far (none while in progress)."""
    content = [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}] if text else []
    return {"id": f"msg_{label}", "type": "message", "status": status, "content": content, "role": "assistant"}


def _response(
    req: StreamRequest, label: str, status: str, output: list[dict[str, Any]], reasoning: int = 0
) -> dict[str, Any]:
    done = status != "in_progress"
    usage = {
        "input_tokens": req.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": req.tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": req.prompt_tokens + req.tokens,
    }
    return {
        "id": f"resp_{label}",
        "object": "response",
        "created_at": 0,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": None,
        "max_output_tokens": None,
        "model": req.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage if done else None,
        "user": None,
        "metadata": {},
    }
