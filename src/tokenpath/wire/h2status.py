"""The first final `:status` in a server's HTTP/2 bytes, read passively beside the probe's own connection (the
exporter's probe_http_status_code: the probe raises on a non-2xx answer, and its exception carries a message).

Sans-IO: `feed(data)` with each read's bytes, as they came. HPACK is stateful, so every header block of the
connection up to the answer is decoded in order, with a decoder of its own (our SETTINGS keep HPACK's default
table size, 4,096 bytes). One stream per connection (the probe's) makes the first final status its answer's.
Bounded: one frame is held at a time, a header block up to MAX_HEADER_BLOCK_BYTES, and after MAX_SNIFF_BYTES (or
anything it cannot read) the sniffer gives up: the status is then unknown (0), never a guess.
"""

from __future__ import annotations

import hpack
from hpack import HPACKError

from tokenpath.wire.h2client import MAX_FRAME_SIZE as MAX_FRAME
from tokenpath.wire.h2guard import (
    CONTINUATION,
    END_HEADERS,
    HEADERS,
    MAX_HEADER_BLOCK_BYTES,
    MAX_HEADER_LIST_SIZE,
    PADDED,
)

FRAME_HEADER = 9
# A server's SETTINGS, a WINDOW_UPDATE and the response's HEADERS come first, in well under this.
MAX_SNIFF_BYTES = MAX_HEADER_BLOCK_BYTES + 4 * (MAX_FRAME + FRAME_HEADER)
PRIORITY = 0x20  # a HEADERS flag (h2guard names the frame types and the flags it needs)


class H2StatusSniffer:
    def __init__(self) -> None:
        self.status: int | None = None  # the first final status, once seen
        self.done = False  # seen, or given up
        self._buf = bytearray()  # at most one frame
        self._seen = 0
        self._block = bytearray()  # the header block being gathered (HEADERS + CONTINUATIONs)
        self._decoder = hpack.Decoder(max_header_list_size=MAX_HEADER_LIST_SIZE)

    def feed(self, data: bytes) -> int | None:
        """The status, once known (then later bytes are ignored)."""
        if self.done or not data:
            return self.status
        room = MAX_SNIFF_BYTES - self._seen
        if room <= 0:
            self.done = True
            return self.status
        self._seen += min(room, len(data))
        self._buf += data[:room]  # (the head comes first: a read of head and a megabyte of DATA still shows it)
        while not self.done and len(self._buf) >= FRAME_HEADER:
            length = int.from_bytes(self._buf[:3], "big")
            if length > MAX_FRAME:
                self.done = True
                break
            if len(self._buf) < FRAME_HEADER + length:
                break
            kind, flags = self._buf[3], self._buf[4]
            payload = bytes(self._buf[FRAME_HEADER : FRAME_HEADER + length])
            del self._buf[: FRAME_HEADER + length]
            self._frame(kind, flags, payload)
        return self.status

    def _frame(self, kind: int, flags: int, payload: bytes) -> None:
        if kind == HEADERS:
            self._block = bytearray(_fragment(flags, payload))
        elif kind == CONTINUATION:
            self._block += payload
        else:
            return
        if len(self._block) > MAX_HEADER_BLOCK_BYTES:
            self.done = True
        elif flags & END_HEADERS:
            self._decode(bytes(self._block))

    def _decode(self, block: bytes) -> None:
        try:
            fields = self._decoder.decode(block, raw=True)
        except (HPACKError, ValueError):
            self.done = True
            return
        for name, value in fields:
            if name == b":status":
                if value.isdigit() and len(value) == 3:
                    status = int(value)
                    if not 100 <= status < 200:  # 1xx heads come before the answer (RFC 9113 8.1)
                        self.status, self.done = status, True
                else:
                    self.done = True
                return


def _fragment(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's header block fragment: without its padding and priority fields (RFC 9113 6.2)."""
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload:
            return b""
        start, end = 1, end - payload[0]
    if flags & PRIORITY:
        start += 5
    return payload[start:end] if start <= end else b""
