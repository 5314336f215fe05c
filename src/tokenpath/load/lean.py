"""The load client's recorder: per stream, the arrival of the first content frame and the body's bytes; nothing
per frame.

TraceRecorder keeps a Read per recv() and a FrameArrival per frame, and parses every frame as it arrives: the
probe needs that, and it costs ~5.6 µs per read. Under load the client needs less: the time of the read that
completed the first content frame (TTFT, added TTFT), and at the end whether every frame arrived in order, byte
for byte (integrity). So each read is de-chunked by llhttp and kept as bytes; the format's frame reader
(wire/reader.py) runs only until the first content frame is found (the same reader and the same per-read timestamp
as TraceRecorder, so the arrival is the same: tests/load/test_lean.py replays traces through both); the body is
compared once, whole, with what the stub sent. Per read that leaves one llhttp feed (past the head, the parser's
own: ClientConnection.body_feed), llhttp's own append of the piece to the body's buffer (wire/client.py direct_body:
no Python call between), and one mark (when the read returned, the body's bytes so far) from which every later
frame's arrival is found once the stub's write sizes are known (load/framedelay.py).

Under compression (a Content-Encoding the client asked for) each read's body is decoded as it arrives
(wire/contentcoding.py), as the probe does: the first content frame is found in the decoded stream, its arrival
is the read that decoded it, and the kept body is the decoded one.

Over HTTP/2 (load/h2conn.py) the connection's core has already cut the stream out of the read: H2LeanRecorder
takes the head, then each read's DATA payload of its stream (an arrival of this stream only if that payload
completes a frame), then the end; the body's path after that is the same code.

How the stream ended (wire/ending.py) is read once, at the end, from the body's last frames only
(FrameReader.last_word_of, from its end): per read the hot path adds one time stamp, never a frame parsed.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from tokenpath.errors import ContentEncodingError, ResponseTooLarge
from tokenpath.probe.trace import ERROR_BODY_PREVIEW
from tokenpath.stub.config import MAX_STREAM_BYTES
from tokenpath.wire.apis import Api, Framing
from tokenpath.wire.client import ClientConnection, ParseError, ResponseHead
from tokenpath.wire.contentcoding import Decoder, IdentityDecoder, decoder_for
from tokenpath.wire.ending import BodyEnd, LastWord, StreamEnd, body_end, broken_by, classify_end
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import FrameReader, WireFrame, frame_reader

# The most body one stream may hold: the stub's own ceiling for one response, so no stream it sends comes near it. The
# body is kept whole for the integrity check; a target that answers 200 and never ends (1.48 GB in 30 s before
# this) ends that stream here, as ResponseTooLarge.
MAX_BODY_BYTES = MAX_STREAM_BYTES


def too_large() -> ResponseTooLarge:
    return ResponseTooLarge(
        f"response too large: the body passed {MAX_BODY_BYTES} bytes (the stub's ceiling for one stream) and was "
        "still going"
    )


@dataclass(frozen=True, slots=True)
class LeanTrace:
    stream_id: str
    t_sent_ns: int
    status: int | None  # None: no response head
    first_content_t_ns: int | None  # when the read that completed the first content frame returned
    # That frame's bytes (what the join to the stub's write reads). A CRLF split after its CR ends the frame at the
    # CR, as the parser rules; the LF, which only the next read brings, is then not in here.
    first_content_raw: bytes | None
    body: bytes  # the de-chunked body, decoded when it had a Content-Encoding
    api: Api = Api.OPENAI
    first_content: WireFrame | None = None  # the first content frame itself (its text names the stub's token)
    content_encoding: str = "identity"  # the response's Content-Encoding, as decoded
    # Per read that brought body bytes: its time and the (decoded) body's length after it, flat pairs.
    marks: array[int] = field(default_factory=lambda: array("q"))
    first_token_t_ns: int | None = None  # the read that completed the first reasoning or content frame
    end: StreamEnd | None = None  # how the stream ended (wire/ending.py); None: it has not (or had no head)

    @property
    def error_preview(self) -> str:
        return self.body[:ERROR_BODY_PREVIEW].decode("utf-8", "replace").strip()


class LeanRecorder:
    def __init__(self, stream_id: str, t_sent_ns: int, api: Api = Api.OPENAI) -> None:
        self._stream_id = stream_id
        self._t_sent_ns = t_sent_ns
        self._api = api
        # The body as it comes (decoded in place when coded): one buffer, not a list of llhttp's pieces, which kept
        # ~200 objects per stream alive for the collector to walk (a generation-1 pass of a 300-stream client took
        # ~20 ms, the loop stopped with it) and had their lengths summed for the marks.
        self._body = bytearray()
        self._whole: bytes | None = None  # the body as bytes, once asked for (the end, the result)
        # The client core's callbacks, not its events: a body piece goes straight into the buffer, the head and the
        # end set a field; per read nothing else is called (no event queue, no property).
        # llhttp appends each piece itself (direct_body); what follows the end in the same read is cut at the end.
        self._conn = ClientConnection(
            "GET", on_head=self._on_head, on_body=self._body.extend, on_end=self._on_end, direct_body=True
        )
        self._receive = self._conn.receive_data  # bound once: the per-read call until the body streams
        # Once the head is in, the parser's own feed (ClientConnection.body_feed): receive_data's frame and its head
        # checks cost ~0.4 µs of a read's ~1.5 µs of Python here. Dropped at the response's end.
        self._feed: Callable[[bytes], None] | None = None
        self._reader: FrameReader | None = frame_reader(api)  # None once the first content frame is found
        self._decoder: Decoder = IdentityDecoder()
        self._coded = False  # a Content-Encoding other than identity: each read goes through the decoder
        self._watching = True  # a read's body needs more than a mark: it is decoded, or searched for the first frames
        self._head: ResponseHead | None = None
        self._first_t: int | None = None
        self._first: WireFrame | None = None
        self._first_token_t: int | None = None  # reasoning or content: the first-token figure's arrival
        # Bounded by the body: one pair per read that added to it, (time, the body's bytes so far).
        self._marks = array("q")
        self._nbytes = 0  # the body's bytes the last mark counted
        self._end_at = 0  # the body's bytes when the response ended: any after are another response's
        self._framed = False  # the body is a token stream of its format (a 2xx answer in its type): frames read
        self._t_last = 0  # the last read that brought bytes
        self._how: BodyEnd | None = None  # how HTTP ended the body, once it has
        self._t_end = 0
        self.complete = False  # the response is whole (a plain field: the protocol reads it after every read)

    def on_read(self, t_ns: int, data: bytes) -> None:
        # The hot path (once per read per stream). Past the first content frame, an identity body costs llhttp's
        # feed, its callback appending the piece to the buffer, and the read's mark.
        self._t_last = t_ns
        feed = self._feed
        if feed is None:
            self._receive(data)
            if self._head is not None and not self.complete:
                self._feed = self._conn.body_feed()
        else:
            try:
                feed(data)
            except ParseError as exc:
                self._feed = None
                raise self._conn.parse_failed(exc) from None
        if self.complete and self._how is None:
            del self._body[self._end_at :]  # a second response's body in the same read (direct_body)
            self._ended(t_ns, body_end(self._head.framing) if self._head is not None else BodyEnd.LENGTH)
        if self._watching:
            self._watch(t_ns)
            return
        n = len(self._body)
        if n != self._nbytes:
            self._nbytes = n
            self._marks.extend((t_ns, n))
            if n > MAX_BODY_BYTES:
                raise too_large()

    def _on_end(self) -> None:
        self.complete = True
        self._feed = None  # what follows the end in a later read is receive_data's (not the response's)
        self._end_at = len(self._body)

    def _ended(self, t_ns: int, how: BodyEnd) -> None:
        if self._how is None:
            self._how, self._t_end = how, t_ns

    def _watch(self, t_ns: int) -> None:
        """One read's body bytes (those past the last mark) while they need more than a mark: decoded in place if
        coded, then marked and searched for the first frames."""
        buf = self._body
        before = self._nbytes
        body = bytes(memoryview(buf)[before:]) if len(buf) > before else b""  # the view is gone before a resize
        if self._coded:
            if body:
                body = self._decoder.feed(body)  # b"" when the read only fed the decompressor
            del buf[before:]
            buf += body
            if self.complete:
                self._decoder.end()  # a compressed stream cut short: ContentEncodingError (truncated)
        if not body:
            return
        self._nbytes = len(buf)
        self._marks.extend((t_ns, self._nbytes))
        if self._nbytes > MAX_BODY_BYTES:
            raise too_large()
        reader = self._reader
        if reader is not None:
            for frame in reader.scan(body):  # frame by frame: what follows the first content frame is not parsed
                kind = reader.kind(frame)
                if kind is FrameKind.REASONING and self._first_token_t is None:
                    self._first_token_t = t_ns
                elif kind is FrameKind.CONTENT:
                    self._first_t, self._first = t_ns, frame
                    if self._first_token_t is None:
                        self._first_token_t = t_ns
                    self._reader = None
                    break
        self._watching = self._coded or self._reader is not None

    def _on_head(self, head: ResponseHead) -> None:
        """The decoder for its Content-Encoding; frames are read from a 2xx answer in the format's Content-Type
        only (an SSE body always, as the probe does), so a JSON error body is reported by its status."""
        self._head = head
        ok = 200 <= head.status < 300
        reader = self._reader
        self._framed = reader is not None and (
            ok and (reader.spec.framing is Framing.SSE or head.content_type == reader.spec.content_type)
        )
        if not self._framed:
            self._reader = None
        try:
            self._decoder = decoder_for(head.header("content-encoding"))
            self._coded = not isinstance(self._decoder, IdentityDecoder)
        except ContentEncodingError:
            if ok:
                raise
            self._reader = None  # an error answer in a coding it cannot read: kept as it came, for the preview
        self._watching = self._coded or self._reader is not None

    def on_eof(self, t_ns: int) -> None:
        """The peer closed. Raises ProtocolError if the response was cut short, ContentEncodingError if its
        compressed stream was."""
        self._conn.receive_eof()
        self._ended(t_ns, BodyEnd.CLOSE)
        if self._coded:
            self._decoder.end()

    def cut(self, exc: BaseException, t_ns: int) -> StreamEnd | None:
        """The end `exc` gave the stream (wire/ending.py broken_by), or None when it ends none."""
        how = broken_by(exc)
        return self._end(how, t_ns, " ".join(str(exc).split())[:200]) if how is not None else None

    def _end(self, how: BodyEnd, t_ns: int, detail: str = "") -> StreamEnd:
        """The end from the body's last frames, found from its end (FrameReader.last_word_of): read once, here only."""
        said = LastWord.NOTHING
        if self._framed and how is not BodyEnd.STATUS:
            said = _end_reader(self._api).last_word_of(self._decoded_body())
        last = self._t_last or None
        return classify_end(said, how, sent_ns=self._t_sent_ns, end_ns=t_ns, last_byte_ns=last, detail=detail)

    def _decoded_body(self) -> bytes:
        whole = self._whole
        if whole is None or len(whole) != len(self._body):
            self._whole = whole = bytes(self._body)  # the end and the result ask: one copy
        return whole

    def result(self) -> LeanTrace:
        head = self._head
        first = self._first
        end = None
        if self._how is not None and head is not None:
            end = self._end(self._how if 200 <= head.status < 300 else BodyEnd.STATUS, self._t_end)
        # The stream is over: the core and its parser let go of this recorder (a cycle otherwise, freed only by the
        # collector, whose passes a loaded client's loop lag would show; tests/load/test_no_cycles.py).
        self._feed = None
        self._conn.detach()
        return LeanTrace(
            self._stream_id,
            self._t_sent_ns,
            head.status if head else None,
            self._first_t,
            first.raw if first is not None else None,
            self._decoded_body(),
            self._api,
            first,
            self._decoder.encoding,
            self._marks,
            self._first_token_t,
            end,
        )


