"""The one interface the stub's app calls for every streaming API it speaks, and the request rules they share.

A format knows its routes, reads a request's own fields into an `Ask` (and the stream id its body names, if any),
renders a request shape's frames (once; the shape cache keeps them), the body of a non-streamed answer, and its own
error shape. Everything else (pacing, the stream id's precedence and rules, the audit, max-tokens clamping, the
`tokenpath` pacing member) is the app's and is the same for all.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any, ClassVar

from tokenpath.errors import BadRequest
from tokenpath.serve.http import Request
from tokenpath.stub.config import Pacing
from tokenpath.stub.frames import STEP_FRAMES, StreamRequest, StreamShape, cached_shape_steps, token_text
from tokenpath.stub.loopshare import Steps, finish
from tokenpath.wire.apis import SPECS, Api, Framing
from tokenpath.wire.apispec import ErrorReply
from tokenpath.wire.errorshape import error_reply

MAX_PROMPT_PARTS = 10_000  # messages or content parts counted for the prompt size; the body limit bounds it anyway


@dataclass(frozen=True, slots=True)
class Route:
    """A streaming route a request came in on: its format, the kind of request, the model its path names."""

    api: Api
    kind: str  # OpenAI: "chat" or "completion"; every other format: its Api value
    model: str | None = None  # Gemini and Bedrock name the model in the path


@dataclass(frozen=True, slots=True)
class Ask:
    """What one request asks of the stub, read from its format's own fields."""

    model: str
    stream: bool
    max_tokens: int | None  # the format's max-tokens field; None when the request sets none
    prompt_chars: int
    include_usage: bool = False  # OpenAI's stream_options.include_usage


class ApiFormat(ABC):
    """One streaming API. Subclasses are stateless; the app holds one of each it serves."""

    api: ClassVar[Api]
    max_tokens_field: ClassVar[str]  # as error messages name it
    # The keep-alive --heartbeat-ms writes during silences, in the format's own shape: an SSE comment line by
    # default (the event-stream spec's keep-alive, WHATWG HTML 9.2 "Authoring notes"; every SSE client skips it),
    # Anthropic's `event: ping` (stub/formats/anthropic.py). Either way a frame with no content: it never starts
    # TTFT. None for a format that has none (Bedrock's event stream, Ollama's NDJSON); `no_heartbeat` says why.
    heartbeat: ClassVar[bytes | None] = b": ping\n\n"
    no_heartbeat: ClassVar[str] = ""
    # Over WebSocket, the client events a session takes (stub/app.py picks the session by it): the Responses
    # WebSocket mode's `response.create` alone, or the Realtime API's `conversation` (items, then response.create).
    ws_dialect: ClassVar[str] = "response.create"

    def __init__(self) -> None:
        spec = SPECS[self.api]
        self.name = self.api.value  # a plain str: shape-cache keys hash it on every request
        self.content_type = spec.content_type
        self.websocket = spec.websocket  # its route takes a WebSocket upgrade too (stub/websocket.py)
        self.websocket_only = spec.websocket_only  # ... and nothing else (the Realtime API)
        # The head of a streamed answer, built once: SSE ones are never to be cached by anything on the path.
        no_cache = (("Cache-Control", "no-cache"),) if spec.framing is Framing.SSE else ()
        self.stream_headers: tuple[tuple[str, str], ...] = (("Content-Type", spec.content_type), *no_cache)

    def routes(self) -> dict[str, str]:
        """Exact paths this format streams on -> request kind (Gemini and Bedrock override `match` instead)."""
        return {SPECS[self.api].route.partition("?")[0]: self.api.value}

    def match(self, path: str) -> Route | None:
        """The route for a path with a model in it (only Gemini's and Bedrock's have one)."""
        return None

    def describe(self) -> str:
        return f"POST {SPECS[self.api].route}"

    @abstractmethod
    def parse(self, body: dict[str, Any], request: Request, route: Route, default_model: str) -> Ask:
        """The request's own fields; raises BadRequest naming the field that is wrong."""

    def body_stream_id(self, body: dict[str, Any], route: Route) -> str | None:
        """The stream id the body names, asked only when no header does (most formats: the header only)."""
        return None

    def shape(self, req: StreamRequest, pacing: Pacing) -> StreamShape:
        """Every frame of a streamed answer (cached by request shape), with pacing.reasoning_tokens reasoning deltas
        before the content and the first content frame padded to pacing.first_event_bytes. Raises UsageError when
        a frame size cannot hold its frame, or the format has no such thing."""
        return finish(self.shape_steps(req, pacing))

    @abstractmethod
    def shape_steps(self, req: StreamRequest, pacing: Pacing) -> Steps[StreamShape]:
        """`shape`, yielding between steps of its render (stub/loopshare.py): none at all when the shape is cached.
        The UsageError `shape` raises is raised by the step that meets it."""

    @abstractmethod
    def whole(self, req: StreamRequest) -> bytes:
        """The JSON body of a non-streamed answer with the same text."""

    def error(self, status: int, message: str) -> ErrorReply:
        """An error in this format's shape (wire/errorshape.py: the gateway answers in the same)."""
        return error_reply(self.api, status, message, "not_found" if status == 404 else None)


