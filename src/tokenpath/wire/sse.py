"""Incremental Server-Sent Events parser (sans-IO).

`EventCounter` is the same boundary rule without keeping any bytes: it counts the events each read completes and
says where the read's last one ends (`tail`). `EventRelay` cuts there: a relay that forwards only whole events. There
is no other boundary rule (the conformance battery holds both to the parser at random splits and line ends).

Written by hand because no maintained library exposes what tokenpath counts: the exact bytes of each event and
which `feed()` call completed it. Follows the WHATWG event-stream grammar: lines end in CRLF, LF or CR; a blank
line ends an event; lines starting with ':' are comments; a single space after 'field:' is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tokenpath.errors import ResponseTooLarge
from tokenpath.wire.openai import FrameKind, classify

_LINE_END = re.compile(rb"\r\n|\r|\n")
# One event may hold this much before the parser gives up: far above any real chunk (tool-call deltas included, a
# few KB), low enough that a peer sending one endless event cannot make a client hold unbounded memory.
MAX_EVENT_BYTES = 8 << 20
# Below this, bytes held for a split frame are joined to the next read by a plain copy (cheapest for token-sized
# frames); above it they grow in place, so feeding one long event in small pieces is not quadratic.
SMALL_HOLD_BYTES = 4096
UTF8_BOM = b"\xef\xbb\xbf"
_BOM = UTF8_BOM


@dataclass(slots=True)
class Frame:
    """One complete SSE event: everything from its first line to the blank line that ends it."""

    raw: bytes
    data: bytes | None = None  # data lines joined with b"\n"; None when the event had no data field
    event: bytes | None = None
    id: bytes | None = None
    comments: list[bytes] = field(default_factory=list)

    @property
    def kind(self) -> FrameKind:
        return classify(self.data)


class SSEParser:
    """Feed bytes in any split; get back the frames each feed completed, in order.

    Linear in the bytes fed, however an event is split: bytes held for an unfinished event sit in a bytearray that
    grows in place, and scanning resumes where it stopped. An event may not grow past `max_event_bytes`.
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        # Bytes of the event being read (from its first line on), plus unscanned bytes: bytes while small, a
        # bytearray growing in place once an event outgrows SMALL_HOLD_BYTES (so a long event stays linear).
        self._buf: bytes | bytearray = b""
        self._scan = 0  # where line scanning resumes inside _buf
        self._line_start = 0  # where the unfinished line begins inside _buf
        self._lines: list[bytes] = []
        self._at_start = True
        self._max = max_event_bytes
        # A CR that ended the input ended its line at once (waiting would delay CR-only streams by a frame);
        # if the next byte is LF it is the rest of that CRLF and is skipped.
        self._skip_lf = False
        self._lf_frame: Frame | None = None  # the frame that CR ended: that LF belongs to its raw bytes

    def feed(self, data: bytes) -> list[Frame]:
        size = len(data)
        # The token-stream case first: a read that is one whole single-line event with LF line ends, after a read
        # that ended on an event boundary. The scan below makes the same one frame of it and leaves the same clean
        # state; this way skips its regex and slicing (the gateway's first-token scan and every client's first
        # frames; tests/wire/test_sse_short_way.py holds the two equal). A leading 0xEF may be a BOM: the scan's.
        # A bytearray's frames are copied out by the scan. The cheapest tests first: this runs for every read. The
        # line test is EventCounter.feed's, written out in both: a helper would cost each read a call.
        if (
            size > 2
            and data[size - 1] == 10
            and not self._buf
            and not self._skip_lf
            and data.find(10) == size - 2
            and 13 not in data
            and data[0] != 0xEF
            and type(data) is bytes
        ):
            self._at_start = False
            return [_build([data[: size - 2]], data)]
        buf: bytes | bytearray
        held = self._buf
        if not held:
            buf = data  # the common case, whole frames per read: no copy at all
        elif len(held) < SMALL_HOLD_BYTES and not isinstance(held, bytearray):
            buf = held + data  # a frame split across reads: one small copy, slices stay bytes
        else:
            if not isinstance(held, bytearray):
                held = self._buf = bytearray(held)
            held += data  # a long event: grows in place, amortised O(len(data)), never re-copied
            buf = held
        if self._at_start:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._buf = buf
                return []
            if buf.startswith(_BOM):
                buf = buf[len(_BOM) :]
            self._at_start = False
        frames: list[Frame] = []
        start = 0  # where the current event's bytes begin in buf
        scan = self._scan  # where the search for a line end resumes
        line_start = self._line_start  # where the line being read begins
        if self._skip_lf and len(buf) > scan:
            self._skip_lf = False
            if buf[scan : scan + 1] == b"\n":
                scan += 1
                line_start = scan
                if self._lf_frame is not None:
                    self._lf_frame.raw += b"\n"
                if not self._lines:
                    start = scan  # between events: the LF belongs to no new event
            self._lf_frame = None
        lines = self._lines
        search = _LINE_END.search
        owned = isinstance(buf, bytearray)  # slices of the growing buffer are copied out as bytes
        while True:
            m = search(buf, scan)
            if m is None:
                scan = len(buf)  # no line end in the rest: the next feed resumes after it (a CR would have matched)
                break
            end = m.end()
            cr_at_end = end == len(buf) and buf[end - 1] == 13  # b"\r"
            self._skip_lf = cr_at_end
            line = buf[line_start : m.start()]
            scan = line_start = end
            if line:
                lines.append(bytes(line) if owned else line)  # type: ignore[arg-type]
                continue
            if lines:
                raw = buf[start:scan]
                frame = _build(lines, bytes(raw) if owned else raw)  # type: ignore[arg-type]
                frames.append(frame)
                self._lf_frame = frame if cr_at_end else None
                lines = []
            start = scan  # blank lines between events belong to no event
        self._lines = lines
        self._scan = scan - start
        self._line_start = line_start - start
        if owned and buf is self._buf:
            if start:
                del buf[:start]  # type: ignore[union-attr]
        else:
            self._buf = buf[start:]  # b"" when the read ended on a frame boundary: no copy
        if len(self._buf) > self._max:
            self._overflow()
        return frames

    def _overflow(self) -> None:
        size = len(self._buf)
        self._buf = b""
        self._lines = []
        self._scan = self._line_start = 0
        raise ResponseTooLarge(
            f"an SSE event grew past {self._max} bytes without ending ({size} bytes held): "
            "not a token stream this client can measure"
        )

    def pending_bytes(self) -> int:
        """Bytes held for an event that has not ended yet (trailing data at end of stream)."""
        return len(self._buf)


