"""Which of the stub's tokens a content frame carries, in every API format: what joins a stream's first content frame
to the stub's write of it, and what the integrity check of a non-OpenAI stream compares.

The stub's token k is `" {word}{k}"` (stub/frames.py token_text) in every format; a frame's text is read where its
format puts content (its spec's content_text; wire/formats/ cites each). The join reads what the frame says, not
where it is: a gateway may drop or add frames around it.
"""

from __future__ import annotations

from tokenpath.wire import jsonbytes
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.reader import WireFrame


def content_text(api: Api, frame: WireFrame) -> str | None:
    """The text a content frame of `api` carries, or None (not JSON, no text where the format puts it)."""
    data = frame.data
    if not data:
        return None
    try:
        obj = jsonbytes.loads(data)
    except (ValueError, RecursionError):
        return None
    text = SPECS[api].content_text(obj)
    return text if isinstance(text, str) and text else None


def token_number(text: str | None) -> int | None:
    """k of the stub's token text `" {word}{k}"`: its trailing digits; None for any other text."""
    if not text:
        return None
    digits = len(text) - len(text.rstrip("0123456789"))
    return int(text[-digits:]) if digits else None
