"""The load client's lean recorder against the probe's TraceRecorder: the same reads in, the same first-content
arrival and the same bytes out, however the response is split; integrity decided from the whole body."""

from __future__ import annotations

import contextlib
import random

import pytest

from tests.helpers import HTTP_APIS
from tokenpath.errors import StreamFormatError
from tokenpath.load.integrity import check_body, expected_frames
from tokenpath.load.lean import LeanRecorder
from tokenpath.probe.trace import TraceRecorder
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.ending import BodyEnd, EndKind

from ..wire.samples import STREAMS

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
SID, MODEL, TOKENS = "tp-lean", "tokenpath-stub", 12


def chunked(frames: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(f), f) for f in frames) + b"0\r\n\r\n"


def splits(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, min(60, len(data) - 1))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def replay(reads: list[bytes]) -> tuple[TraceRecorder, LeanRecorder]:
    trace, lean = TraceRecorder(SID, 0), LeanRecorder(SID, 0)
    for i, data in enumerate(reads, 1):
        trace.on_read(i * 1000, data)
        lean.on_read(i * 1000, data)
    return trace, lean


STUB = expected_frames(SID, MODEL, TOKENS)
SHAPES = {
    "stub frames": STUB,
    "comments and a role delta first, CRLF events": [
        b": keep-alive\r\n\r\n",
        b'data: {"choices":[{"delta":{"role":"assistant"}}]}\r\n\r\n',
        *(f.replace(b"\n\n", b"\r\n\r\n") for f in STUB[1:]),
    ],
    "plain frames": [b"data: %d\n\n" % i for i in range(20)],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_first_content_arrival_and_the_bytes_are_the_trace_recorders(shape: str) -> None:
    frames = SHAPES[shape]
    rng = random.Random(shape)
    response = HEAD + chunked(frames)
    cases = [[response], [response[i : i + 1] for i in range(len(response))]]
    cases += [splits(response, rng) for _ in range(200)]
    for reads in cases:
        trace, lean = replay(reads)
        assert lean.complete
        assert trace.complete
        got = lean.result()
        t = trace.trace
        assert t.first_content is not None
        first = t.frames[t.first_content]
        assert got.first_content_t_ns == first.t_ns
        assert got.first_content_raw in (first.frame.raw, first.frame.raw[:-1])  # the LF of a CRLF split after CR
        assert got.body == b"".join(frames) == b"".join(f.frame.raw for f in t.frames)
        assert got.status == 200


def test_no_content_frame_leaves_the_arrival_empty() -> None:
    _, lean = replay([HEAD + chunked([b": ping\n\n", b"data: [DONE]\n\n"])])
    got = lean.result()
    assert (got.first_content_t_ns, got.first_content_raw) == (None, None)


def test_a_body_cut_short_is_a_protocol_error_at_eof() -> None:
    from tokenpath.errors import ProtocolError

    lean = LeanRecorder(SID, 0)
    lean.on_read(1, HEAD + chunked(STUB)[:-30])
    with pytest.raises(ProtocolError):
        lean.on_eof(2)


def test_integrity_from_the_whole_body() -> None:
    exact = check_body(b"".join(STUB), SID, MODEL, TOKENS)
    assert (exact.byte_exact, exact.lost, exact.out_of_order, exact.received) == (True, 0, 0, len(STUB))
    lost = check_body(b"".join(STUB[:3] + STUB[4:]), SID, MODEL, TOKENS)
    assert (lost.byte_exact, lost.lost, lost.received) == (False, 1, len(STUB) - 1)
    swapped = check_body(b"".join([*STUB[:3], STUB[4], STUB[3], *STUB[5:]]), SID, MODEL, TOKENS)
    assert (swapped.lost, swapped.out_of_order) == (0, 1)
    respaced = check_body(b"".join(f.replace(b'":"', b'": "') for f in STUB), SID, MODEL, TOKENS)
    assert (respaced.byte_exact, respaced.lost, respaced.out_of_order) == (False, 0, 0)  # re-serialised


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_the_end_is_the_trace_recorders_at_every_cut_from_the_body_s_tail_only(api: Api) -> None:
    body, _ = STREAMS[api]
    head = HEAD.replace(b"text/event-stream", SPECS[api].content_type.encode())
    for cut in range(0, len(body) + 1, 7 if api is Api.RESPONSES else 3):
        reads = [head + chunked([body[:cut]]) if cut else head + b"0\r\n\r\n"]  # the chunked terminator ends it
        trace, lean = TraceRecorder(SID, 0, api=api), LeanRecorder(SID, 0, api)
        for t, data in enumerate(reads, 1):
            lean.on_read(t * 1000, data)
            with contextlib.suppress(StreamFormatError):  # an unfinished message or line: the trace raises, lean not
                trace.on_read(t * 1000, data)
        got, want = lean.result().end, trace.trace.end
        assert got is not None
        assert want is not None
        assert (got.kind, got.how) == (want.kind, want.how), (api, cut)
        if cut == len(body):
            assert got.kind is EndKind.COMPLETE
        elif cut < len(body) // 2:
            assert got.kind is EndKind.CUT_SILENT


def test_a_stream_that_closed_before_its_final_event_is_cut_silent() -> None:
    lean = LeanRecorder(SID, 0)
    lean.on_read(1_000, HEAD.replace(b"Transfer-Encoding: chunked\r\n", b"") + b"".join(STUB[:-1]))
    lean.on_eof(5_000)  # a close-delimited body: HTTP saw a normal end, [DONE] never came
    end = lean.result().end
    assert end is not None
    assert (end.kind, end.how, end.at_ns, end.since_last_byte_ns) == (EndKind.CUT_SILENT, BodyEnd.CLOSE, 5_000, 4_000)
    lean = LeanRecorder(SID, 0)
    lean.on_read(1_000, HEAD + chunked(STUB))
    end = lean.result().end
    assert end is not None
    assert (end.kind, end.how) == (EndKind.COMPLETE, BodyEnd.CHUNKED)


def test_anthropic_s_ping_never_starts_ttft() -> None:
    ping = b'event: ping\ndata: {"type": "ping"}\n\n'
    delta = (
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n'
    )
    head = HEAD.replace(b"text/event-stream", SPECS[Api.ANTHROPIC].content_type.encode())
    trace, lean = TraceRecorder(SID, 0, api=Api.ANTHROPIC), LeanRecorder(SID, 0, Api.ANTHROPIC)
    reads = [head, b"%x\r\n%b\r\n" % (len(ping), ping), b"%x\r\n%b\r\n" % (len(delta), delta)]
    for t, data in enumerate(reads, 1):
        trace.on_read(t * 1000, data)
        lean.on_read(t * 1000, data)
    assert lean.result().first_content_t_ns == 3_000
    assert trace.trace.t_first_content_ns == 3_000


def test_over_http2_end_stream_without_the_final_event_is_cut_silent() -> None:
    from tokenpath.load.lean import H2LeanRecorder
    from tokenpath.wire.client import ResponseHead
    from tokenpath.wire.framing import Framing

    head = ResponseHead(200, "2", (("content-type", "text/event-stream"),), Framing.LENGTH, True)
    for frames, kind in ((STUB[:-1], EndKind.CUT_SILENT), (STUB, EndKind.COMPLETE)):
        lean = H2LeanRecorder(SID, 0)
        lean.on_head(head)
        lean.on_data(1_000, b"".join(frames))
        lean.on_end(2_000)
        end = lean.result().end
        assert end is not None
        assert (end.kind, end.how, end.since_last_byte_ns) == (kind, BodyEnd.END_STREAM, 1_000)


def test_each_read_s_mark_is_the_body_s_bytes_after_it_however_the_response_is_split() -> None:
    """The marks (each read's time and the body's bytes after it, counted from the pieces llhttp appended) are the
    figures of counting each read's de-chunked bytes as it comes (wire/client.py ResponseParser, one read at a time)."""
    from tokenpath.wire.client import ResponseParser

    response = HEAD + chunked(STUB)
    rng = random.Random("marks")
    cases = [[response], [response[i : i + 1] for i in range(len(response))]]
    for reads in [*cases, *(splits(response, rng) for _ in range(100))]:
        _, lean = replay(reads)
        parser, want, nbytes = ResponseParser(), list[int](), 0
        for i, data in enumerate(reads, 1):
            nbytes += len(parser.feed(data))
            if want[-1:] != [nbytes] and nbytes:
                want += [i * 1000, nbytes]
        assert list(lean.result().marks) == want


def test_a_second_response_in_the_read_that_ended_the_first_is_not_its_body() -> None:
    """llhttp hands the recorder each body piece itself (direct_body), a second response's too: cut at the end."""
    first = HEAD + chunked(STUB)
    second = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra"
    lean = LeanRecorder(SID, 0)
    lean.on_read(1_000, first[:100])
    lean.on_read(2_000, first[100:] + second)
    assert lean.complete
    got = lean.result()
    assert got.body == b"".join(STUB)
    assert list(got.marks[-2:]) == [2_000, len(got.body)]


def test_a_malformed_chunk_mid_body_is_the_peers_protocol_error_on_the_body_feed() -> None:
    """Past the head each read goes to llhttp's own feed (ClientConnection.body_feed); bytes that break the chunked
    coding there are still the peer's malformed body (a PeerError, which the stream's protocol turns into its
    end), never llhttp's bare exception."""
    from tokenpath.errors import PeerError

    lean = LeanRecorder(SID, 0)
    lean.on_read(1_000, HEAD + chunked(STUB[:1])[:-5])  # the first chunk whole, not the last one after it
    assert lean._feed is not None  # the body streams: the next read takes the short way
    with pytest.raises(PeerError, match="malformed HTTP response body"):
        lean.on_read(2_000, b"zz\r\nxx\r\n")
    assert not lean.complete


def test_a_read_after_the_end_is_not_fed_to_the_finished_response() -> None:
    lean = LeanRecorder(SID, 0)
    response = HEAD + chunked(STUB)
    lean.on_read(1_000, response[:200])
    lean.on_read(2_000, response[200:])
    assert lean.complete
    lean.on_read(3_000, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra")  # not this response's: ignored
    got = lean.result()
    assert got.body == b"".join(STUB)
    assert list(got.marks[-2:]) == [2_000, len(got.body)]


def test_a_long_body_leaves_the_collector_nothing_per_read_to_walk() -> None:
    """The body is one buffer (not a list of llhttp's pieces, ~200 references per stream that every collector pass
    over a loaded client walked): what the recorder's own containers refer to does not grow with the reads."""
    import gc

    def walked(reads: int) -> int:
        frames = expected_frames(SID, MODEL, reads)
        lean = LeanRecorder(SID, 0)
        lean.on_read(1, HEAD)
        for i, frame in enumerate(frames, 2):
            lean.on_read(i, b"%x\r\n%b\r\n" % (len(frame), frame))
        assert len(lean._marks) >= 2 * len(frames) - 4  # every read was marked
        tracked = [value for value in vars(lean).values() if gc.is_tracked(value)]
        return len(gc.get_referents(*tracked))

    assert walked(200) == walked(20)
