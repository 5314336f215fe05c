"""The relay rules of one response body, sans-IO: each upstream body read in, the bytes to write to the client out.
No sockets, no clocks, no metrics: downstream.Downstream wires it to the connections and reads what it noticed.

The rules (module docstring of downstream.py has the why):

- Framing: what goes out is framed for the client's connection (one chunk per upstream read when the client's
  response is chunked, the bytes as they are otherwise); payload bytes are never changed.
- Whole frames only, for a token stream (an SSE event, an event-stream message, an NDJSON line; the format's cut,
  gateway.streamformat): the bytes of a frame a read leaves unfinished are held until the read that finishes it,
  so a client never parses half a frame and an error frame after them parses whole. A frame larger than the cut
  holds, or framing the cut cannot follow, is `failure` (the whole frames before it still go out).
- Counting: `frames` (whole frames the upstream sent), `bytes` (body bytes read); summed into the metrics once,
  when the stream ends, never per read.
- First token: the first frames are classified (the format's FrameReader) until the first content frame, whose read
  sets `first_token`: the upstream's true TTFT. A body that is not a token stream has its first byte as first token.
- The end (`finish`): a body that ends inside a frame was cut, whatever its framing: the client gets the error
  frame, never the half frame and a clean end. A close-delimited body's end is a close, which a cut looks the same
  as: it is complete only after the format's final event (or its own error frame), else cut too. (A chunked or
  HTTP/2 body's end is the upstream's own word: relayed as it is.) Only the last two reads' frames are looked at,
  once, at the end: the hot path keeps two references, never parses.

- Keep-alives (`keepalive`, asked for by the exchange's timer while the upstream is silent): the format's own, only
  between whole frames (the cut holds nothing: the upstream is not inside a frame), never for a format that has
  none, a body that is no token stream (or an encoded one) or after a failure; never counted as a frame.

`news` is True after a feed that set `first_byte`, `first_token` or `failure` for the first time: the one flag the
hot path checks per read. The caller clears it once it has acted.
"""

from __future__ import annotations

from tokenpath.gateway.streamformat import Cut, StreamFormat
from tokenpath.wire.framing import chunk
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import FrameReader, LastWord

TTFT_SCAN_BYTES = 64 << 10  # the first content frame is looked for this far into a stream, no further
# What a close-delimited body's close cuts: frames that stopped without their format's final event, bare ones too
# (the relay passes on a format's stream; without its final event its client cannot tell the end from a cut).
CUT_BY_CLOSE = frozenset({LastWord.NOTHING, LastWord.UNFRAMED})


class RelayFailure:
    """Why a stream cannot be relayed further: a frame too large to hold, or framing that broke."""

    __slots__ = ("broken", "held", "max_bytes")

    def __init__(self, broken: str | None, held: int, max_bytes: int) -> None:
        self.broken = broken  # the cut's own reason (an event-stream prelude whose CRC fails), or None: too large
        self.held = held  # bytes of the unfinished frame dropped
        self.max_bytes = max_bytes


