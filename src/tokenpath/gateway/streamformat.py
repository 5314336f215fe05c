"""The relay rule of each streaming API format, as data: its cut (never half a frame), its classifier (where the
first content is, for the upstream TTFT metric) and its error writer (the stream's last frame when the upstream
fails after the first byte, in the shape the format's own clients raise on). The gateway has one relay path
(proxy.Exchange.upstream_body); a response's StreamFormat is picked once, at its head.

Which format: the route says the API (gateway.routes), the response's Content-Type says the framing. When they agree
the route's API is the format; a stream on a path that names no API (a /v1/ path past the known ones) is read by its
framing's default (SSE: OpenAI chat, as the gateway always did); a response that is not a stream is relayed as it
comes (its first byte is its first answer).

The error shapes, as each provider documents a failure after the stream has started:

- OpenAI chat: `event: error` with the OpenAI error object, `data: {"error": {message, type, param, code}}`; the
  openai SDK raises APIError on any data with an `error` member (platform.openai.com/docs/guides/error-codes).
- OpenAI Responses: the `error` event, `{"type": "error", "code", "message", "param", "sequence_number"}`
  (platform.openai.com/docs/api-reference/responses-streaming/error; ResponseErrorEvent in the SDKs); its sequence
  number follows the last one relayed.
- Anthropic: `event: error` with `{"type": "error", "error": {"type": "api_error", "message"}}`, "an error event
  ... e.g. overloaded_error" mid-stream (docs.claude.com/en/docs/build-with-claude/streaming#error-events); the
  anthropic SDK raises APIStatusError on `event: error`.
- Gemini: an SSE data object `{"error": {"code", "message", "status"}}`, google.rpc.Status as the REST API answers
  errors (ai.google.dev/gemini-api/docs/troubleshooting: 500 INTERNAL, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED);
  google-genai raises APIError on a chunk that starts with `{"error":`.
- Bedrock ConverseStream: an event-stream message with `:message-type` exception and `:exception-type`
  modelStreamErrorException ("A streaming error occurred. Retry your request."), internalServerException or
  serviceUnavailableException, payload `{"message": ...}`
  (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStreamOutput.html); botocore raises
  EventStreamError with the exception type as its code.
- Ollama NDJSON: a line `{"error": "..."}`: "If an error occurs mid-stream, the error will be returned as an
  object in the application/x-ndjson format with an error property" (docs.ollama.com/api/errors).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tokenpath.gateway.cuts import LineRelay, MessageRelay
from tokenpath.wire.apis import SPECS, Api, Framing
from tokenpath.wire.errorshape import error_body
from tokenpath.wire.eventstream import exception_message
from tokenpath.wire.reader import FrameReader
from tokenpath.wire.sse import EventRelay

# The gateway's end-of-stream codes (exchange_state.End.code) that mean "took too long", for formats that say so.
TIMEOUT_CODES = frozenset({"upstream_idle_timeout", "total_timeout"})
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


class Cut(Protocol):
    """What the relay path calls on a format's cut (wire.sse.EventRelay, cuts.MessageRelay, cuts.LineRelay)."""

    tail: int
    held: bytearray
    max_event_bytes: int
    broken: str | None

    def feed(self, data: bytes) -> int: ...
    def cut(self, data: bytes) -> bytes: ...
    @property
    def too_large(self) -> bool: ...
    def rest(self) -> bytes: ...


class SSECut(EventRelay):
    """EventRelay with the one attribute the other cuts have: any bytes are SSE, so nothing breaks it."""

    __slots__ = ()
    broken: str | None = None


# message, code, the last bytes relayed (whole frames) -> the frame that ends the stream
ErrorWriter = Callable[[str, str, bytes], bytes]


@dataclass(frozen=True, slots=True)
class StreamFormat:
    api: Api
    framing: Framing
    new_cut: Callable[[], Cut]
    error: ErrorWriter

    def reader(self) -> FrameReader:
        """A fresh classifier of this format's frames (the TTFT scan)."""
        return FrameReader(self.api)


def _sse(data: object, event: bytes | None = None) -> bytes:
    line = b"data: " + json.dumps(data).encode() + b"\n\n"
    return b"event: " + event + b"\n" + line if event else line


