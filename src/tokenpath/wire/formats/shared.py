"""What the format modules share: reading a frame (its JSON value, its JSON "type", a path into it; the Shape a frame
of an unknown format is recognised by; the hint a note shows of it) and writing one (a JSON SSE event, a compact JSON
body, a message tagged with the server's code)."""

from __future__ import annotations

import json
from typing import Any

from tokenpath.wire import jsonbytes
from tokenpath.wire.apispec import Shape, WireFrame
from tokenpath.wire.eventstream import EventMessage
from tokenpath.wire.sse import Frame


def json_value(data: bytes | None) -> Any:
    """The JSON value of a frame's data, or None when it is not JSON (or too deep to parse)."""
    if not data:
        return None
    try:
        return jsonbytes.loads(data)
    except (ValueError, RecursionError):
        return None


def json_type(obj: Any) -> str | None:
    kind = obj.get("type") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) else None


def get_path(obj: Any, *path: str | int) -> Any:
    """obj[path[0]][path[1]]...; None where a key or an index is missing or the value is of another type."""
    for key in path:
        if isinstance(key, int):
            obj = obj[key] if isinstance(obj, list) and len(obj) > key else None
        else:
            obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def event_name(frame: object) -> str | None:
    """An SSE frame's `event:` name, decoded; None for an event without one or a frame of another framing."""
    event = frame.event if isinstance(frame, Frame) else None
    return event.decode("utf-8", "replace") if event else None


def shape_of(frame: WireFrame) -> Shape:
    """The Shape of any framing's frame."""
    obj = json_value(frame.data)
    if isinstance(frame, EventMessage):
        return Shape(frame.data, obj, frame.header(":event-type") or "")
    return Shape(frame.data, obj, json_type(obj) or event_name(frame) or "")


def hint(data: bytes | None, event: bytes | None = None) -> str:
    """What a foreign frame calls itself, for a note: its `event:` name, its JSON "type", or its first keys."""
    if event:
        return "event: " + event.decode("utf-8", "replace")[:64]
    obj = json_value(data)
    kind = json_type(obj)
    if kind is not None:
        return f'"type": {kind[:64]}'
    if isinstance(obj, dict):
        return "JSON with keys " + ", ".join(list(obj)[:4])[:80]
    return "not JSON"


def sse_event(data: object, event: bytes | None = None) -> bytes:
    """One SSE event: `event: NAME` when named, and its data as one JSON line."""
    line = b"data: " + json.dumps(data).encode() + b"\n\n"
    return b"event: " + event + b"\n" + line if event else line


def compact_json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def tagged(message: str, code: str) -> str:
    """The message with the server's code, for shapes that have no field of their own for it."""
    return f"{message} (tokenpath gateway: {code})"
