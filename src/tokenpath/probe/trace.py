"""What one stream looked like from the client: each read with its timestamp, each frame with its arrival.

Frames are the API format's own units (wire/reader.py: SSE events, event-stream messages, NDJSON lines). TTFT is
the arrival of the first CONTENT frame; the first token, of the first REASONING or CONTENT frame (a reasoning
model's thinking comes first and is never TTFT).

Under compression (a Content-Encoding the client asked for) the body is decoded as it arrives
(wire/contentcoding.py) between the HTTP framing and the frame reader: frames are counted in the decoded stream, an
arrival is a read that completed at least one decoded frame, and a read that only fed the decompressor is a read,
not an arrival (so `read_count` and `arrival_count` differ by it).

`TraceRecorder` is sans-IO: whoever owns the socket calls `on_read(t_ns, data)` right as a read returns, so the
blocking probe and the asyncio load client record exactly the same way.

How the stream ended (`Trace.end`, wire/ending.py) is read at its end from its last few frames, kept as they pass
(TAIL_FRAMES references): the format's final event, its error frame, or neither, and how HTTP ended the body. A
body that breaks instead (a reset, no last chunk) raises, as it always has, with its end attached (`cut`;
wire/ending.py STREAM_END) and, from the read loop, the trace so far (PARTIAL_TRACE).

What a trace keeps is bounded (`TraceLimits`): the peer decides how much it sends, so reads and frames beyond the
limits are counted, never stored. Every figure of a stream (frames, arrivals, frames per read, bursts, TTFB, TTFT,
total) comes from the counts; only the gaps between arrivals and per-frame joins read the kept lists.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenpath.errors import ContentEncodingError, ResponseTooLarge, StreamFormatError
from tokenpath.probe.h3figures import H3Figures
from tokenpath.probe.wsfigures import WsFigures
from tokenpath.riders import Rider
from tokenpath.wire.apis import Api, Framing
from tokenpath.wire.client import ResponseHead, ResponseParser
from tokenpath.wire.contentcoding import Decoder, IdentityDecoder, decoder_for
from tokenpath.wire.ending import (
    STREAM_END,
    BodyEnd,
    LastWord,
    StreamEnd,
    body_end,
    broken_by,
    classify_end,
    error_detail,
    unfinished,
)
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import FrameReader, WireFrame, frame_reader
from tokenpath.wire.sse import MAX_EVENT_BYTES

ERROR_BODY_PREVIEW = 300  # body bytes kept verbatim, so a non-2xx answer can be shown in the error
# The last frames kept (references) for the stream's end: its final event and whatever follows it (a usage chunk,
# Bedrock's metadata after messageStop) are within them.
TAIL_FRAMES = 8


@dataclass(frozen=True, slots=True)
class TraceLimits:
    """How much of one stream a trace keeps. The defaults hold a whole stub stream at its largest (100,000 tokens)
    short of its last few frames, in ~40 MB at most; the monitor, which reads only the figures, keeps less."""

    reads: int = 65_536  # Read records (~130 B each)
    frames: int = 65_536  # FrameArrival records with their Frame (~300 B each plus the frame's bytes)
    frame_bytes: int = 16 << 20  # raw bytes of the kept frames, summed
    event_bytes: int = MAX_EVENT_BYTES  # one unfinished frame held by the reader: past it, ResponseTooLarge
    # The stream's bytes read in all (head and body as they came, every transport): past it, ResponseTooLarge. None:
    # no bound (a user's probe reads what it asked for); the monitor bounds it by the answer it asked for.
    response_bytes: int | None = None


DEFAULT_LIMITS = TraceLimits()


@dataclass(slots=True, frozen=True)
class Read:
    """One recv() that returned data. An *arrival* is a read with frames >= 1."""

    t_ns: int
    nbytes: int
    frames: int  # frames this read completed (0 bytes: the end of the body, completing a last NDJSON line)


@dataclass(slots=True, frozen=True)
class FrameArrival:
    t_ns: int  # when the read that completed this frame returned
    read_index: int
    frame: WireFrame  # wire/sse.py Frame, wire/eventstream.py EventMessage or wire/ndjson.py JsonLine


# SENT_RULE: a request's sent time (TTFB's and TTFT's start) is read just before the write that carries its last
# byte, on every transport and in both clients (the probe and the load client). A peer on this host is woken inside
# that write and, on a busy core, runs before the write returns: a time read after it counted TTFT from later than the
# server's start (a buffering relay's TTFT measured 6 ms short of the stream it held, on a loaded CI host). Before it,
# the figure includes one write's own cost (microseconds: a request is far below a socket buffer).
@dataclass(slots=True)
class Trace:
    stream_id: str
    t_sent_ns: int  # the last request byte was written: read just before the write that carries it (SENT_RULE)
    head: ResponseHead | None = None
    reads: list[Read] = field(default_factory=list)  # the first TraceLimits.reads reads
    frames: list[FrameArrival] = field(default_factory=list)  # the first frames, within TraceLimits
    t_first_byte_ns: int | None = None  # any byte of the response: an interim 1xx head's too (TTFB, design.md)
    t_head_ns: int | None = None  # the read that completed the final response head
    t_last_byte_ns: int | None = None  # the last read that brought bytes of this response
    t_end_ns: int | None = None
    end: StreamEnd | None = None  # how the stream ended (wire/ending.py): set once it has
    api: Api = Api.OPENAI  # the format the body was read as
    first_content: int | None = None  # index (among all frames, kept or not) of the first content frame
    t_first_content_ns: int | None = None  # when the read that completed it returned
    first_token: int | None = None  # index of the first reasoning or content frame
    t_first_token_ns: int | None = None
    trailing_bytes: int = 0  # SSE bytes after the last complete frame when the body ended
    read_count: int = 0  # every read, kept or not
    frame_count: int = 0  # every frame, kept or not
    bursts: Counter[int] = field(default_factory=Counter)  # frames completed by one arrival -> arrivals
    foreign_frames: int = 0  # frames before the first content frame that are not events of `api`
    foreign_hint: str = ""  # what the first of them called itself (its `event:` name or JSON "type")
    foreign_api: Api | None = None  # the format the first of them is in, when its shape says so
    error_hint: str = ""  # the first error frame before any content (its data, shortened)
    invalid_utf8_frames: int = 0  # frames that are not UTF-8, which an event stream always is (WHATWG)
    content_encoding: str = "identity"  # the response's Content-Encoding as decoded ("gzip", "br", "gzip, br"...)
    http_version: str = "1.1"  # "2" (--http2), "3" (--http3): reads are then the reads that advanced this stream
    h2: H2Figures | None = None  # flow control and DATA frames, over HTTP/2
    h3: H3Figures | None = None  # the handshake, UDP reads, flow control and arrival times, over HTTP/3
    ws: WsFigures | None = None  # the upgrade, messages per read and the close, over WebSocket (probe/wsstream.py)

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


@dataclass(frozen=True, slots=True)
class H2Figures:
    """One HTTP/2 stream's transport figures (wire/h2client.py FlowStats, frozen when the stream ended)."""

    window: str  # the client's receive windows as stated: "default", "browser", BYTES or STREAM:CONNECTION
    data_frames: int  # DATA frames of this stream (an empty one carrying END_STREAM counts)
    data_reads: int  # reads that brought this stream DATA
    flow_control_stalls: int  # reads that left its window (or the connection's) below one frame before its end
    stall_ms: float  # from each such read to the next one that brought it data: as far as the client can tell
    min_window: int | None  # the lowest receive window a read left it (before our WINDOW_UPDATE)
    connection_reads: int  # socket reads of the connection while the stream ran (every stream's bytes)

    @property
    def data_frames_per_read(self) -> float | None:
        return self.data_frames / self.data_reads if self.data_reads else None

    def to_json(self) -> dict[str, Any]:
        per_read = self.data_frames_per_read
        return {
            "window": self.window,
            "data_frames": self.data_frames,
            "data_reads": self.data_reads,
            "data_frames_per_read": round(per_read, 3) if per_read is not None else None,
            "flow_control_stalls": self.flow_control_stalls,
            "stall_ms": self.stall_ms,
            "min_window": self.min_window,
            "connection_reads": self.connection_reads,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> H2Figures:
        return cls(
            window=str(obj.get("window", "")),
            data_frames=int(obj.get("data_frames", 0)),
            data_reads=int(obj.get("data_reads", 0)),
            flow_control_stalls=int(obj.get("flow_control_stalls", 0)),
            stall_ms=float(obj.get("stall_ms", 0.0)),
            min_window=obj.get("min_window"),
            connection_reads=int(obj.get("connection_reads", 0)),
        )


ERROR_HINT_CHARS = 200  # of an error frame's data, shown in the note of a stream without content


def _is_utf8(raw: bytes) -> bool:
    if raw.isascii():  # nearly every frame, and much cheaper than a decode
        return True
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


class TraceRecorder:
    def __init__(
        self, stream_id: str, t_sent_ns: int, limits: TraceLimits = DEFAULT_LIMITS, api: Api = Api.OPENAI
    ) -> None:
        self.trace = Trace(stream_id, t_sent_ns, api=api)
        self.response = ResponseParser()
        self._reader: FrameReader = frame_reader(api, limits.event_bytes)
        framing = self._reader.spec.framing
        # Whether the body goes to the reader: decided on the head. An SSE body always does (the SSE parser reads
        # anything without failing, as it always has); a binary or NDJSON reader only reads a 2xx answer in its
        # own Content-Type, so a JSON error body is reported as the status it came with, not as a bad CRC.
        self._reading: bool | None = True if framing is Framing.SSE else None
        self._closed = False
        self._text = framing is not Framing.EVENTSTREAM  # SSE and NDJSON are UTF-8; event-stream is binary
        self.body_preview = bytearray()
        self.limits = limits
        self._frame_bytes_left = limits.frame_bytes
        self._bytes_read = 0
        self._keeping = limits.frames > 0
        self._decoder: Decoder = IdentityDecoder()  # replaced on the head by its Content-Encoding's
        self._ended = False  # over HTTP/2: the stream's END_STREAM came
        self._tail: deque[WireFrame] = deque(maxlen=TAIL_FRAMES)  # the last frames: what the end is read from

    @property
    def complete(self) -> bool:
        return self.response.complete or self._ended

    def on_read(self, t_ns: int, data: bytes) -> int:
        """Record one read; returns how many frames it completed."""
        if self.trace.t_first_byte_ns is None:
            self.trace.t_first_byte_ns = t_ns
        if data:
            self.trace.t_last_byte_ns = t_ns
        body = self.response.feed(data)
        return self._advance(t_ns, len(data), self.response.head, body, self.response.complete)

    def on_h2_read(self, t_ns: int, nbytes: int, head: ResponseHead | None, body: bytes, ended: bool) -> int:
        """Record one HTTP/2 read that advanced this stream (its head, its DATA payload, its end): the read's
        `nbytes` are this stream's. HTTP/2 has no HTTP/1.1 framing to parse: the head and the body come as events
        (wire/h2client.py). Returns how many frames it completed."""
        if self.trace.t_first_byte_ns is None:
            self.trace.t_first_byte_ns = t_ns
        if nbytes:
            self.trace.t_last_byte_ns = t_ns
        if ended:
            self._ended = True
        return self._advance(t_ns, nbytes, head or self.trace.head, body, ended)

    def _advance(self, t_ns: int, nbytes: int, head: ResponseHead | None, body: bytes, complete: bool) -> int:
        trace = self.trace
        self._bytes_read += nbytes
        bound = self.limits.response_bytes
        if bound is not None and self._bytes_read > bound:  # a flood costs parsing, kept or not: ended here
            raise ResponseTooLarge(f"response larger than {bound:,} bytes (the probe's bound for its answer)")
        if trace.head is None and head is not None:
            trace.head = head
            trace.t_head_ns = t_ns
            if self._reading is None:
                self._reading = 200 <= head.status < 300 and head.content_type == self._reader.spec.content_type
            self._open_decoder(head)
        if body and len(self.body_preview) < ERROR_BODY_PREVIEW:
            self.body_preview += body[: ERROR_BODY_PREVIEW - len(self.body_preview)]
        # A frame past its limit raises ResponseTooLarge; bytes that break the format, StreamFormatError; bytes that
        # break the coding (or a bomb), ContentEncodingError. A read that only fed the decompressor completes none.
        frames = list(self._reader.feed(self._decoder.feed(body))) if body and self._reading else []
        if complete:
            frames += self._closing(t_ns, frames)  # the body's end may complete (or cut short) a last frame
        n = self._record(t_ns, nbytes, frames)
        if complete:
            self._finish(t_ns)
        return n

    def _open_decoder(self, head: ResponseHead) -> None:
        """The decoder for the head's Content-Encoding. One it cannot decode is raised for a 2xx answer (its frames
        cannot be counted); an error answer is reported by its status, its body left unread."""
        try:
            self._decoder = decoder_for(head.header("content-encoding"))
        except ContentEncodingError:
            self._reading = False
            if 200 <= head.status < 300:
                raise
            return
        self.trace.content_encoding = self._decoder.encoding

    def _record(self, t_ns: int, nbytes: int, frames: Sequence[WireFrame]) -> int:
        trace = self.trace
        n = len(frames)
        index = trace.read_count
        trace.read_count += 1
        if index < self.limits.reads:
            trace.reads.append(Read(t_ns, nbytes, n))
        if n:
            self._tail.extend(frames)
            base = trace.frame_count
            trace.frame_count += n
            trace.bursts[n] += 1
            if self._text:
                trace.invalid_utf8_frames += sum(1 for f in frames if not _is_utf8(f.raw))
            if self._keeping:
                self._keep(t_ns, index, frames)
            if trace.first_content is None:
                # Classified only until the first content frame: it is all TTFT needs, and JSON-decoding
                # every frame would dominate the client's CPU under load.
                self._classify(t_ns, base, frames)
        return n

    def _classify(self, t_ns: int, base: int, frames: Sequence[WireFrame]) -> None:
        trace, reader = self.trace, self._reader
        for offset, f in enumerate(frames):
            kind = reader.kind(f)
            if kind is FrameKind.CONTENT or kind is FrameKind.REASONING:
                if trace.first_token is None:
                    trace.first_token, trace.t_first_token_ns = base + offset, t_ns
                if kind is FrameKind.CONTENT:
                    trace.first_content, trace.t_first_content_ns = base + offset, t_ns
                    return
            elif kind is FrameKind.FOREIGN:
                if not trace.foreign_frames:
                    trace.foreign_hint = reader.hint(f)
                    trace.foreign_api = reader.recognise(f)
                trace.foreign_frames += 1
            elif kind is FrameKind.ERROR and not trace.error_hint:
                text = " ".join((f.data or b"").decode("utf-8", "replace").split())
                trace.error_hint = text[:ERROR_HINT_CHARS] or reader.hint(f)

    def _close(self) -> Sequence[WireFrame]:
        if self._closed or not self._reading:
            return []
        self._closed = True
        self._decoder.end()  # a body that ended inside the compressed stream: ContentEncodingError (truncated)
        return self._reader.close()

    def _closing(self, t_ns: int, read: Sequence[WireFrame] = ()) -> Sequence[WireFrame]:
        """_close at the body's normal end: a last event-stream message or NDJSON line cut short raises, as it always
        has, and is the stream's end, read with the frames this last read completed (`read`: a final event before
        the unfinished frame still ends the stream)."""
        try:
            return self._close()
        except StreamFormatError as exc:
            self._tail.extend(read)
            self._finish(t_ns, unfinished_detail=str(exc))
            raise STREAM_END.attach(exc, self.trace.end) from None

    def _keep(self, t_ns: int, index: int, frames: Sequence[WireFrame]) -> None:
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
        """The peer closed. Raises ProtocolError if the response was cut short (StreamFormatError if its last
        event-stream message or NDJSON line was), its end attached."""
        try:
            self.response.feed_eof()
        except Exception as exc:
            raise STREAM_END.attach(exc, self.cut(exc, t_ns)) from None
        frames = self._closing(t_ns)
        if frames:  # a last NDJSON line without a line end: the end of the body is its arrival
            self._record(t_ns, 0, frames)
        self._finish(t_ns)

    def result(self) -> Trace:
        return self.trace

    def _finish(self, t_ns: int, unfinished_detail: str = "") -> None:
        trace = self.trace
        if trace.t_end_ns is not None:
            return
        trace.t_end_ns = t_ns
        trace.trailing_bytes = self._reader.pending_bytes()
        if trace.head is None:
            return
        how = BodyEnd.END_STREAM if self._ended else body_end(trace.head.framing)
        said = self._reader.last_word(self._tail) if self._reading else LastWord.NOTHING
        if said is LastWord.NOTHING and (unfinished_detail or trace.trailing_bytes):
            unfinished_detail = unfinished_detail or unfinished(trace.trailing_bytes)
        trace.end = self._end(said, how, t_ns, unfinished_detail)

    def cut(self, exc: BaseException, t_ns: int) -> StreamEnd | None:
        """The end `exc` gave the stream, raised while reading it (wire/ending.py broken_by: a reset, a body cut
        short, an error status), or None when it ends no stream (a timeout of ours). Kept as the trace's end."""
        how = broken_by(exc)
        if how is None:
            return None
        said = self._reader.last_word(self._tail) if self._reading else LastWord.NOTHING
        self.trace.end = self._end(said, how, t_ns, " ".join(str(exc).split())[:200])
        return self.trace.end

    def _end(self, said: LastWord, how: BodyEnd, t_ns: int, detail: str) -> StreamEnd:
        trace = self.trace
        if said is LastWord.ERROR and not detail:  # whose error it was is in its words (wire/ending.py origin_end)
            last = next((f.data for f in reversed(self._tail) if self._reader.ends(f) and f.data), b"")
            detail = error_detail(last, how)
        return classify_end(
            said, how, sent_ns=trace.t_sent_ns, end_ns=t_ns, last_byte_ns=trace.t_last_byte_ns, detail=detail
        )


# A stream the peer ended badly (a reset, a body cut short) raises; the trace so far goes with the error, so a reader
# that names cuts (diagnose) still sees when the last byte came and when the end did.
PARTIAL_TRACE: Rider[Trace] = Rider("partial_trace", Trace)
