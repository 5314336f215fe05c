"""What declares a streaming API format: its name (Api), its framing, and ApiSpec, the one record of everything that
varies with a format. Each format fills one in (wire/formats/, one module each); wire/apis.py is the registry every
reader of a format asks (the stub, the probe/load/monitor clients, the gateway, the help texts).

Only declarations here, no format's facts: so the format modules and the registry import this, never each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, Protocol

from tokenpath.wire.kinds import FrameKind


class Api(StrEnum):
    OPENAI = "openai"  # chat completions, SSE, `data: [DONE]` at the end
    RESPONSES = "responses"  # OpenAI Responses API, SSE with `event:` names and sequence numbers
    REALTIME = "realtime"  # OpenAI Realtime API, WebSocket only: JSON events, one per message
    ANTHROPIC = "anthropic"  # Messages API, SSE with `event:` names, no [DONE]
    GEMINI = "gemini"  # streamGenerateContent?alt=sse, SSE of GenerateContentResponse objects
    BEDROCK = "bedrock"  # ConverseStream, binary application/vnd.amazon.eventstream messages with CRCs
    OLLAMA = "ollama"  # /api/chat, NDJSON: one JSON object per line


class Framing(StrEnum):
    SSE = "sse"
    EVENTSTREAM = "eventstream"  # AWS event stream: prelude (total length, headers length, CRC), headers, payload, CRC
    NDJSON = "ndjson"

    @property
    def binary(self) -> bool:
        """Its frames are binary messages, not JSON text (a frame of one kind is never one of the other's formats)."""
        return self is Framing.EVENTSTREAM


class WireFrame(Protocol):
    """A frame of any framing: an SSE event, an event-stream message, an NDJSON line."""

    @property
    def raw(self) -> bytes: ...  # its exact bytes on the wire
    @property
    def data(self) -> bytes | None: ...  # the SSE data lines, the message's payload, the line's JSON text


JSON_HEADERS = (("Content-Type", "application/json"),)


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An error in the format's own shape, as its clients parse it: the body and the headers that type it."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = JSON_HEADERS


class Fault(Enum):
    """Why a stream that has started is ended with the format's error frame: the shapes that can say so do."""

    TIMEOUT = "timeout"  # the upstream was silent too long, or the stream ran past its total limit
    UPSTREAM_BROKE = "upstream_broke"  # the upstream's stream broke off (a close, a truncated body)
    SHUTDOWN = "shutdown"  # the server is going away
    INTERNAL = "internal"  # anything else (a frame too large, a malformed one)


@dataclass(frozen=True, slots=True)
class StreamFailure:
    """What an error frame after the head says: the message, the server's own code for it, and why."""

    message: str
    code: str
    fault: Fault


@dataclass(frozen=True, slots=True)
class StreamAsk:
    """What a client's smallest streaming request asks, in any format."""

    model: str
    prompt: str
    max_tokens: int | None
    stream_id: str  # rides in the body too where the format has a user field


@dataclass(frozen=True, slots=True)
class Shape:
    """What a frame of an unknown format looks like: enough to say which format it is in (ApiSpec.recognises)."""

    data: bytes | None  # an SSE event's data lines, an NDJSON line's JSON text, an event-stream message's payload
    obj: Any  # data's JSON value; None when it is not JSON
    name: str  # JSON text: its "type" or its SSE `event:` name; an event-stream message: its `:event-type`; or ""


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """Everything that varies with one streaming API format. The frame callables take the format's own frame type
    (wire/sse.Frame, wire/eventstream.EventMessage, wire/ndjson.JsonLine, as its framing makes them)."""

    api: Api
    framing: Framing
    route: str  # the path a request streams on; `{model}` is replaced by the model
    content_type: str  # what a conforming server answers with
    display_name: str  # how a note names the format ("Responses API")
    # OpenTelemetry GenAI conventions: gen_ai.operation.name and gen_ai.provider.name (monitor/otel_names.py)
    otel_operation: str
    otel_provider: str
    classify: Callable[[Any], FrameKind]  # frame -> what it is: where the first content and reasoning are
    recognises: Callable[[Shape], bool]  # a frame read as another format's is one of this format's
    content_text: Callable[[Any], object]  # a content frame's JSON value -> the text it carries (where it puts it)
    error_reply: Callable[[int, str, str | None], ErrorReply]  # (status, message, code): the error before a head
    error_frame: Callable[[StreamFailure, bytes], bytes]  # (failure, the whole frames relayed): the stream's last
    stream_body: Callable[[StreamAsk], dict[str, Any]]  # the smallest valid streaming request body
    # A final frame that is not a DONE frame (Gemini's last response, Ollama's last line may carry content too).
    ends_also: Callable[[Any], bool] | None = None
    key_header: str | None = None  # the header an API key goes in; None: `Authorization: Bearer KEY`
    key_query: str | None = None  # a query parameter a client may send its API key in instead (Gemini's `?key=`)
    headers: tuple[tuple[str, str], ...] = ()  # request headers the format requires (Anthropic's version)
    aliases: tuple[str, ...] = ()  # other documented paths of the same API (routed as `route` is)
    # What a server of this format may send while it has nothing to say (the gateway's keep-alive while its upstream
    # is silent): the format's own, or None where it has none its clients are known to skip. Never invented: a frame
    # a format's official SDK does not expect turns a silence a path might cut into a stream that certainly fails.
    keepalive: bytes | None = None
    # The route also takes a WebSocket upgrade: a `response.create` message in, the stream's events out, one per
    # message (OpenAI's Responses WebSocket mode); stub/websocket.py serves it, probe/wsstream.py measures it.
    websocket: bool = False
    # The format has no HTTP stream at all, only its WebSocket session (OpenAI's Realtime API): SSE on it is refused
    # by name (probe, matrix); its events are read re-framed as SSE events, as a WebSocket mode's are.
    websocket_only: bool = False
    # Over WebSocket: the client events that ask for one response, from the smallest streaming body (stream_body):
    # Responses' one `response.create`, Realtime's `conversation.item.create` + `response.create`.
    ws_request: Callable[[dict[str, Any]], tuple[dict[str, Any], ...]] | None = None
    # Over WebSocket: the `type` prefixes of the session's own events (Realtime's session.created, the conversation's
    # items): messages on the socket, but no part of a response's stream (never its frames, nor the write join's).
    ws_session_events: tuple[str, ...] = ()

    def path(self, model: str) -> str:
        return self.route.replace("{model}", model)

    def credential(self, key: str) -> tuple[str, str]:
        """The header that carries an API key to a server of this format."""
        return (self.key_header, key) if self.key_header is not None else ("Authorization", f"Bearer {key}")
