"""One rule for both protocols: the same compressed event stream, cut into the same reads, read over HTTP/1.1 (the
chunked body through TraceRecorder.on_read) and over HTTP/2 (DATA frames through probe --http2's read loop) gives the
same frames, arrivals, TTFT read and content coding: a read that only fed the decompressor is a read, not an arrival,
on both."""

from __future__ import annotations

import pytest

from tests.probe.test_h2stream import CONTENT, ROLE, H2Peer, run
from tests.wire.battery import encoded
from tokenpath.probe.trace import Trace, TraceRecorder

DONE = b"data: [DONE]\n\n"
PARTS = [ROLE, CONTENT, CONTENT, DONE]


def reads_of(coding: str) -> list[bytes]:
    """The compressed body in three reads: role + content; two bytes of the next content (they complete no frame);
    its rest + [DONE]."""
    body, ends = encoded(coding, PARTS, flush=True)
    return [body[: ends[1]], body[ends[1] : ends[1] + 2], body[ends[1] + 2 :]]


def over_http11(coding: str) -> Trace:
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: " + coding.encode()
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n")  # fmt: skip
    rec = TraceRecorder("s", 0)
    rec.on_read(1, head)
    pieces = reads_of(coding)
    for t, piece in enumerate(pieces, start=2):
        last = b"0\r\n\r\n" if t == len(pieces) + 1 else b""
        rec.on_read(t, b"%x\r\n%b\r\n%b" % (len(piece), piece, last))
    return rec.trace


def over_http2(coding: str) -> Trace:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/event-stream"),
                                   (b"content-encoding", coding.encode())])  # fmt: skip
        out = [peer.take()]
        pieces = reads_of(coding)
        for i, piece in enumerate(pieces):
            peer.h2.send_data(sid, piece, end_stream=i == len(pieces) - 1)
            out.append(peer.take())
        return out

    trace, _ = run(script, accept_encoding=coding)
    return trace


@pytest.mark.parametrize("coding", ["gzip", "br"])
def test_a_compressed_stream_reads_the_same_over_both_protocols(coding: str) -> None:
    one, two = over_http11(coding), over_http2(coding)
    assert one.content_encoding == two.content_encoding == coding
    assert one.frame_count == two.frame_count == 4
    assert one.bursts == two.bursts == {2: 2}  # the read that only fed the decompressor is no arrival
    assert one.read_count == two.read_count == 4
    assert [r.frames for r in one.reads] == [r.frames for r in two.reads] == [0, 2, 0, 2]
    assert (one.first_content, one.first_token) == (two.first_content, two.first_token) == (1, 1)
    # TTFT is the read that completed the first content frame, on each side's own clock
    assert one.t_first_content_ns == one.reads[1].t_ns
    assert two.t_first_content_ns == two.reads[1].t_ns
    assert [f.frame.data for f in one.frames] == [f.frame.data for f in two.frames]
