"""Flood guard for an HTTP/2 peer, on either side of the connection: reads the peer's frame headers (9 bytes each)
as bytes arrive, before the `h2` library parses a byte of them, and says when a named bound is crossed. Sans-IO,
with the clock injected.

Shared by the client core (wire/h2client.py: the probe's, the load client's and the gateway's upstream connections)
and any HTTP/2 endpoint of ours (serve/h2limits.py adds a server's own bounds). Every frame type is bounded: PING and
SETTINGS (their ACKs too) and empty DATA frames (the empty-frames flood, padding-only frames included) draw on one
burst allowance; WINDOW_UPDATEs on what we sent (the owner of the guard says how much); GOAWAY, PRIORITY and unknown
frames, facing a server (`peer_is_server`), on the same allowance, and facing a client on an allowance per stream it
opened (Envoy's `max_inbound_priority_frames_per_stream`); HEADERS and CONTINUATION by their size and count; non-empty
DATA by the flow-control windows we give."""

from __future__ import annotations

from collections.abc import Callable

import h2.errors

from tokenpath.wire.client import MAX_RESPONSE_HEAD_BYTES

# The decoded header list we accept from a peer: the same bound as an HTTP/1.1 head. An LLM API's is under 2 KB.
MAX_HEADER_LIST_SIZE = MAX_RESPONSE_HEAD_BYTES
# Compressed bytes of one header block (HEADERS + CONTINUATION), counted as its frames arrive: h2 buffers a whole
# block before decoding it, so without this a peer could make us hold up to 64 x 16 KiB per block.
MAX_HEADER_BLOCK_BYTES = MAX_HEADER_LIST_SIZE
# CONTINUATION frames in one header block. A 64 KiB block needs 4 frames of the default 16 KiB; 16 leaves room for
# encoders that split small. Empty ones cost a peer 9 bytes each and us a parse each (the CONTINUATION flood,
# CVE-2024-27316 and kin): h2 4.x stops at 64, this bound does not depend on the h2 version.
MAX_CONTINUATION_FRAMES = 16
# PING and SETTINGS frames (the ones we must answer) a peer may send in a burst, and the rate the allowance comes
# back. 1,000 is Envoy's max_outbound_control_frames default (nginx's flood check allows 10,000 queued frames); each
# costs h2 ~20 us of this worker's one core and 9-17 bytes of answer, queued while the peer does not read. A
# keep-alive PING or a settings change comes a few times a minute, so 100 a second refill is far above any honest use.
MAX_CONTROL_BURST = 1_000
CONTROL_FRAMES_PER_S = 100.0
# frame types and flags the guard reads from frame headers (RFC 9113 6)
DATA, HEADERS, PRIORITY = 0x0, 0x1, 0x2
SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x4, 0x5, 0x6, 0x7, 0x8, 0x9
# Frames a server has no reason to send a client more than a few times a connection: GOAWAY (one or two), PRIORITY
# (a client's signal, RFC 9113 5.3.2), and types h2 does not know (ALTSVC, ORIGIN: once). Each costs h2 ~15 us and
# an event; 100,000 of them took ~2 s of a core with no bound. A client's guard (`peer_is_server`) spends its burst
# allowance on them; a server's gives each stream a client opens PRIORITY_PER_STREAM of them (browsers send PRIORITY
# and PRIORITY_UPDATE, 0x10, with their requests; 400,000 PRIORITY frames with no bound took 2.6 s of the worker).
SERVER_RARE = "GOAWAY, PRIORITY and unknown frames"
PRIORITY_PER_STREAM = 100  # Envoy's max_inbound_priority_frames_per_stream default
ACK, END_STREAM, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8


