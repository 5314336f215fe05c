"""One frame reader for every streaming API format: what the probe (and, later, the load client, the monitor and
the gateway's TTFT) feeds a response body to, whatever the format.

    reader = frame_reader(Api.ANTHROPIC)
    for frame in reader.feed(body_bytes):      # in any split; the frames this read completed
        reader.kind(frame), len(frame.raw)     # FrameKind (decided lazily, per format), size on the wire
    reader.close()                             # at the body's end: a truncated last frame raises

Frames are each format's own unit, as its framing (ApiSpec.framing) makes them: an SSE event (wire/sse.py), an
event-stream message (wire/eventstream.py), an NDJSON line (wire/ndjson.py). Each has `raw` (its exact bytes) and
`data` (the SSE data lines, the message's payload, the line's JSON text); what a frame is (its FrameKind) and what
ends a stream are the format's spec's to say.

At the body's end an SSE event that never ended is dropped, as the event-stream spec says (the trace counts its
bytes as trailing bytes); an event-stream message or NDJSON line cut short is a StreamFormatError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tokenpath.wire.apis import SPECS, Api, ApiSpec, Framing, recognise
from tokenpath.wire.apispec import WireFrame
from tokenpath.wire.eventstream import MAX_MESSAGE_BYTES, EventMessage, EventStreamParser
from tokenpath.wire.formats.shared import hint
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.ndjson import MAX_LINE_BYTES, NDJSONParser
from tokenpath.wire.sse import MAX_EVENT_BYTES, Frame, SSEParser

__all__ = ["FrameReader", "WireFrame", "apis_for_content_type", "frame_reader"]


class _Framer(Protocol):
    def feed(self, data: bytes) -> Sequence[Any]: ...
    def pending_bytes(self) -> int: ...


class FrameReader:
    """A format's framer (sans-IO) and its classification, behind one interface."""

    def __init__(self, api: Api, max_frame_bytes: int | None = None) -> None:
        """`max_frame_bytes`: the most one unfinished frame may hold (default: each framer's own limit, 8 MB)."""
        self.api = api
        self.spec: ApiSpec = SPECS[api]
        framing = self.spec.framing
        self._framer: _Framer
        self._close: Callable[[], Sequence[WireFrame]]
        if framing is Framing.SSE:
            self._framer = SSEParser(max_frame_bytes or MAX_EVENT_BYTES)
            self._close = list  # WHATWG: an event the stream ends inside is discarded (no frame, no error)
        elif framing is Framing.EVENTSTREAM:
            self._framer = parser = EventStreamParser(max_frame_bytes or MAX_MESSAGE_BYTES)
            self._close = parser.close
        else:
            self._framer = lines = NDJSONParser(max_frame_bytes or MAX_LINE_BYTES)
            self._close = lines.close
        self._classify = self.spec.classify
        self._ends_also = self.spec.ends_also  # a final frame that is not a DONE frame (Gemini's, Ollama's last)

    def feed(self, data: bytes) -> Sequence[WireFrame]:
        """The frames this read completed. Raises ResponseTooLarge past a frame's limit, StreamFormatError for
        bytes that break the format (a bad CRC)."""
        frames: Sequence[WireFrame] = self._framer.feed(data)
        return frames

    def kind(self, frame: WireFrame) -> FrameKind:
        return self._classify(frame)

    def ends(self, frame: WireFrame) -> bool:
        """The frame is one a stream of this format ends with: its final event (`[DONE]`, `message_stop`,
        `response.completed`, Bedrock's `messageStop`, Ollama's `"done": true`, a Gemini response with a
        `finishReason`) or its own error. A body that ends without one was cut."""
        kind = self._classify(frame)
        if kind is FrameKind.DONE or kind is FrameKind.ERROR:
            return True
        also = self._ends_also
        return also is not None and also(frame)

    def close(self) -> Sequence[WireFrame]:
        """The body ended: the frames that only its end completes (an NDJSON line without a line end). Raises
        StreamFormatError for a message or line cut short; an unfinished SSE event is left in pending_bytes()."""
        return self._close()

    def pending_bytes(self) -> int:
        return self._framer.pending_bytes()

    def recognise(self, frame: WireFrame) -> Api | None:
        """The API format a (FOREIGN) frame is in, when its shape says so."""
        return recognise(frame)

    def hint(self, frame: WireFrame) -> str:
        """What a (FOREIGN) frame calls itself, for a note."""
        if isinstance(frame, EventMessage):
            return f":event-type {frame.header(':event-type')}, :message-type {frame.header(':message-type')}"
        return hint(frame.data, frame.event if isinstance(frame, Frame) else None)


def frame_reader(api: Api, max_frame_bytes: int | None = None) -> FrameReader:
    return FrameReader(api, max_frame_bytes)


def apis_for_content_type(content_type: str) -> list[Api]:
    """The formats a response's Content-Type (lower case, no parameters) is the one of."""
    return [api for api, spec in SPECS.items() if spec.content_type == content_type]
