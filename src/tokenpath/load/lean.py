"""The load client's recorder: per stream, the arrival of the first content frame and the body's bytes; nothing
per frame.

TraceRecorder keeps a Read per recv() and a FrameArrival per frame, and parses every SSE event as it arrives: the
probe needs that, and it costs ~5.6 µs per read. Under load the client needs less: the time of the read that
completed the first content frame (TTFT, added TTFT), and at the end whether every frame arrived in order, byte
for byte (integrity). So each read is de-chunked by llhttp and kept as bytes; the SSE parser runs only until the
first content frame is found (the same parser and the same per-read timestamp as TraceRecorder, so the arrival
is the same: tests/load/test_lean.py replays traces through both); the body is compared once, whole, with what
the stub sent. Per read that leaves one llhttp feed and one list append (~0.7 µs).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenpath.probe.trace import ERROR_BODY_PREVIEW
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.openai import FrameKind
from tokenpath.wire.sse import SSEParser


@dataclass(frozen=True, slots=True)
class LeanTrace:
    stream_id: str
    t_sent_ns: int
    status: int | None  # None: no response head
    first_content_t_ns: int | None  # when the read that completed the first content frame returned
    # That frame's bytes (what the join to the stub's write reads). A CRLF split after its CR ends the frame at the
    # CR, as the parser rules; the LF, which only the next read brings, is then not in here.
    first_content_raw: bytes | None
    body: bytes  # the de-chunked body, as sent

    @property
    def error_preview(self) -> str:
        return self.body[:ERROR_BODY_PREVIEW].decode("utf-8", "replace").strip()


class LeanRecorder:
    def __init__(self, stream_id: str, t_sent_ns: int) -> None:
        self._stream_id = stream_id
        self._t_sent_ns = t_sent_ns
        self._response = ResponseParser()
        self._pieces: list[bytes] = []
        self._sse: SSEParser | None = SSEParser()  # None once the first content frame is found
        self._first_t: int | None = None
        self._first_raw: bytes | None = None

    @property
    def complete(self) -> bool:
        return self._response.complete

    def on_read(self, t_ns: int, data: bytes) -> None:
        body = self._response.feed(data)
        if not body:
            return
        self._pieces.append(body)
        sse = self._sse
        if sse is not None:
            for frame in sse.feed(body):
                if frame.kind is FrameKind.CONTENT:
                    self._first_t, self._first_raw = t_ns, frame.raw
                    self._sse = None
                    break

    def on_eof(self, t_ns: int) -> None:
        """The peer closed. Raises ProtocolError if the response was cut short."""
        self._response.feed_eof()

    def result(self) -> LeanTrace:
        head = self._response.head
        return LeanTrace(
            self._stream_id,
            self._t_sent_ns,
            head.status if head else None,
            self._first_t,
            self._first_raw,
            b"".join(self._pieces),
        )