def _build(lines: list[bytes], raw: bytes) -> Frame:
    frame = Frame(raw=raw)
    data_parts: list[bytes] = []
    for line in lines:
        if line[:1] == b":":
            frame.comments.append(line[1:])
            continue
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data_parts.append(value)
        elif name == b"event":
            frame.event = value
        elif name == b"id":
            frame.id = value
        # retry and unknown fields are ignored, as the spec says
    if data_parts:
        frame.data = b"\n".join(data_parts)
    return frame


class EventCounter:
    """Counts the events that bytes complete, by the parser's rules (CRLF, LF or CR line ends, split anywhere, a
    blank line ends an event that has at least one line), holding four booleans and an int (`tail`) and no bytes:
    what a relay that forwards bytes untouched can afford per read.

    `tail` is the relay's cut, from the same scan: how many bytes at the end of the last read belong to an event
    that has not ended (0 when the read ended on an event boundary; the whole read when no event ended in it). A
    relay sends on `data[: len(data) - tail]` after what it held, and holds the rest: every piece it sends ends on an
    event boundary, and nothing is scanned twice however long an event grows. A CR that ends an event ends it at
    once (as the parser says); an LF first in the next read, the rest of that CRLF, goes with the event it ends."""

    __slots__ = ("_clean", "_in_event", "_partial", "_skip_lf", "tail")

    def __init__(self) -> None:
        self._in_event = False  # a non-empty line ended since the last event did
        self._partial = False  # the last read ended inside a non-empty line
        self._skip_lf = False  # the last read ended on CR: an LF first in the next read is the rest of a CRLF
        self._clean = True  # none of the three: the last read ended exactly on an event boundary
        self.tail = 0  # bytes at the end of the last read that belong to an unfinished event

    @property
    def at_boundary(self) -> bool:
        """Everything fed so far ended on an event boundary (an event inserted now stands alone)."""
        return not self._in_event and not self._partial

    def feed(self, data: bytes) -> int:
        size = len(data)
        # The token-stream case, checked first and cheapest (memchr, not substring searches; ~0.3 us): one
        # single-line event per read, LF-terminated, after a read that ended on a boundary. The state stays clean
        # (and `tail` 0, as the last read left it: clean means it ended on a boundary).
        if self._clean and size > 2 and 13 not in data and data.find(10) == size - 2 and data[size - 1] == 10:
            return 1
        if not size:
            self.tail = 0  # nothing to cut: an unfinished event stays unfinished
            return 0
        count = self._feed(data)
        self._clean = not (self._in_event or self._partial or self._skip_lf)
        return count

    def _feed(self, data: bytes) -> int:
        if not self._skip_lf and data[0] != 10 and 13 not in data and b"\n\n\n" not in data:
            # LF-only token frames: every LF follows a byte that is not LF, so every "\n\n" ends a non-empty line
            # and then an event.
            count = data.count(b"\n\n")
            last = data.rfind(b"\n\n")
            after = last + 2 if last >= 0 else 0
            if data.find(b"\n", after) >= 0:
                self._in_event = True
            elif last >= 0:
                self._in_event = False
            self._partial = partial = data[-1] != 10
            self.tail = len(data) - after if self._in_event or partial else 0
            return count
        return self._feed_any(data)

    def _feed_any(self, data: bytes) -> int:
        pos = 0
        last_end = 0  # where the last event that ended in this read ends
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == 10:
                pos = 1
                if not self._in_event:
                    last_end = 1  # the rest of the CRLF that ended an event: it belongs to that event
        count = 0
        line_begin = pos
        for m in _LINE_END.finditer(data, pos):
            if m.start() > line_begin or self._partial:
                self._in_event = True
            elif self._in_event:
                count += 1
                self._in_event = False
                last_end = m.end()
            self._partial = False
            line_begin = m.end()
        if line_begin < len(data):
            self._partial = True
        self._skip_lf = data[-1] == 13
        self.tail = len(data) - last_end if self._in_event or self._partial else 0
        return count


