"""A raw-socket client that asks for a Content-Encoding and counts frames in the decoded stream, by the design's
definition: an arrival is a read that completed at least one decoded frame; a read that only fed the decompressor is
a read, not an arrival. The composition the probe is to adopt: wire/client.py's ResponseParser (body bytes per
read) -> wire/contentcoding.py's decoder_for(head's Content-Encoding).feed -> wire/sse.py's SSEParser."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

from tokenpath.wire.client import ResponseHead, ResponseParser
from tokenpath.wire.contentcoding import Decoder, decoder_for
from tokenpath.wire.formats.openai import chat_body
from tokenpath.wire.request import build_json_request
from tokenpath.wire.sse import SSEParser

READ_BYTES = 65536
MAX_READS = 100_000  # a stream that never ends must not loop forever


@dataclass
class DecodedStream:
    head: ResponseHead | None = None
    encoding: str = "identity"
    reads: int = 0  # every recv() that returned bytes
    arrivals: list[int] = field(default_factory=list)  # frames completed per arrival, in order
    first_arrival_ms: float | None = None  # from the request's last byte written

    @property
    def frames(self) -> int:
        return sum(self.arrivals)

    @property
    def frames_per_arrival(self) -> float:
        return self.frames / len(self.arrivals) if self.arrivals else 0.0


def stream_decoded(port: int, accept_encoding: str | None = "gzip", timeout_s: float = 10.0) -> DecodedStream:
    headers = [("Accept-Encoding", accept_encoding)] if accept_encoding is not None else []
    request = build_json_request(
        f"127.0.0.1:{port}",
        "/v1/chat/completions",
        chat_body(model="m", prompt="p", max_tokens=None, stream_id="decoding-client"),
        headers=headers,
    )
    out = DecodedStream()
    parser = ResponseParser("POST")
    decoder: Decoder | None = None
    events = SSEParser()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request)
        sent = time.perf_counter_ns()
        for _ in range(MAX_READS):
            data = sock.recv(READ_BYTES)
            now = time.perf_counter_ns()
            if not data:
                parser.feed_eof()
                break
            out.reads += 1
            body = parser.feed(data)
            if decoder is None and parser.head is not None:
                out.head = parser.head
                decoder = decoder_for(parser.head.header("content-encoding"))
                out.encoding = decoder.encoding
            completed = len(events.feed(decoder.feed(body))) if decoder is not None and body else 0
            if completed:
                out.arrivals.append(completed)
                if out.first_arrival_ms is None:
                    out.first_arrival_ms = (now - sent) / 1e6
            if parser.complete:
                break
    if decoder is not None:
        decoder.end()
    return out
