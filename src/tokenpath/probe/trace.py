"""What one stream looked like from the client: each read with its timestamp, each frame with its arrival.

`TraceRecorder` is sans-IO: whoever owns the socket calls `on_read(t_ns, data)` right as a read returns, so the
blocking probe and the asyncio load client record exactly the same way.

What a trace keeps is bounded (`TraceLimits`): the peer decides how much it sends, so reads and frames beyond the
limits are counted, never stored. Every figure of a stream (frames, arrivals, frames per read, bursts, TTFB, TTFT,
total) comes from the counts; only the gaps between arrivals and per-frame joins read the kept lists.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from tokenpath.wire.client import ResponseHead, ResponseParser
from tokenpath.wire.openai import FrameKind
from tokenpath.wire.sse import Frame, SSEParser

ERROR_BODY_PREVIEW = 300  # body bytes kept verbatim, so a non-2xx answer can be shown in the error


@dataclass(frozen=True, slots=True)
class TraceLimits:
    """How much of one stream a trace keeps. The defaults hold a whole stub stream at its largest (100,000 tokens)
    short of its last few frames, in ~40 MB at most; the monitor, which reads only the figures, keeps less."""

    reads: int = 65_536  # Read records (~130 B each)
    frames: int = 65_536  # FrameArrival records with their Frame (~300 B each plus the frame's bytes)
    frame_bytes: int = 16 << 20  # raw bytes of the kept frames, summed


DEFAULT_LIMITS = TraceLimits()


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
    reads: list[Read] = field(default_factory=list)  # the first TraceLimits.reads reads
    frames: list[FrameArrival] = field(default_factory=list)  # the first frames, within TraceLimits
    t_first_byte_ns: int | None = None
    t_end_ns: int | None = None
    first_content: int | None = None  # index (among all frames, kept or not) of the first OpenAI content frame
    t_first_content_ns: int | None = None  # when the read that completed it returned
    trailing_bytes: int = 0  # SSE bytes after the last complete frame when the body ended
    read_count: int = 0  # every read, kept or not
    frame_count: int = 0  # every frame, kept or not
    bursts: Counter[int] = field(default_factory=Counter)  # frames completed by one arrival -> arrivals
    foreign_frames: int = 0  # data frames before the first content frame that are JSON but not OpenAI chunks
    foreign_hint: str = ""  # what the first of them called itself (its `event:` name or JSON "type")

    @property
    def arrival_count(self) -> int:
        """Reads that completed at least one frame: each is one entry of `bursts`."""
        return sum(self.bursts.values())

    @property
    def reads_dropped(self) -> int:
        return self.read_count - len(self.reads)

    @property
    def frames_dropped(self) -> int:
        return self.frame_count - len(self.frames)


def _hint(frame: Frame) -> str:
    if frame.event:
        return "event: " + frame.event.decode("utf-8", "replace")[:64]
    try:
        kind = json.loads(frame.data or b"").get("type")
    except (ValueError, AttributeError, RecursionError):
        kind = None
    return f'"type": {str(kind)[:64]}' if kind is not None else "JSON without `choices`"


class TraceRecorder:
    def __init__(self, stream_id: str, t_sent_ns: int, limits: TraceLimits = DEFAULT_LIMITS) -> None:
        self.trace = Trace(stream_id, t_sent_ns)
        self.response = ResponseParser()
        self._sse = SSEParser()
        self.body_preview = bytearray()
        self.limits = limits
        self._frame_bytes_left = limits.frame_bytes
        self._keeping = limits.frames > 0

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
        frames = self._sse.feed(body) if body else []  # an event past the parser's limit: ResponseTooLarge
        n = len(frames)
        index = trace.read_count
        trace.read_count += 1
        if index < self.limits.reads:
            trace.reads.append(Read(t_ns, len(data), n))
        if n:
            base = trace.frame_count
            trace.frame_count += n
            trace.bursts[n] += 1
            if self._keeping:
                self._keep(t_ns, index, frames)
            if trace.first_content is None:
                # Classified only until the first content frame: it is all TTFT needs, and JSON-decoding
                # every frame would dominate the client's CPU under load.
                for offset, f in enumerate(frames):
                    kind = f.kind
                    if kind is FrameKind.CONTENT:
                        trace.first_content = base + offset
                        trace.t_first_content_ns = t_ns
                        break
                    if kind is FrameKind.FOREIGN:
                        if not trace.foreign_frames:
                            trace.foreign_hint = _hint(f)
                        trace.foreign_frames += 1
        if self.response.complete:
            self._finish(t_ns)
        return n

    def _keep(self, t_ns: int, index: int, frames: list[Frame]) -> None:
        kept = self.trace.frames
        room = self.limits.frames - len(kept)
        for f in frames:
            if room <= 0 or len(f.raw) > self._frame_bytes_left:
                self._keeping = False  # counted, not stored, and none after it: kept frame k is frame k
                return
            kept.append(FrameArrival(t_ns, index, f))
            room -= 1
            self._frame_bytes_left -= len(f.raw)

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