class H2LeanRecorder(LeanRecorder):
    """The same recorder over HTTP/2: the head, each read's DATA payload of this stream, the end (END_STREAM).

    The connection's core (wire/h2client.py) has de-framed the stream already; what is left is the body's path:
    decoding, marks, and the first content frame, exactly as over HTTP/1.1."""

    def on_head(self, head: ResponseHead) -> None:
        if self._head is None:
            self._on_head(head)

    def on_data(self, t_ns: int, data: bytes) -> None:
        """One read's DATA payload of this stream (every DATA frame of it in that read)."""
        self._t_last = t_ns
        if data:
            self._body += data
        if self._watching:
            self._watch(t_ns)
        elif data:
            self._nbytes = n = len(self._body)
            self._marks.extend((t_ns, n))
            if n > MAX_BODY_BYTES:
                raise too_large()

    def on_end(self, t_ns: int) -> None:
        """END_STREAM: the response is whole; a compressed stream cut short raises ContentEncodingError."""
        self.complete = True
        self._ended(t_ns, BodyEnd.END_STREAM)
        if self._coded:
            self._decoder.end()


@cache
def _end_reader(api: Api) -> FrameReader:
    """The format's reader its streams' ends are read with: last_word_of keeps nothing of a body (it reads with
    parsers of its own), so one serves every stream."""
    return frame_reader(api)
