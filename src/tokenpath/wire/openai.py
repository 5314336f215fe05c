"""Facts about OpenAI streaming chunks, read in one place: whether a frame carries content, its text, its id.

The probe's TTFT, the load client's join to the stub's writes and the integrity check all ask here, so "the first
content frame" means the same thing to every reader.
"""

from __future__ import annotations

from typing import Any

from tokenpath.wire import jsonbytes
from tokenpath.wire.kinds import FrameKind

__all__ = ["CHUNK_ID_PREFIX", "FrameKind", "chunk_id", "classify", "content_text"]

CHUNK_ID_PREFIX = b'"id":"cmpl-'
# Where OpenAI-compatible servers put a reasoning model's thinking: `reasoning_content` (DeepSeek, vLLM before 0.10,
# LiteLLM), `reasoning` (vLLM 0.10+, OpenRouter, Ollama's OpenAI endpoint).
REASONING_FIELDS = ("reasoning_content", "reasoning")  # classify reads both, spelled out (no generator per frame)


def classify(data: bytes | None) -> FrameKind:
    """Decide whether a frame carries content, using OpenAI chunk shapes when the data is JSON.

    A delta with content (or a tool call) is CONTENT; one with only reasoning is REASONING (design.md: reasoning
    comes before content and is its own first-token figure, never TTFT); a role-only or empty delta is CONTROL."""
    if data is None:
        return FrameKind.COMMENT
    stripped = data.strip()
    if stripped == b"[DONE]":
        return FrameKind.DONE
    if not stripped.startswith(b"{"):
        return FrameKind.CONTENT  # plain text frames (e.g. `data: 17`) are content
    try:
        obj = jsonbytes.loads(stripped)
    except (ValueError, RecursionError):  # RecursionError: a peer nesting deeper than the parser goes
        return FrameKind.CONTENT
    if not isinstance(obj, dict):
        return FrameKind.CONTENT
    if "error" in obj:
        return FrameKind.ERROR
    choices = obj.get("choices")
    if not isinstance(choices, list):
        # Another API format (Anthropic's message_start, the Responses API's response.created, ...): until those
        # formats are read, no frame of theirs may start TTFT.
        return FrameKind.FOREIGN
    kind = FrameKind.CONTROL
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if delta.get("content") or delta.get("tool_calls"):
                return FrameKind.CONTENT
            if delta.get("reasoning_content") or delta.get("reasoning"):  # REASONING_FIELDS
                kind = FrameKind.REASONING  # unless another choice carries content
        if choice.get("text"):
            return FrameKind.CONTENT
    return kind


def _first_data_json(frame: bytes) -> Any:
    """The JSON of a raw frame's first `data:` line, or None (not JSON, or not a data line)."""
    line = frame.split(b"\n", 1)[0]
    if not line.startswith(b"data: {"):
        return None
    try:
        return jsonbytes.loads(line[6:])
    except (ValueError, RecursionError):
        return None


def content_text(frame: bytes) -> str | None:
    """The delta content of a raw chat chunk frame (`data: {...}\\n\\n`), or None when it carries none."""
    obj = _first_data_json(frame)
    try:
        content = obj["choices"][0]["delta"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return content if isinstance(content, str) and content else None


def chunk_id(frame: bytes) -> str | None:
    """The `id` of a raw OpenAI chunk frame (`cmpl-...`), read without parsing the whole frame."""
    start = frame.find(CHUNK_ID_PREFIX)
    if start < 0:
        return None
    end = frame.find(b'"', start + 6)
    return frame[start + 6 : end].decode() if end > 0 else None
