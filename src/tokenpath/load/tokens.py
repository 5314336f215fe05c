"""Which of the stub's tokens a content frame carries, in every API format: what joins a stream's first content frame
to the stub's write of it, and what the integrity check of a non-OpenAI stream compares.

The stub's token k is `" {word}{k}"` (stub/frames.py token_text) in every format; a frame's text is read where its
format puts content (wire/formats.py cites each): OpenAI `choices[0].delta.content`, Responses `delta`, Anthropic
`delta.text`, Gemini the first non-thought part's `text`, Bedrock `delta.text`, Ollama `message.content`. The join
reads what the frame says, not where it is: a gateway may drop or add frames around it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tokenpath.wire.apis import Api
from tokenpath.wire.reader import WireFrame


def _get(obj: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int):
            obj = obj[key] if isinstance(obj, list) and len(obj) > key else None
        else:
            obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _gemini(obj: Any) -> Any:
    parts = _get(obj, "candidates", 0, "content", "parts")
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and part.get("thought") is not True and part.get("text"):
            return part["text"]
    return None


_TEXT: dict[Api, Callable[[Any], Any]] = {
    Api.OPENAI: lambda o: _get(o, "choices", 0, "delta", "content"),
    Api.RESPONSES: lambda o: _get(o, "delta") if _get(o, "type") == "response.output_text.delta" else None,
    Api.ANTHROPIC: lambda o: _get(o, "delta", "text"),
    Api.GEMINI: _gemini,
    Api.BEDROCK: lambda o: _get(o, "delta", "text"),
    Api.OLLAMA: lambda o: _get(o, "message", "content"),
}


def content_text(api: Api, frame: WireFrame) -> str | None:
    """The text a content frame of `api` carries, or None (not JSON, no text where the format puts it)."""
    data = frame.data
    if not data:
        return None
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return None
    text = _TEXT[api](obj)
    return text if isinstance(text, str) and text else None


def token_number(text: str | None) -> int | None:
    """k of the stub's token text `" {word}{k}"`: its trailing digits; None for any other text."""
    if not text:
        return None
    digits = len(text) - len(text.rstrip("0123456789"))
    return int(text[-digits:]) if digits else None
