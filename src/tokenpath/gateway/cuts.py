"""The relay's cut for the formats that are not SSE, sans-IO: where in an upstream read the last whole frame ends, so
the gateway forwards whole frames only and holds the rest (wire/sse.py's EventRelay is the same for SSE events).

Both have EventRelay's interface, which the gateway's one relay path calls: `feed(data)` counts the frames the read
completes and sets `tail` (bytes at the end of the read that belong to an unfinished frame); only when `tail or
held`, `cut(data)` returns what to send on (what earlier reads left unfinished plus this read up to its last frame
end) and holds the rest; `too_large` says a frame outgrew `max_event_bytes`; `rest()` hands over what is held at the
end of the body. Neither keeps a frame's bytes once it is whole, and neither scans a byte twice.

- MessageRelay: AWS event-stream messages (Bedrock ConverseStream). The prelude's total length says where a message
  ends, so the cut needs no search: it counts down. Each message is checked whole before it goes on, as the client's
  SDK would check it (a corrupt message must not reach the client ahead of the error frame): the prelude CRC (the
  length is trusted only when its CRC holds), the headers length (within the message and MAX_HEADERS_BYTES) and the
  message CRC, a running CRC32 over its bytes as they pass, so a message split over reads is checked once it is
  whole and no byte is read twice. The headers themselves are not parsed (wire/eventstream.py has the layout, the
  checks the cut shares and the full parser). A declared length past the limit is refused from the prelude, before
  any more of that message is held.
- LineRelay: NDJSON lines (Ollama). A line ends at LF (CRLF ends in LF too); a blank line is no frame.
"""

from __future__ import annotations

import struct
import zlib

from tokenpath.errors import ResponseTooLarge, StreamFormatError
from tokenpath.wire.eventstream import (
    CRC_BYTES,
    MAX_MESSAGE_BYTES,
    PRELUDE_BYTES,
    check_message_crc,
    check_prelude,
)
from tokenpath.wire.ndjson import MAX_LINE_BYTES
from tokenpath.wire.sse import cut_whole

_U32 = struct.Struct("!I")
_BLANK = b" \t\r"


class _Cut:
    """What both cuts share: the held bytes and the cut itself (wire.sse.cut_whole, as EventRelay's)."""

    __slots__ = ("broken", "held", "max_event_bytes", "tail")

    def __init__(self, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self.held = bytearray()  # bytes of a frame the reads so far left unfinished
        self.tail = 0  # bytes at the end of the last read that belong to an unfinished frame
        self.broken: str | None = None  # why the stream cannot be relayed further (a message failed a check)

    def cut(self, data: bytes) -> bytes:
        return cut_whole(self.held, data, self.tail)

    def rest(self) -> bytes:
        rest = bytes(self.held)
        self.held.clear()
        return rest


class MessageRelay(_Cut):
    """Cuts an AWS event stream at message boundaries, from each prelude's total length; a message that fails its
    checks is `broken`, and what is sent on ends with the message before it."""

    __slots__ = ("_crc", "_declared", "_prelude", "_remaining", "_stored_crc")

    def __init__(self, max_event_bytes: int = MAX_MESSAGE_BYTES) -> None:
        super().__init__(max_event_bytes)
        self._prelude = bytearray()  # the prelude being read (< PRELUDE_BYTES bytes)
        self._remaining = 0  # bytes of the current message after its prelude still to come
        self._declared = 0  # the current message's total length, once its prelude is in
        self._crc = 0  # CRC32 of the current message's bytes so far, its own CRC's excepted
        self._stored_crc = bytearray()  # the current message's last 4 bytes (its CRC), as they come

    def feed(self, data: bytes) -> int:
        size = len(data)
        if self.broken is not None:
            self.tail = size  # nothing after a broken message is a message
            return 0
        pos = count = last_end = 0
        while pos < size:
            if not self._remaining:  # a message starts here
                if self._prelude or size - pos < PRELUDE_BYTES:  # a prelude split over reads: gathered first
                    need = PRELUDE_BYTES - len(self._prelude)
                    self._prelude += data[pos : pos + need]
                    pos += min(need, size - pos)
                    if len(self._prelude) < PRELUDE_BYTES:
                        break
                    started = self._start_message(bytes(self._prelude), 0)
                    self._prelude.clear()
                else:  # the common case: the prelude whole in this read, checked where it is
                    started = self._start_message(data, pos)
                    pos += PRELUDE_BYTES
                if not started:
                    self.tail = size - last_end
                    return count
            remaining = self._remaining
            step = min(remaining, size - pos)
            before_crc = remaining - CRC_BYTES  # bytes of the message still to come before its own CRC
            if before_crc > 0:
                self._crc = zlib.crc32(data[pos : pos + min(before_crc, step)], self._crc)
            pos += step
            left = self._remaining = remaining - step
            crc_part = min(CRC_BYTES, remaining) - min(CRC_BYTES, left)  # bytes of the message's CRC in this read
            if left:
                if crc_part:
                    self._stored_crc += data[pos - crc_part : pos]
                break
            if crc_part == CRC_BYTES:  # the common case: the CRC whole in this read
                (expected,) = _U32.unpack_from(data, pos - CRC_BYTES)
            else:
                self._stored_crc += data[pos - crc_part : pos]
                expected = int.from_bytes(self._stored_crc, "big")
                self._stored_crc.clear()
            if not self._crc_holds(expected):
                self.tail = size - last_end
                return count
            count += 1
            last_end = pos
        unfinished = self._remaining or self._prelude
        self.tail = size - last_end if unfinished else 0
        return count

    def _start_message(self, src: bytes, pos: int) -> bool:
        try:
            total, _ = check_prelude(src, pos)  # its CRC, then the lengths it declares
        except (StreamFormatError, ResponseTooLarge) as exc:
            self.broken = str(exc)
            return False
        self._declared = total
        self._remaining = total - PRELUDE_BYTES  # >= CRC_BYTES: a message never ends with its prelude
        self._crc = zlib.crc32(src[pos : pos + PRELUDE_BYTES])
        return True

    def _crc_holds(self, expected: int) -> bool:
        try:
            check_message_crc(expected, self._crc)
        except StreamFormatError as exc:
            self.broken = str(exc)
            return False
        return True

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