class Relay:
    __slots__ = (
        "_chunked",
        "_cut",
        "_scan",
        "_scanned",
        "bytes",
        "failure",
        "first_byte",
        "first_token",
        "frames",
        "last_out",
        "news",
        "prev_out",
        "stream",
    )

    def __init__(self, stream: StreamFormat | None, chunked: bool) -> None:
        self.stream = stream  # None: not a token stream (or an encoded one): relayed read by read as it comes
        self._chunked = chunked
        self._cut: Cut | None = stream.new_cut() if stream is not None else None
        self._scan: FrameReader | None = stream.reader() if stream is not None else None
        self._scanned = 0  # bytes scanned for the first token, up to TTFT_SCAN_BYTES
        self.frames = 0
        self.bytes = 0
        self.last_out = b""  # the last whole frames sent (a reference, no copy): what an error frame follows
        self.prev_out = b""  # the whole frames sent before those (Bedrock's metadata may follow its final event)
        self.first_byte = False
        self.first_token = False
        self.failure: RelayFailure | None = None
        self.news = False

    def feed(self, data: bytes) -> bytes:
        """One upstream body read; returns the bytes to write to the client now (b"": nothing yet)."""
        size = len(data)
        self.bytes += size
        cut = self._cut
        if cut is None:
            if not self.first_byte:
                self.first_byte = self.first_token = self.news = True
            return chunk(data) if self._chunked else data
        if not self.first_byte:
            self.first_byte = self.news = True
        self.frames += cut.feed(data)
        if self._scan is not None:
            self._scan_for_first_token(data)
        if cut.tail or cut.held:  # the read ends inside a frame, or ends one that earlier reads began
            data = cut.cut(data)  # every whole frame; the rest is held, never rescanned
            if cut.too_large or cut.broken is not None:
                self.failure = RelayFailure(cut.broken, len(cut.held), cut.max_event_bytes)
                self.news = True
                cut.held.clear()
                self._cut = _STOPPED
                self._scan = None
            if not data:
                return b""
            size = len(data)
        self.prev_out = self.last_out
        self.last_out = data
        # wire.framing.chunk inlined (once per read), its rule too: an empty read frames to nothing, never to the
        # last chunk (tests/gateway/test_relay.py holds the two equal)
        return b"%x\r\n%b\r\n" % (size, data) if self._chunked and size else data

    @property
    def held(self) -> bytes:
        """The bytes of the unfinished frame held now (never sent unless a later read finishes it)."""
        return bytes(self._cut.held) if self._cut is not None else b""

    def keepalive(self) -> bytes:
        """The format's keep-alive, framed for the client, if one may go now; b"" if not (see the module's rules).
        The relay's cut only ever sends whole frames, so the client never holds half of one either."""
        stream, cut = self.stream, self._cut
        if stream is None or stream.keepalive is None or cut is None or cut is _STOPPED or cut.held:
            return b""
        return chunk(stream.keepalive) if self._chunked else stream.keepalive

    def finish(self, by_close: bool) -> tuple[bytes, str | None]:
        """The body ended (`by_close`: a close-delimited body, ended by a close): the bytes still to send (framed),
        and why the token stream was cut (None: it was not, or it is no token stream, or a failure already ended it).
        Held bytes are a frame only when the body's end completes it (an NDJSON line without its line end); otherwise
        they are the unfinished frame of a cut, and are dropped."""
        stream, cut = self.stream, self._cut
        if stream is None or cut is None or cut is _STOPPED:
            return b"", None
        rest = b""
        if cut.held:
            reader = stream.reader()  # only here: most streams end on a whole frame, and a reader is not free
            held = cut.rest()
            try:
                whole = [*reader.feed(held), *reader.close()]
            except Exception:  # bytes that break the format: no frame
                whole = []
            if not whole or reader.pending_bytes():
                return b"", f"the body ended inside a frame ({len(held)} bytes of it held, never sent)"
            self.frames += len(whole)
            rest = held
        if by_close:
            reader = stream.reader()
            tail = [*reader.feed(self.prev_out), *reader.feed(self.last_out), *reader.feed(rest), *reader.close()]
            if reader.last_word(tail) in CUT_BY_CLOSE:  # every client reads an end by it (wire/ending.py)
                return b"", "the body ended by a close before the format's final event"
        if rest:
            self.prev_out, self.last_out = self.last_out, rest
            return (chunk(rest) if self._chunked else rest), None
        return b"", None

    def drop_held(self) -> None:
        """The stream ends with an error frame: an unfinished frame's bytes are dropped, so the error frame is the
        next thing the client parses, whole."""
        if self._cut is not None:
            self._cut.held.clear()

    def error_frame(self, message: str, code: str) -> bytes:
        """The format's own error frame, following the last whole frames sent (unframed: the caller frames it)."""
        assert self.stream is not None
        return self.stream.error(message, code, self.last_out)

    def _scan_for_first_token(self, data: bytes) -> None:
        """Until the first content frame (not a role-only delta, a comment, a heartbeat, a start or ping event):
        parse frames and classify them. Runs for the first few reads only."""
        scan = self._scan
        assert scan is not None
        self._scanned += len(data)
        try:
            frames = scan.feed(data)
        except Exception:  # a frame too large to be a token, or bytes that break the format: stop looking
            self._scan = None
            return
        for frame in frames:
            if scan.kind(frame) is FrameKind.CONTENT:
                self.first_token = self.news = True
                self._scan = None
                return
        if self._scanned >= TTFT_SCAN_BYTES:
            self._scan = None


class _Stopped:
    """The cut after a failure: nothing more is relayed (the caller ends the stream). Its `tail` is never 0, so
    every read goes through `cut`, which keeps nothing."""

    __slots__ = ()
    tail = 1
    held = bytearray()  # always empty: nothing is ever appended
    max_event_bytes = 0
    broken: str | None = None
    too_large = False

    def feed(self, data: bytes) -> int:
        return 0

    def cut(self, data: bytes) -> bytes:
        return b""

    def rest(self) -> bytes:
        return b""


_STOPPED: Cut = _Stopped()
