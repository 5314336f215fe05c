"""The relay's cut for the formats that are not SSE, sans-IO: where in an upstream read the last whole frame ends, so
the gateway forwards whole frames only and holds the rest (wire/sse.py's EventRelay is the same for SSE events).

Both have EventRelay's interface, which the gateway's one relay path calls: `feed(data)` counts the frames the read
completes and sets `tail` (bytes at the end of the read that belong to an unfinished frame); only when `tail or
held`, `cut(data)` returns what to send on (what earlier reads left unfinished plus this read up to its last frame
end) and holds the rest; `too_large` says a frame outgrew `max_event_bytes`; `rest()` hands over what is held at the
end of the body. Neither keeps a frame's bytes once it is whole, and neither scans a byte twice.

- MessageRelay: AWS event-stream messages (Bedrock ConverseStream). The prelude's total length says where a message
  ends, so the cut needs no search: it counts down. The prelude CRC is checked (the length is trusted only when its
  CRC holds); the message CRC is not, a relay passes the bytes on untouched and the client checks them
  (wire/eventstream.py has the layout and the full parser). A declared length past the limit is refused from the
  prelude, before any more of that message is held.
- LineRelay: NDJSON lines (Ollama). A line ends at LF (CRLF ends in LF too); a blank line is no frame.
"""

from __future__ import annotations

import struct
import zlib

from tokenpath.wire.eventstream import MAX_MESSAGE_BYTES, MIN_MESSAGE_BYTES, PRELUDE_BYTES
from tokenpath.wire.ndjson import MAX_LINE_BYTES
from tokenpath.wire.sse import cut_whole

_PRELUDE = struct.Struct("!III")
_BLANK = b" \t\r"


class _Cut:
    """What both cuts share: the held bytes and the cut itself (wire.sse.cut_whole, as EventRelay's)."""

    __slots__ = ("broken", "held", "max_event_bytes", "tail")

    def __init__(self, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self.held = bytearray()  # bytes of a frame the reads so far left unfinished
        self.tail = 0  # bytes at the end of the last read that belong to an unfinished frame
        self.broken: str | None = None  # why the stream cannot be cut any more (only a bad prelude, so far)

    def cut(self, data: bytes) -> bytes:
        return cut_whole(self.held, data, self.tail)

    def rest(self) -> bytes:
        rest = bytes(self.held)
        self.held.clear()
        return rest


class MessageRelay(_Cut):
    """Cuts an AWS event stream at message boundaries, from each prelude's total length."""

    __slots__ = ("_declared", "_prelude", "_remaining")

    def __init__(self, max_event_bytes: int = MAX_MESSAGE_BYTES) -> None:
        super().__init__(max_event_bytes)
        self._prelude = bytearray()  # the prelude being read (< PRELUDE_BYTES bytes)
        self._remaining = 0  # bytes of the current message after its prelude still to come
        self._declared = 0  # the current message's total length, once its prelude is in

    def feed(self, data: bytes) -> int:
        size = len(data)
        if self.broken is not None:
            self.tail = size  # nothing after a bad prelude is a message
            return 0
        pos = count = last_end = 0
        while pos < size:
            if self._remaining:
                step = min(self._remaining, size - pos)
                pos += step
                self._remaining -= step
                if not self._remaining:
                    count += 1
                    last_end = pos
                continue
            need = PRELUDE_BYTES - len(self._prelude)
            self._prelude += data[pos : pos + need]
            pos += min(need, size - pos)
            if len(self._prelude) < PRELUDE_BYTES:
                break
            total = self._check_prelude(bytes(self._prelude))
            self._prelude.clear()
            if total is None:
                self.tail = size - last_end
                return count
            self._remaining = total - PRELUDE_BYTES  # >= CRC_BYTES: a message never ends with its prelude
        unfinished = self._remaining or self._prelude
        self.tail = size - last_end if unfinished else 0
        return count

    def _check_prelude(self, prelude: bytes) -> int | None:
        total, headers_length, crc = _PRELUDE.unpack(prelude)
        if zlib.crc32(prelude[:8]) != crc:
            self.broken = "an event-stream message's prelude CRC does not match its bytes"
        elif total < MIN_MESSAGE_BYTES or headers_length > total - MIN_MESSAGE_BYTES:
            self.broken = f"an event-stream message declares {total} bytes with {headers_length} bytes of headers"
        else:
            self._declared = total
            return int(total)
        return None

    @property
    def too_large(self) -> bool:
        """The message being read declares (or holds) more than the relay holds: refused from its prelude."""
        return self._declared > self.max_event_bytes or len(self.held) > self.max_event_bytes


class LineRelay(_Cut):
    """Cuts an NDJSON stream after its last line end; counts the lines that are not blank."""

    __slots__ = ("_content",)

    def __init__(self, max_event_bytes: int = MAX_LINE_BYTES) -> None:
        super().__init__(max_event_bytes)
        self._content = False  # the unfinished line has a byte that is not blank

    def feed(self, data: bytes) -> int:
        size = len(data)
        last = data.rfind(b"\n")
        if last < 0:
            self.tail = size
            if data.strip(_BLANK):
                self._content = True
            return 0
        self.tail = size - last - 1
        # The token-stream case, first and cheapest: one line per read, ended, after a read that ended a line.
        if last == size - 1 and data.find(b"\n") == last:
            count = 1 if self._content or data.strip(_BLANK + b"\n") else 0
            self._content = False
            return count
        count = 0
        lines = data.split(b"\n")
        for line in lines[:-1]:
            if self._content or line.strip(_BLANK):
                count += 1
            self._content = False
        self._content = bool(lines[-1].strip(_BLANK))
        return count

    @property
    def too_large(self) -> bool:
        return len(self.held) > self.max_event_bytes