class FrameGuard:
    """Reads the peer's frame headers (9 bytes each) as bytes arrive, before h2 parses a byte of them, and says
    when a bound is crossed: the connection is then closed, and h2 never spends a core on the flood. Sans-IO, with
    the clock injected. `error_code` is the GOAWAY's: FRAME_SIZE_ERROR for an oversized frame, else
    ENHANCE_YOUR_CALM (RFC 9113 10.5)."""

    def __init__(self, clock: Callable[[], float], max_frame_size: int, *, peer_is_server: bool = False) -> None:
        self.clock = clock
        self.peer_is_server = peer_is_server
        # A peer owes us at most two WINDOW_UPDATEs (its stream's and its connection's) per DATA frame we sent
        # (the owner adds them as it sends), and a few per stream; past those and a burst it is a flood (~13 us of h2
        # each: 400,000 connection WINDOW_UPDATEs took 2.6 s of a server with no bound).
        self.window_updates_owed = MAX_CONTROL_BURST
        # GOAWAY, PRIORITY and unknown frames a client may still send (a server's guard): PRIORITY_PER_STREAM for the
        # connection and for each stream it opens.
        self.rare_owed = PRIORITY_PER_STREAM
        self.max_frame_size = max_frame_size  # ours (SETTINGS_MAX_FRAME_SIZE): h2 would buffer a larger one first
        self.head = b""  # a frame header split across reads
        self.skip = 0  # payload bytes of the current frame still to come
        self.block: int | None = None  # compressed bytes of the header block being received; None: not in one
        self.continuations = 0
        self.allowance = float(MAX_CONTROL_BURST)
        self.refilled = clock()
        self.ends: list[int] = []  # where frames end in the last `data` fed
        # where header blocks (HEADERS or PUSH_PROMISE and their CONTINUATIONs) end in it: a client parses up to each
        # one apart, so that a stream error it finds in a head is in force before that stream's next frame is parsed
        self.block_ends: list[int] = []
        self._ends_block = False  # the frame being read ends a header block (END_HEADERS)
        # The frame whose payload is still arriving (type, flags, stream id, length), a serial number per frame
        # header read, and the bytes of its payload the last `data` brought: h2 sees a frame only when it is whole,
        # and a reader may want a DATA frame's bytes as they come (wire/h2client.py).
        self.frame: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.serial = 0
        self.tail = b""
        self._pad_pending = False  # a padded DATA frame whose pad length (its first payload byte) is still to come
        self.error_code = h2.errors.ErrorCodes.ENHANCE_YOUR_CALM

    def feed(self, data: bytes) -> str | None:
        """Why the peer is flooding us, or None; `ends` says where in `data` each frame ends."""
        self.ends = ends = []
        self.block_ends = []
        self.tail = b""
        at, end = 0, len(data)
        while at < end:
            if self.skip:
                if self._pad_pending:
                    self._pad_pending = False
                    why = self._padding_only(data[at])
                    if why is not None:
                        return why
                step = min(self.skip, end - at)
                self.skip -= step
                if self.skip:
                    self.tail = data[at:end]  # the frame is not whole: what of its payload came
                at += step
                if not self.skip:
                    ends.append(at)
                    if self._ends_block:
                        self._block_end(at)
                continue
            need = 9 - len(self.head)
            if end - at < need:
                self.head += data[at:]
                return None
            header = self.head + data[at : at + need] if self.head else data[at : at + 9]
            self.head = b""
            at += need
            length = int.from_bytes(header[:3], "big")
            self.frame = (header[3], header[4], int.from_bytes(header[5:9], "big") & 0x7FFFFFFF, length)
            self.serial += 1
            if header[3] != DATA or not length or length > self.max_frame_size:  # a DATA frame with data: nothing to
                why = self._frame(length, header[3], header[4])  # check but its size (a token stream's every read)
                if why is not None:
                    return why
            self.skip = length
            if not length:
                ends.append(at)
                if self._ends_block:
                    self._block_end(at)
            elif header[3] == DATA and header[4] & PADDED and not header[4] & END_STREAM:
                self._pad_pending = True  # read at its first payload byte
        return None

    def _frame(self, length: int, kind: int, flags: int) -> str | None:
        if length > self.max_frame_size:
            self.error_code = h2.errors.ErrorCodes.FRAME_SIZE_ERROR
            return f"a {length}-byte frame (our SETTINGS_MAX_FRAME_SIZE is {self.max_frame_size})"
        if kind in (HEADERS, PUSH_PROMISE):
            self.block = None if flags & END_HEADERS else length
            self.continuations = 0
            self._ends_block = bool(flags & END_HEADERS)
        elif kind == CONTINUATION and self.block is not None:  # (a CONTINUATION outside a block: h2 refuses it)
            self.continuations += 1
            self.block += length
            if self.continuations > MAX_CONTINUATION_FRAMES:
                return f"more than {MAX_CONTINUATION_FRAMES} CONTINUATION frames in one header block"
            if self.block > MAX_HEADER_BLOCK_BYTES:
                return f"a header block over {MAX_HEADER_BLOCK_BYTES} bytes"
            if flags & END_HEADERS:
                self.block = None
                self._ends_block = True
        elif kind in (PING, SETTINGS):
            # ACKs too: we send one SETTINGS and few PINGs, and an ACK nobody asked for costs h2 the same parse and
            # event (200,000 SETTINGS ACKs took 1.6 s of a server with no bound)
            return self.spend("PING/SETTINGS frames")
        elif kind in (GOAWAY, PRIORITY) or kind > CONTINUATION:
            if self.peer_is_server:
                return self.spend(SERVER_RARE)
            self.rare_owed -= 1
            if self.rare_owed < 0:
                return f"more than {PRIORITY_PER_STREAM} {SERVER_RARE} per stream opened"
        elif kind == WINDOW_UPDATE:
            self.window_updates_owed -= 1
            if self.window_updates_owed < 0:
                return "more WINDOW_UPDATE frames than the DATA frames we sent call for"
        elif kind == DATA and not length and not flags & END_STREAM:
            # An empty DATA frame carries nothing and costs a parse and an event: the empty-frames flood
            # (CVE-2019-9518). It draws on the same allowance as the frames that must be answered.
            return self.spend("empty DATA frames")
        return None

    def _block_end(self, at: int) -> None:
        self._ends_block = False
        self.block_ends.append(at)

    def _padding_only(self, pad: int) -> str | None:
        """A padded DATA frame with no data byte (all padding) is an empty DATA frame with a byte more: the same
        flood, and the same allowance (without this, one padding byte took a flood past the bound above)."""
        if self.frame[3] - 1 - pad <= 0:
            return self.spend("empty DATA frames")
        return None

    def spend(self, what: str) -> str | None:
        """One frame from the burst allowance (refilled at CONTROL_FRAMES_PER_S): why it is a flood, or None."""
        now = self.clock()
        self.allowance = min(MAX_CONTROL_BURST, self.allowance + (now - self.refilled) * CONTROL_FRAMES_PER_S)
        self.refilled = now
        self.allowance -= 1
        if self.allowance < 0:
            return f"more than {MAX_CONTROL_BURST} {what} in a burst (allowed: {CONTROL_FRAMES_PER_S:g} a second)"
        return None