def cut_whole(held: bytearray, data: bytes, tail: int) -> bytes:
    """The relay's cut, for any framing that knows where its last whole frame in `data` ends (`tail` bytes before
    the end): what to send on (what earlier reads left unfinished, then this read up to that end); the rest is
    appended to `held`, which grows in place. EventRelay and the gateway's event-stream and NDJSON cuts share it."""
    whole = len(data) - tail
    out = b""
    if whole:
        if held:
            held += memoryview(data)[:whole]
            out = bytes(held)
            held.clear()
        else:
            out = data[:whole] if tail else data
    if tail:
        held += memoryview(data)[whole:]
    return out


class EventRelay(EventCounter):
    """The counter plus the relay's cut, for a relay that forwards bytes untouched but only whole events: a reader
    never gets half an event, so a stream that fails mid-event can still end with an error event that parses whole.

    After `feed(data)`, and only when `tail or held` (otherwise the read is whole as it stands, and the token-stream
    case pays nothing more): `cut(data)` returns what to send on, the bytes earlier reads left unfinished and this
    read up to its last event end; the rest waits in `held`, a bytearray that grows in place. Linear however an event
    is split: the cut is the counter's, nothing is scanned twice. An event may hold `max_event_bytes`: past that
    `too_large` is true, and the relay ends the stream rather than hold more."""

    __slots__ = ("held", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        super().__init__()
        self.held = bytearray()  # bytes of an event that the reads so far left unfinished
        self.max_event_bytes = max_event_bytes

    def cut(self, data: bytes) -> bytes:
        return cut_whole(self.held, data, self.tail)

    @property
    def too_large(self) -> bool:
        return len(self.held) > self.max_event_bytes

    def rest(self) -> bytes:
        """What is held, handed over and forgotten: at the end of a stream whose last event never ended."""
        rest = bytes(self.held)
        self.held.clear()
        return rest