# Shared request rules ------------------------------------------------------------------------------------------


def model_field(body: dict[str, Any], default: str, name: str = "model") -> str:
    model = body.get(name, default)
    if not isinstance(model, str) or not model:
        raise BadRequest(f"'{name}' must be a non-empty string")
    return model


def stream_field(body: dict[str, Any], default: bool) -> bool:
    stream = body.get("stream", default)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false")
    return stream


def positive_int(value: Any, name: str) -> int | None:
    """A max-tokens field: absent (None) or a whole number >= 1."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"'{name}' must be a positive integer")
    return value


def object_field(body: dict[str, Any], name: str) -> dict[str, Any]:
    """An optional nested object (`inferenceConfig`, `options`...): absent is empty."""
    value = body.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"'{name}' must be an object")
    return value


def message_list(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """A non-empty list of message objects (`messages`, `contents`)."""
    messages = body.get(name)
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest(f"'{name}' must be a non-empty list of message objects")
    return messages


def text_chars(content: Any, text_key: str = "text") -> int:
    """Characters of prompt text in a content value: a string, or a list of parts carrying `text_key`."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(
            len(p[text_key])
            for p in content[:MAX_PROMPT_PARTS]
            if isinstance(p, dict) and isinstance(p.get(text_key), str)
        )
    return 0


# (req, frame_bytes, reasoning, first) -> the shape, in steps
Render = Callable[[StreamRequest, int | None, int, int | None], Steps[StreamShape]]


def cached_render(key: tuple[Hashable, ...], req: StreamRequest, pacing: Pacing, render: Render) -> Steps[StreamShape]:
    """A format's shape, cached by its own request-shape `key` plus the pacing that changes frames (frame size,
    reasoning deltas, first-event size), rendered by `render` on a miss."""
    fb, reasoning, first = pacing.frame_bytes, pacing.reasoning_tokens, pacing.first_event_bytes
    # the bound its render held it to, too: a shape kept under a larger one is not another stub's to take
    return cached_shape_steps((*key, fb, reasoning, first, req.max_bytes), lambda: render(req, fb, reasoning, first))


def full_text(tokens: int) -> str:
    return "".join(token_text(i) for i in range(tokens))


def full_text_steps(tokens: int, text: Callable[[int], str] = token_text) -> Steps[str]:
    """`full_text(tokens)` (or of `text`, e.g. reasoning_text), joined STEP_FRAMES x 16 tokens at a time (~0.2 us
    each): 100,000 in one go hold the loop ~19 ms."""
    step = STEP_FRAMES * 16
    parts: list[str] = []
    for i in range(0, tokens, step):
        parts.append("".join(map(text, range(i, min(i + step, tokens)))))
        yield
    return "".join(parts)


def compact_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# A closing event that holds a whole answer's text (Responses' and Realtime's *.done, response.completed) is encoded
# with a slot where the text goes, then the text's JSON is made in steps and put in the slot: a 100,000-token text
# (~1.2 MB) encoded with its event held the loop ~2-4 ms in one step, four times a stream. JSON escapes a string
# character by character, so the text's pieces encoded apart and joined are its encoding whole.
TEXT_SLOT = "\x00text\x00"  # no token's text or reasoning text holds a NUL
THOUGHT_SLOT = "\x00thought\x00"
TEXT_STEP_CHARS = 128 << 10  # ~0.25 ms of encoding a step


def filled_steps(encoded: bytes, texts: dict[str, str]) -> Steps[bytes]:
    """`encoded` (made with each key of `texts` as a string value) with each slot holding its text's JSON, the same
    bytes as the event encoded with the texts in it. The pieces are joined once, with the event's own bytes around
    them (joining each text first, then splicing it, copied a 1.2 MB text three times in one step: ~1.5 ms)."""
    pieces: dict[bytes, list[bytes]] = {}
    for slot, text in texts.items():
        encoded_text = pieces[_slot_json(slot)] = []
        for i in range(0, len(text), TEXT_STEP_CHARS):
            encoded_text.append(encode_basestring_ascii(text[i : i + TEXT_STEP_CHARS])[1:-1].encode())
            yield
    out: list[bytes] = []
    at = 0
    for slot_at in re.finditer(b"|".join(map(re.escape, pieces)), encoded):
        out.append(encoded[at : slot_at.start()])
        out += pieces[slot_at.group()]
        at = slot_at.end()
    out.append(encoded[at:])
    return b"".join(out)


def _slot_json(slot: str) -> bytes:
    return encode_basestring_ascii(slot)[1:-1].encode()
