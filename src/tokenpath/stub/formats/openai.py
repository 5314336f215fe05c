"""OpenAI chat completions and completions (`/v1/chat/completions`, `/v1/completions`): SSE `data:` chunks ended by
`data: [DONE]`, or bare `data: <n>` frames (`format` plain) padded to an exact size.

As documented in the API reference (platform.openai.com/docs/api-reference/chat/streaming: chat.completion.chunk
objects, the role in the first delta, `finish_reason` in the last, `usage` in one more chunk with an empty
`choices` when stream_options.include_usage is set, then `data: [DONE]`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tokenpath.audit import completion_id
from tokenpath.errors import BadRequest, UsageError
from tokenpath.serve.http import Request
from tokenpath.stub.config import MAX_STREAM_BYTES, Format, Pacing
from tokenpath.stub.formats.base import (
    ApiFormat,
    Ask,
    Route,
    compact_json,
    model_field,
    positive_int,
    stream_field,
)
from tokenpath.stub.frames import (
    StreamRequest,
    StreamShape,
    build_shape,
    cached_shape_steps,
    extend_steps,
    reasoning_text,
    token_bytes,
    token_text,
)
from tokenpath.stub.loopshare import Steps, finish, in_one_go
from tokenpath.wire.apis import Api

DONE_FRAME = b"data: [DONE]\n\n"
PROMPT_STREAM_ID = re.compile(r"\[tokenpath-stream:([!-Z^-~]{1,128})\]")  # visible ASCII but brackets


class OpenAIFormat(ApiFormat):
    api = Api.OPENAI
    max_tokens_field = "max_tokens"
    # Keep-alive: an SSE comment line (the default). OpenAI documents none for chat completions; servers of this
    # format send comments (vLLM's --sse-keep-alive-interval), which openai-python's SSE decoder skips
    # (openai/_streaming.py: a line starting with ":").

    def routes(self) -> dict[str, str]:
        return {"/v1/chat/completions": "chat", "/v1/completions": "completion"}

    def describe(self) -> str:
        return "POST /v1/chat/completions and /v1/completions"

    def parse(self, body: dict[str, Any], request: Request, route: Route, default_model: str) -> Ask:
        if route.kind == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("'messages' must be a non-empty list")
            prompt_chars = sum(len(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str | list):
                raise BadRequest("'prompt' must be a string or a list")
            prompt_chars = len(str(prompt))
        model = model_field(body, default_model)
        stream = stream_field(body, False)
        limit = positive_int(body.get("max_completion_tokens", body.get("max_tokens")), "max_tokens")
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise BadRequest("'stream_options' must be an object")
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):  # "x" was taken as true, as "stream": "yes" is not
            raise BadRequest("'stream_options.include_usage' must be true or false")
        return Ask(model, stream, limit, prompt_chars, include_usage=include_usage)

    def body_stream_id(self, body: dict[str, Any], route: Route) -> str | None:
        """`user`, else a marker in the last message (for gateways that drop the header and `user`)."""
        user = body.get("user")
        if isinstance(user, str) and user:
            return user
        return prompt_stream_id(body.get("messages")) if route.kind == "chat" else None

    def shape_steps(self, req: StreamRequest, pacing: Pacing) -> Steps[StreamShape]:
        prompt_tokens = req.prompt_tokens if req.include_usage else 0  # only the usage chunk shows it
        return openai_shape_steps(
            req.kind,
            req.model,
            req.tokens,
            req.include_usage,
            prompt_tokens,
            pacing.format,
            pacing.frame_bytes,
            reasoning=pacing.reasoning_tokens,
            first_event_bytes=pacing.first_event_bytes,
            max_bytes=req.max_bytes,
        )

    def whole(self, req: StreamRequest) -> bytes:
        return compact_json(render_completion(req))


def openai_shape_steps(
    kind: str,
    model: str,
    tokens: int,
    usage: bool,
    prompt_tokens: int,
    fmt: Format,
    frame_bytes: int | None,
    *,
    reasoning: int = 0,
    first_event_bytes: int | None = None,
    max_bytes: int = MAX_STREAM_BYTES,
) -> Steps[StreamShape]:
    """One OpenAI request shape's frames (cached): the role delta of a chat stream leads, with the head; then
    `reasoning` reasoning deltas, then the content. In steps (stub/loopshare.py). `max_bytes`: what its frames may
    hold (StreamRequest.max_bytes)."""
    lead = 1 if kind == "chat" and fmt == "openai" else 0

    def render() -> Steps[StreamShape]:
        req = StreamRequest(kind, model, "", tokens, usage, prompt_tokens, max_bytes=max_bytes)
        frames = yield from render_stream_steps(
            req, fmt, frame_bytes, reasoning=reasoning, first_event_bytes=first_event_bytes
        )
        return (
            yield from build_shape(
                frames,
                lead=lead,
                first_content=lead + reasoning,
                relabel=fmt == "openai",
                reasoning=range(lead, lead + reasoning),
            )
        )

    key = (
        "openai",
        kind,
        model,
        tokens,
        usage,
        prompt_tokens,
        fmt,
        frame_bytes,
        reasoning,
        first_event_bytes,
        max_bytes,
    )
    return cached_shape_steps(key, render)


openai_shape = in_one_go(openai_shape_steps)


def render_stream(
    req: StreamRequest,
    fmt: Format,
    frame_bytes: int | None,
    *,
    reasoning: int = 0,
    first_event_bytes: int | None = None,
) -> list[bytes]:
    """All frames of one streamed response, in order. Raises UsageError if a frame cannot fit frame_bytes (or the
    first content frame first_event_bytes), or if these frames have nowhere to put reasoning."""
    return finish(render_stream_steps(req, fmt, frame_bytes, reasoning=reasoning, first_event_bytes=first_event_bytes))


def render_stream_steps(
    req: StreamRequest,
    fmt: Format,
    frame_bytes: int | None,
    *,
    reasoning: int = 0,
    first_event_bytes: int | None = None,
) -> Steps[list[bytes]]:
    """`render_stream` in steps."""
    if reasoning and (fmt == "plain" or req.kind != "chat"):
        where = "`format` plain frames" if fmt == "plain" else "/v1/completions chunks"
        raise UsageError(
            f"reasoning_tokens: {where} have no reasoning field; use /v1/chat/completions with `format` openai"
        )
    frames: list[bytes] = []
    if fmt == "plain":
        plain = (_pad_plain(_plain(i), token_bytes(i, frame_bytes, first_event_bytes)) for i in range(req.tokens))
        yield from extend_steps(frames, plain, req.max_bytes)
        return frames
    chunks = _openai_chunks(req, reasoning)
    first = (1 if req.kind == "chat" else 0) + reasoning  # the first content chunk
    json_frames = (
        _pad_json(c, first_event_bytes if i == first and first_event_bytes else frame_bytes)
        for i, c in enumerate(chunks)
    )
    yield from extend_steps(frames, json_frames, req.max_bytes)
    frames.append(DONE_FRAME)
    return frames


def render_completion(req: StreamRequest) -> dict[str, Any]:
    """The non-streaming JSON body with the same text the stream would carry."""
    text = "".join(token_text(i) for i in range(req.tokens))
    base: dict[str, Any] = {"id": completion_id(req.stream_id), "created": 0, "model": req.model}
    usage = _usage(req)
    if req.kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "length",
        }
        return {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
    choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
    return {**base, "object": "text_completion", "choices": [choice], "usage": usage}


def minimum_frame_bytes(req: StreamRequest, fmt: Format) -> int:
    """The largest unpadded frame: --frame-bytes below this cannot be honoured."""
    frames = render_stream(req, fmt, None)
    padded = frames if fmt == "plain" else frames[:-1]  # [DONE] is never padded
    return max(len(f) for f in padded)


def _plain(i: int) -> bytes:
    return f"data: {i}\n\n".encode()


def _pad_plain(frame: bytes, size: int | None) -> bytes:
    if size is None:
        return frame
    if len(frame) > size:
        raise UsageError(f"frame_bytes={size} is smaller than the frame {frame!r} ({len(frame)} bytes)")
    if len(frame) == size:
        return frame
    # `data: 7` -> `data: 7 .....`: the padding sits after a space so the number still parses.
    return frame[:-2] + b" " + b"." * (size - len(frame) - 1) + b"\n\n"


def _pad_json(chunk: dict[str, Any], size: int | None) -> bytes:
    frame = _json_frame(chunk)
    if size is None or len(frame) == size:
        return frame
    # The pad member is added after the real ones; OpenAI clients ignore unknown members.
    empty = _json_frame({**chunk, "pad": ""})
    if len(empty) > size:
        raise UsageError(
            f"frame_bytes={size} is smaller than an OpenAI chunk of this request ({len(frame)} bytes); "
            'use a larger size or "format": "plain"'
        )
    return _json_frame({**chunk, "pad": "." * (size - len(empty))})


def _json_frame(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def _openai_chunks(req: StreamRequest, reasoning: int = 0) -> Iterator[dict[str, Any]]:
    """Every chunk of the stream, made as the render takes them."""
    cid = completion_id(req.stream_id)
    chat = req.kind == "chat"
    obj = "chat.completion.chunk" if chat else "text_completion"
    base = {"id": cid, "object": obj, "created": 0, "model": req.model}

    def choice(content: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if content is not None:
                delta["content"] = content
            return {"index": 0, "delta": delta, "finish_reason": finish}
        return {"index": 0, "text": content or "", "finish_reason": finish, "logprobs": None}

    if chat:
        yield {**base, "choices": [choice(None, None, role=True)]}
        # As OpenAI-compatible reasoning servers (vLLM, DeepSeek, SGLang) stream them: the delta's reasoning_content.
        yield from (
            {**base, "choices": [{"index": 0, "delta": {"reasoning_content": t}, "finish_reason": None}]}
            for t in map(reasoning_text, range(reasoning))
        )
    yield from ({**base, "choices": [choice(token_text(i), None)]} for i in range(req.tokens))
    yield {**base, "choices": [choice(None, "length")]}
    if req.include_usage:
        yield {**base, "choices": [], "usage": _usage(req)}


def _usage(req: StreamRequest) -> dict[str, int]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.tokens,
        "total_tokens": req.prompt_tokens + req.tokens,
    }


def prompt_stream_id(messages: Any) -> str | None:
    """The stream id a client put in its last message (`[tokenpath-stream:ID]`): for gateways that drop the header,
    the `user` field and the chunk ids, but forward the conversation."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    content = messages[-1].get("content")
    m = PROMPT_STREAM_ID.search(content) if isinstance(content, str) else None
    return m.group(1) if m else None
