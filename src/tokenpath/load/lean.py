"""The load client's recorder: per stream, the arrival of the first content frame and the body's bytes; nothing
per frame.

TraceRecorder keeps a Read per recv() and a FrameArrival per frame, and parses every frame as it arrives: the
probe needs that, and it costs ~5.6 µs per read. Under load the client needs less: the time of the read that
completed the first content frame (TTFT, added TTFT), and at the end whether every frame arrived in order, byte
for byte (integrity). So each read is de-chunked by llhttp and kept as bytes; the format's frame reader
(wire/reader.py) runs only until the first content frame is found (the same reader and the same per-read timestamp
as TraceRecorder, so the arrival is the same: tests/load/test_lean.py replays traces through both); the body is
compared once, whole, with what the stub sent. Per read that leaves one llhttp feed and one list append (~0.7 µs),
and one mark (when the read returned, the body's bytes so far) from which every later frame's arrival is found
once the stub's write sizes are known (load/framedelay.py).

Under compression (a Content-Encoding the client asked for) each read's body is decoded as it arrives
(wire/contentcoding.py), as the probe does: the first content frame is found in the decoded stream, its arrival
is the read that decoded it, and the kept body is the decoded one.

Over HTTP/2 (load/h2conn.py) the connection's core has already cut the stream out of the read: H2LeanRecorder
takes the head, then each read's DATA payload of its stream (an arrival of this stream only if that payload
completes a frame), then the end; the body's path after that is the same code.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from tokenpath.errors import ContentEncodingError
from tokenpath.probe.trace import ERROR_BODY_PREVIEW
from tokenpath.wire.apis import Api, Framing
from tokenpath.wire.client import ResponseHead, ResponseParser
from tokenpath.wire.contentcoding import Decoder, IdentityDecoder, decoder_for
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import FrameReader, WireFrame, frame_reader


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

    @property
    def error_preview(self) -> str:
        return self.body[:ERROR_BODY_PREVIEW].decode("utf-8", "replace").strip()


class LeanRecorder:
    def __init__(self, stream_id: str, t_sent_ns: int, api: Api = Api.OPENAI) -> None:
        self._stream_id = stream_id
        self._t_sent_ns = t_sent_ns
        self._api = api
        self._response = ResponseParser()
        self._pieces: list[bytes] = []
        self._reader: FrameReader | None = frame_reader(api)  # None once the first content frame is found
        self._decoder: Decoder = IdentityDecoder()
        self._coded = False  # a Content-Encoding other than identity: each read goes through the decoder
        self._head: ResponseHead | None = None
        self._first_t: int | None = None
        self._first: WireFrame | None = None
        self._first_token_t: int | None = None  # reasoning or content: the first-token figure's arrival
        self._marks = array("q")  # bounded by the body: one pair per read that added to it
        self._nbytes = 0

    @property
    def complete(self) -> bool:
        return self._response.complete

    def on_read(self, t_ns: int, data: bytes) -> None:
        # The hot path (once per read per stream): an identity body skips the decoder altogether.
        body = self._response.feed(data)
        if self._head is None and self._response.head is not None:
            self._on_head(self._response.head)
        self._on_body(t_ns, body, self._response.complete)

    def _on_body(self, t_ns: int, body: bytes, complete: bool) -> None:
        """One read's (de-framed) body bytes: decoded if coded, kept, marked, and searched for the first frames."""
        if self._coded:
            if body:
                body = self._decoder.feed(body)  # b"" when the read only fed the decompressor
            if complete:
                self._decoder.end()  # a compressed stream cut short: ContentEncodingError (truncated)
        if not body:
            return
        self._pieces.append(body)
        self._nbytes += len(body)
        marks = self._marks
        marks.append(t_ns)
        marks.append(self._nbytes)
        reader = self._reader
        if reader is not None:
            for frame in reader.feed(body):
                kind = reader.kind(frame)
                if kind is FrameKind.REASONING and self._first_token_t is None:
                    self._first_token_t = t_ns
                elif kind is FrameKind.CONTENT:
                    self._first_t, self._first = t_ns, frame
                    if self._first_token_t is None:
                        self._first_token_t = t_ns
                    self._reader = None
                    break

    def _on_head(self, head: ResponseHead) -> None:
        """The decoder for its Content-Encoding; frames are read from a 2xx answer in the format's Content-Type
        only (an SSE body always, as the probe does), so a JSON error body is reported by its status."""
        self._head = head
        ok = 200 <= head.status < 300
        reader = self._reader
        if reader is not None and not (
            ok and (reader.spec.framing is Framing.SSE or head.content_type == reader.spec.content_type)
        ):
            self._reader = None
        try:
            self._decoder = decoder_for(head.header("content-encoding"))
            self._coded = not isinstance(self._decoder, IdentityDecoder)
        except ContentEncodingError:
            if ok:
                raise
            self._reader = None  # an error answer in a coding it cannot read: kept as it came, for the preview

    def on_eof(self, t_ns: int) -> None:
        """The peer closed. Raises ProtocolError if the response was cut short, ContentEncodingError if its
        compressed stream was."""
        self._response.feed_eof()
        if self._coded:
            self._decoder.end()

    def result(self) -> LeanTrace:
        head = self._head
        first = self._first
        return LeanTrace(
            self._stream_id,
            self._t_sent_ns,
            head.status if head else None,
            self._first_t,
            first.raw if first is not None else None,
            b"".join(self._pieces),
            self._api,
            first,
            self._decoder.encoding,
            self._marks,
            self._first_token_t,
        )


class H2LeanRecorder(LeanRecorder):
    """The same recorder over HTTP/2: the head, each read's DATA payload of this stream, the end (END_STREAM).

    The connection's core (wire/h2client.py) has de-framed the stream already; what is left is the body's path:
    decoding, marks, and the first content frame, exactly as over HTTP/1.1."""

    def __init__(self, stream_id: str, t_sent_ns: int, api: Api = Api.OPENAI) -> None:
        super().__init__(stream_id, t_sent_ns, api)
        self._ended = False

    @property
    def complete(self) -> bool:
        return self._ended

    def on_head(self, head: ResponseHead) -> None:
        if self._head is None:
            self._on_head(head)

    def on_data(self, t_ns: int, data: bytes) -> None:
        """One read's DATA payload of this stream (every DATA frame of it in that read)."""
        self._on_body(t_ns, data, False)

    def on_end(self, t_ns: int) -> None:
        """END_STREAM: the response is whole; a compressed stream cut short raises ContentEncodingError."""
        self._ended = True
        if self._coded:
            self._decoder.end()
