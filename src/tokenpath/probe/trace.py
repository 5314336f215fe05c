"""What one stream looked like from the client: each read with its timestamp, each frame with its arrival.

`TraceRecorder` is sans-IO: whoever owns the socket calls `on_read(t_ns, data)` right as a read returns, so the
blocking probe and the asyncio load client record exactly the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenpath.wire.client import ResponseHead, ResponseParser
from tokenpath.wire.openai import FrameKind
from tokenpath.wire.sse import Frame, SSEParser

ERROR_BODY_PREVIEW = 300  # body bytes kept verbatim, so a non-2xx answer can be shown in the error


@dataclass(slots=True, frozen=True)
class Read:
    """One recv() that returned data. An *arrival* is a read with frames >= 1."""

    t_ns: int
    nbytes: int
    frames: int  # SSE frames this read completed


@dataclass(slots=True, frozen=True)
class FrameArrival:
    t_ns: int  # when the read that completed this frame returned
    read_index: int
    frame: Frame

    @property
    def kind(self) -> FrameKind:
        return self.frame.kind


@dataclass(slots=True)
class Trace:
    stream_id: str
    t_sent_ns: int  # the last request byte was written
    head: ResponseHead | None = None
    reads: list[Read] = field(default_factory=list)
    frames: list[FrameArrival] = field(default_factory=list)
    t_first_byte_ns: int | None = None
    t_end_ns: int | None = None
    first_content: int | None = None  # index into frames of the first frame that carries content
    trailing_bytes: int = 0  # SSE bytes after the last complete frame when the body ended


class TraceRecorder:
    def __init__(self, stream_id: str, t_sent_ns: int) -> None:
        self.trace = Trace(stream_id, t_sent_ns)
        self.response = ResponseParser()
        self._sse = SSEParser()
        self.body_preview = bytearray()

    @property
    def complete(self) -> bool:
        return self.response.complete

    def on_read(self, t_ns: int, data: bytes) -> int:
        """Record one read; returns how many frames it completed."""
        trace = self.trace
        if trace.t_first_byte_ns is None:
            trace.t_first_byte_ns = t_ns
        body = self.response.feed(data)
        if trace.head is None and self.response.head is not None:
            trace.head = self.response.head
        if body and len(self.body_preview) < ERROR_BODY_PREVIEW:
            self.body_preview += body[: ERROR_BODY_PREVIEW - len(self.body_preview)]
        frames = self._sse.feed(body) if body else []
        index = len(trace.reads)
        trace.reads.append(Read(t_ns, len(data), len(frames)))
        if frames:
            base = len(trace.frames)
            trace.frames.extend(FrameArrival(t_ns, index, f) for f in frames)
            if trace.first_content is None:
                # Classified only until the first content frame: it is all TTFT needs, and JSON-decoding
                # every frame would dominate the client's CPU under load.
                for offset, f in enumerate(frames):
                    if f.kind is FrameKind.CONTENT:
                        trace.first_content = base + offset
                        break
        if self.response.complete:
            self._finish(t_ns)
        return len(frames)

    def on_eof(self, t_ns: int) -> None:
        """The peer closed. Raises ProtocolError if the response was cut short."""
        self.response.feed_eof()
        self._finish(t_ns)

    def result(self) -> Trace:
        return self.trace

    def _finish(self, t_ns: int) -> None:
        if self.trace.t_end_ns is None:
            self.trace.t_end_ns = t_ns
            self.trace.trailing_bytes = self._sse.pending_bytes()
