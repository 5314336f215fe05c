"""Ollama chat (`POST /api/chat`): NDJSON, one JSON object per line, streamed unless the request says
`"stream": false`.

As documented in Ollama's API reference (github.com/ollama/ollama/blob/main/docs/api.md, "Generate a chat
completion"; docs.ollama.com/api/streaming and /api/usage): each line {model, created_at, message: {role
assistant, content}, done: false}; the last {message content "", done: true, done_reason (stop, or length when
options.num_predict ended it), total_duration, load_duration, prompt_eval_count, prompt_eval_duration, eval_count,
eval_duration} (durations in ns). Requests: `model`, `messages` (non-empty), `options.num_predict` (-1 and -2 mean
no limit), `stream`. Errors: `{"error": "..."}`.

Every line but the last carries text: the first is the first content, due at the TTFT. With reasoning (a
thinking model, docs.ollama.com/capabilities/thinking): lines whose message carries `thinking` and an empty
`content` come first.
"""

from __future__ import annotations

from typing import Any

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
    stream_field,
    text_chars,
)
from tokenpath.stub.frames import (
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

CREATED_AT = "1970-01-01T00:00:00Z"  # one fixed time, as OpenAI chunks say created 0: frames stay templates
NO_LIMIT = (-1, -2)  # num_predict: unlimited, and until the context fills


class OllamaFormat(ApiFormat):
    api = Api.OLLAMA
    max_tokens_field = "options.num_predict"
    heartbeat = None
    no_heartbeat = "Ollama's NDJSON has no keep-alive line (a blank line is no frame; Ollama sends none); use SSE"

    def parse(self, body: dict[str, Any], request: Request, route: Route, default_model: str) -> Ask:
        messages = message_list(body, "messages")
        limit = object_field(body, "options").get("num_predict")
        if limit in NO_LIMIT:
            limit = None
        elif limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise BadRequest("'options.num_predict' must be a positive integer, or -1 (no limit)")
        return Ask(
            model=model_field(body, default_model),
            stream=stream_field(body, True),  # Ollama streams unless told not to
            max_tokens=limit,
            prompt_chars=sum(text_chars(m.get("content")) for m in messages),
        )

    def shape_steps(self, req: StreamRequest, pacing: Pacing) -> Steps[StreamShape]:
        return cached_render(
            (self.api, req.model, req.tokens, req.prompt_tokens, req.truncated, req.ttft_ms, req.interval_ms),
            req,
            pacing,
            render,
        )

    def whole(self, req: StreamRequest) -> bytes:
        return compact_json(_final(req, full_text(req.tokens)))


def render(
    req: StreamRequest, frame_bytes: int | None, reasoning: int = 0, first_event_bytes: int | None = None
) -> Steps[StreamShape]:
    frames: list[bytes] = []
    yield from extend_steps(
        frames,
        (
            padded(line, _line(req, {"role": "assistant", "content": "", "thinking": t}), frame_bytes, "pad")
            for t in map(reasoning_text, range(reasoning))
        ),
        req.max_bytes,
    )
    yield from extend_steps(
        frames,
        (
            padded(
                line,
                _line(req, {"role": "assistant", "content": token_text(i)}),
                token_bytes(i, frame_bytes, first_event_bytes),
                "pad",
            )
            for i in range(req.tokens)
        ),
        req.max_bytes,
    )
    frames.append(line(_final(req, "")))
    return (yield from build_shape(frames, lead=0, first_content=reasoning, reasoning=range(reasoning)))


def _line(req: StreamRequest, message: dict[str, Any]) -> dict[str, Any]:
    return {"model": req.model, "created_at": CREATED_AT, "message": message, "done": False}


def line(data: dict[str, Any]) -> bytes:
    return compact_json(data) + b"\n"


def _final(req: StreamRequest, content: str) -> dict[str, Any]:
    """The last line (or a whole answer): done, why, and the counters. Durations are the planned pacing."""
    ttft_ns = round(req.ttft_ms * 1e6)
    eval_ns = round(req.tokens * req.interval_ms * 1e6)
    return {
        "model": req.model,
        "created_at": CREATED_AT,
        "message": {"role": "assistant", "content": content},
        "done_reason": "length" if req.truncated else "stop",
        "done": True,
        "total_duration": ttft_ns + eval_ns,
        "load_duration": 0,
        "prompt_eval_count": req.prompt_tokens,
        "prompt_eval_duration": ttft_ns,
        "eval_count": req.tokens,
        "eval_duration": eval_ns,
    }
