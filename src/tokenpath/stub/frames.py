"""What the stub writes: SSE frames in OpenAI chunk shape or bare `data: <n>` lines, padded to an exact size.

Token text varies from token to token because some gateways (LiteLLM) abort a stream whose chunks repeat.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tokenpath.errors import UsageError
from tokenpath.stub.config import Format, StubConfig
from tokenpath.wire.framing import chunks

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "basil",
    "cedar",
    "dune",
    "ember",
    "fern",
    "garnet",
    "heath",
    "iris",
    "jade",
    "kelp",
    "lotus",
    "maple",
    "nettle",
    "olive",
    "pine",
    "quartz",
    "reed",
    "sage",
    "thyme",
    "umber",
    "vale",
    "willow",
    "yarrow",
    "zinnia",
    "acorn",
    "birch",
    "clover",
    "daisy",
    "elm",
    "flint",
    "grove",
    "hazel",
]

DONE_FRAME = b"data: [DONE]\n\n"


def token_text(index: int) -> str:
    """Never the same as its neighbour; the index keeps each token unique within a stream."""
    return f" {WORDS[index % len(WORDS)]}{index}"


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """The parts of a completion request that shape the response."""

    kind: str  # "chat" or "completion"
    model: str
    stream_id: str
    tokens: int
    include_usage: bool = False
    prompt_tokens: int = 0


def completion_id(stream_id: str) -> str:
    """Fixed length, so a frame's natural size does not depend on the stream id."""
    return "cmpl-" + hashlib.blake2b(stream_id.encode(), digest_size=12).hexdigest()


def render_stream(req: StreamRequest, fmt: Format, frame_bytes: int | None) -> list[bytes]:
    """All frames of one streamed response, in order. Raises UsageError if a frame cannot fit frame_bytes."""
    if fmt == "plain":
        frames = [_plain(i) for i in range(req.tokens)]
        return [_pad_plain(f, frame_bytes) for f in frames] if frame_bytes else frames
    chunks = _openai_chunks(req)
    frames = [_pad_json(c, frame_bytes) for c in chunks]
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


class StreamShape:
    """Frames of one request shape, rendered once and framed once for each transfer coding; a stream only
    swaps in its own completion id (fixed length, so sizes and chunk headers stay valid). The stub writes these;
    the load client compares what it received against them."""

    def __init__(self, frames: list[bytes], fmt: Format) -> None:
        self.sizes = [len(f) for f in frames]
        self._relabel = fmt == "openai"
        self._plain = frames
        self._chunked = chunks(frames)  # the last also ends the body, so it leaves in the same write
        self.nbytes = 2 * sum(self.sizes) + 8 * len(frames)  # both codings, as held in memory

    def wire(self, chunked: bool, cid: str) -> list[bytes]:
        frames = self._chunked if chunked else self._plain
        if not self._relabel:
            return frames
        placeholder, real = _PLACEHOLDER_ID.encode(), cid.encode()
        return [f.replace(placeholder, real) for f in frames]


# Request shapes repeat (an experiment sends the same pacing thousands of times), so their frames are rendered
# once. The cache is bounded by bytes, not entries: one shape can be up to MAX_STREAM_BYTES x 2.
SHAPE_CACHE_BYTES = 64 << 20
_shapes: OrderedDict[tuple[Any, ...], StreamShape] = OrderedDict()
_shapes_bytes = 0


def shape_for(
    kind: str, model: str, tokens: int, usage: bool, prompt_tokens: int, fmt: Format, frame_bytes: int | None
) -> StreamShape:
    global _shapes_bytes
    key = (kind, model, tokens, usage, prompt_tokens, fmt, frame_bytes)
    shape = _shapes.get(key)
    if shape is not None:
        _shapes.move_to_end(key)
        return shape
    req = StreamRequest(kind, model, "", tokens, usage, prompt_tokens)
    shape = StreamShape(render_stream(req, fmt, frame_bytes), fmt)
    if shape.nbytes <= SHAPE_CACHE_BYTES // 4:  # a huge one-off shape is rendered for its request only
        _shapes[key] = shape
        _shapes_bytes += shape.nbytes
        while _shapes_bytes > SHAPE_CACHE_BYTES:
            _, old = _shapes.popitem(last=False)
            _shapes_bytes -= old.nbytes
    return shape


def cached_shape_bytes() -> int:
    return _shapes_bytes


def check_frame_bytes(cfg: StubConfig) -> None:
    """Fail at start, not on the first request, when frame_bytes cannot hold this stub's frames."""
    if cfg.frame_bytes is None:
        return
    need = minimum_frame_bytes(StreamRequest("chat", cfg.model, "", cfg.tokens), cfg.format)
    if cfg.frame_bytes < need:
        hint = "" if cfg.format == "plain" else "; `format` plain frames can be as small as 8 bytes"
        raise UsageError(f"`frame_bytes` {cfg.frame_bytes} cannot hold this stub's frames (need >= {need}){hint}")


def minimum_frame_bytes(req: StreamRequest, fmt: Format) -> int:
    """The largest unpadded frame: --frame-bytes below this cannot be honoured."""
    frames = render_stream(req, fmt, None)
    padded = frames if fmt == "plain" else frames[:-1]  # [DONE] is never padded
    return max(len(f) for f in padded)


def _plain(i: int) -> bytes:
    return f"data: {i}\n\n".encode()


def _pad_plain(frame: bytes, size: int) -> bytes:
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


def _openai_chunks(req: StreamRequest) -> list[dict[str, Any]]:
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

    chunks: list[dict[str, Any]] = []
    if chat:
        chunks.append({**base, "choices": [choice(None, None, role=True)]})
    chunks.extend({**base, "choices": [choice(token_text(i), None)]} for i in range(req.tokens))
    chunks.append({**base, "choices": [choice(None, "length")]})
    if req.include_usage:
        chunks.append({**base, "choices": [], "usage": _usage(req)})
    return chunks


def _usage(req: StreamRequest) -> dict[str, int]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.tokens,
        "total_tokens": req.prompt_tokens + req.tokens,
    }


_PLACEHOLDER_ID = completion_id("")  # same length as every completion id, so padding stays exact
