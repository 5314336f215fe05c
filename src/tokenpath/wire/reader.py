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

from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

from tokenpath.errors import PeerError
from tokenpath.wire.apis import SPECS, Api, ApiSpec, Framing, recognise
from tokenpath.wire.apispec import WireFrame
from tokenpath.wire.ending import LastWord
from tokenpath.wire.eventstream import MAX_MESSAGE_BYTES, EventMessage, EventStreamParser, last_messages
from tokenpath.wire.formats.shared import hint
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.ndjson import MAX_LINE_BYTES, NDJSONParser
from tokenpath.wire.sse import MAX_EVENT_BYTES, UTF8_BOM, Frame, SSEParser

__all__ = ["FrameReader", "LastWord", "WireFrame", "apis_for_content_type", "frame_reader"]

# FrameReader.tail: the frames looked at, and the first window of bytes looked in (it grows as needed). The final
# events are small ([DONE], message_stop, Ollama's last line) but for the Responses API's response.completed, which
# repeats the whole answer: the window grows until it holds it.
TAIL_FRAMES = 2
TAIL_WINDOW_BYTES = 1024
# last_word_of's short way, remembered: a format's final event is the same bytes in most streams (`data: [DONE]`,
# Anthropic's message_stop), and what one says is its bytes' and its format's alone. Small events only, a bounded
# number (the Responses API's response.completed repeats each answer: never the same twice, never kept).
FINAL_SAID_MAX_BYTES = 256
FINAL_SAID_MAX_EVENTS = 64
_FINAL_SAID: dict[tuple[Api, bytes], LastWord] = {}


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

    def scan(self, data: bytes) -> Generator[WireFrame, None, None]:
        """`feed(data)`'s frames, parsed as they are taken: an SSE read is fed one event at a time (cut after each
        blank line of LFs), an NDJSON read one line at a time, so a caller that stops at the frame it looks for
        (the first content frame) leaves the rest of the read unparsed. Every cut is one the framers take as any
        other split (the conformance battery holds them to that). A reader whose scan was stopped has not seen the
        rest of that read: its owner drops it then (the load client's recorder does, whose first reads hold a dozen
        frames when its loop is busy). An event-stream read (binary, length-prefixed) is fed whole. The gateway's
        first-token scan keeps feed(): its upstream reads are one frame each, and a generator's resumptions cost
        its request ~8 Python calls (tests/gateway/test_loop_counts.py)."""
        framing = self.spec.framing
        if framing is Framing.EVENTSTREAM:
            yield from self._framer.feed(data)
            return
        end = b"\n\n" if framing is Framing.SSE else b"\n"
        feed, start, last = self._framer.feed, 0, len(data) - len(end)
        while 0 <= (found := data.find(end, start)) < last:  # a cut at the read's very end is the last feed's
            cut = found + len(end)
            yield from feed(data[start:cut])
            start = cut
        yield from feed(data[start:] if start else data)

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

    def last_word(self, frames: Sequence[WireFrame]) -> LastWord:
        """What a body's last frames (in order) said about its end: the last of them that `ends` it decides (its
        error frame: ERROR, else FINAL); NOTHING when none does, UNFRAMED when the last frame with data is bare
        text in no format's shape (the stub's `format` plain: `data: 17`). Frames after the final event (a usage
        chunk, a keep-alive) change nothing. The one rule of a stream's end (wire/ending.py): the gateway's relay
        and every client ask here."""
        classify = self._classify
        for frame in reversed(frames):
            if self.ends(frame):
                return LastWord.ERROR if classify(frame) is FrameKind.ERROR else LastWord.FINAL
        if self.spec.framing is Framing.SSE:  # every format's SSE data is a JSON object: bare text is no format's
            data = next((frame.data for frame in reversed(frames) if frame.data), None)
            if data is not None and not data.lstrip().startswith(b"{"):
                return LastWord.UNFRAMED
        return LastWord.NOTHING

    def last_word_of(self, body: bytes) -> LastWord:
        """`last_word(tail(body))`, the common case first: an SSE body that ends on a blank line (LF) with a final
        or error event parses that one event alone, from the blank line before it (a boundary however the stream
        was split: an LF right after a line end is an empty line). Anything else (CRLF or CR line ends, a frame
        after the final one, a body ended inside a frame) takes tail's way. The load client asks this once per
        stream; tail's 1 KiB window was ~4 % of its CPU. tests/wire/test_reader_tail.py holds the two equal. One
        body tells them apart: an event over MAX_EVENT_BYTES before the final one, where tail's growing window gives
        up (no frame: NOTHING) and this reads the final event the body does end with."""
        if self.spec.framing is Framing.SSE and body.endswith(b"\n\n"):
            boundary = body.rfind(b"\n\n", 0, len(body) - 2)
            # A BOM there is no BOM to a parser mid-stream (only the stream's first bytes may be one): tail's way.
            if boundary >= 0 and not body.startswith(UTF8_BOM, boundary + 2):
                final = body[boundary + 2 :]
                said = _FINAL_SAID.get((self.api, final))
                if said is not None:
                    return said
                try:
                    frames = SSEParser(MAX_EVENT_BYTES).feed(final)
                except PeerError:
                    frames = []
                if len(frames) == 1 and self.ends(frames[0]):
                    said = LastWord.ERROR if self._classify(frames[0]) is FrameKind.ERROR else LastWord.FINAL
                    if len(final) <= FINAL_SAID_MAX_BYTES and len(_FINAL_SAID) < FINAL_SAID_MAX_EVENTS:
                        _FINAL_SAID[self.api, final] = said
                    return said
        return self.last_word(self.tail(body))

    def tail(self, body: bytes, count: int = TAIL_FRAMES) -> Sequence[WireFrame]:
        """The last whole frames of a body (at least `count` when it has them), found from its end without parsing
        the rest: what a client that kept the body's bytes but not its frames (load's lean recorder) hands
        last_word. Uses a fresh framer of this reader's format; this reader's own state is untouched.

        SSE and NDJSON frames end at line ends, so a framer started anywhere is back in step after the first frame
        end it meets: the window grows from the end until it holds `count` frames after that first, partial one.
        Event-stream messages are found from the end by their preludes (wire/eventstream.py last_messages). Bytes
        after the last whole frame (a frame the body ended inside) are no frame."""
        try:
            if self.spec.framing is Framing.EVENTSTREAM:
                return last_messages(body, count)
            window = TAIL_WINDOW_BYTES
            while True:
                start = max(0, len(body) - window)
                frames: list[WireFrame]
                if self.spec.framing is Framing.SSE:
                    frames = list(SSEParser(MAX_EVENT_BYTES).feed(body[start:]))
                else:  # a last line without its line end is a line when it is whole JSON (NDJSONParser.close)
                    lines = NDJSONParser()
                    frames = [*lines.feed(body[start:]), *_whole_last_line(lines)]
                if start:
                    frames = frames[1:]  # begun inside a frame (or at its start: one fewer, never a false one)
                if len(frames) >= count or not start:
                    return frames
                window *= 4
        except PeerError:  # a frame past its limit, a message whose CRC fails: no frame the end can be read from
            return []

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
    """The formats a response's Content-Type (lower case, no parameters) is the one of (never a WebSocket-only
    format's: it has no HTTP response)."""
    return [api for api, spec in SPECS.items() if spec.content_type == content_type and not spec.websocket_only]


def _whole_last_line(lines: NDJSONParser) -> Sequence[WireFrame]:
    """The line a body's end completes, or none: a line cut short is no frame (tail's answer, never an error)."""
    try:
        return lines.close()
    except PeerError:
        return []