def _tagged(message: str, code: str) -> str:
    """The message with the gateway's code, for shapes that have no field of their own for it."""
    return f"{message} (tokenpath gateway: {code})"


def openai_error(message: str, code: str, last: bytes) -> bytes:
    return _sse(error_body(message, "server_error", code), b"error")


def responses_error(message: str, code: str, last: bytes) -> bytes:
    numbers = _SEQUENCE.findall(last)
    sequence = int(numbers[-1]) + 1 if numbers else 0
    event = {"type": "error", "code": code, "message": message, "param": None, "sequence_number": sequence}
    return _sse(event, b"error")


def anthropic_error(message: str, code: str, last: bytes) -> bytes:
    return _sse({"type": "error", "error": {"type": "api_error", "message": _tagged(message, code)}}, b"error")


def gemini_error(message: str, code: str, last: bytes) -> bytes:
    if code in TIMEOUT_CODES:
        status, name = 504, "DEADLINE_EXCEEDED"
    elif code in ("upstream_disconnected", "upstream_truncated", "shutdown"):
        status, name = 503, "UNAVAILABLE"
    else:
        status, name = 500, "INTERNAL"
    return _sse({"error": {"code": status, "message": _tagged(message, code), "status": name}})


def bedrock_error(message: str, code: str, last: bytes) -> bytes:
    if code == "shutdown":
        kind = "serviceUnavailableException"
    elif code in ("upstream_disconnected", "upstream_truncated", *TIMEOUT_CODES):
        kind = "modelStreamErrorException"  # the model's stream broke: retry (as Bedrock says of it)
    else:
        kind = "internalServerException"
    return exception_message(kind, json.dumps({"message": _tagged(message, code)}).encode())


def ollama_error(message: str, code: str, last: bytes) -> bytes:
    return json.dumps({"error": _tagged(message, code)}).encode() + b"\n"


_ERRORS: dict[Api, ErrorWriter] = {
    Api.OPENAI: openai_error,
    Api.RESPONSES: responses_error,
    Api.ANTHROPIC: anthropic_error,
    Api.GEMINI: gemini_error,
    Api.BEDROCK: bedrock_error,
    Api.OLLAMA: ollama_error,
}
_CUTS: dict[Framing, Callable[[], Cut]] = {
    Framing.SSE: SSECut,
    Framing.EVENTSTREAM: MessageRelay,
    Framing.NDJSON: LineRelay,
}
FORMATS: dict[Api, StreamFormat] = {
    api: StreamFormat(api, spec.framing, _CUTS[spec.framing], _ERRORS[api]) for api, spec in SPECS.items()
}
# A stream on a path that names no API: read by its framing's usual API.
_BY_FRAMING: dict[str, Api] = {SPECS[api].content_type: api for api in (Api.OPENAI, Api.BEDROCK, Api.OLLAMA)}


# How each API takes the pool's own key (PoolConfig.api_key_env) upstream: Anthropic's `x-api-key`
# (docs.claude.com/en/api/overview), Gemini's `x-goog-api-key` (ai.google.dev/api#authentication); the others a Bearer
# token (OpenAI; Bedrock API keys, docs.aws.amazon.com/bedrock/latest/userguide/api-keys-use.html; Ollama's cloud).
KEY_HEADERS: dict[Api, str] = {Api.ANTHROPIC: "x-api-key", Api.GEMINI: "x-goog-api-key"}
CREDENTIAL_HEADERS = frozenset({"authorization", *KEY_HEADERS.values()})


def upstream_credential(api: Api | None, key: str) -> tuple[str, str]:
    """The header that carries the pool's key to an upstream of this API."""
    name = KEY_HEADERS.get(api) if api is not None else None
    return (name, key) if name is not None else ("Authorization", f"Bearer {key}")


def for_response(route: Api | None, content_type: str | None) -> StreamFormat | None:
    """The format a response is relayed as: None when its Content-Type is no stream format's."""
    if content_type is None:
        return None
    media = content_type.partition(";")[0].strip().lower()
    if route is not None and SPECS[route].content_type == media:
        return FORMATS[route]
    default = _BY_FRAMING.get(media)
    return FORMATS[default] if default is not None else None
