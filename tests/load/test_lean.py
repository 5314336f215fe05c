"""The load client's lean recorder against the probe's TraceRecorder: the same reads in, the same first-content
arrival and the same bytes out, however the response is split; integrity decided from the whole body."""

from __future__ import annotations

import random

import pytest

from tokenpath.load.integrity import check_body, expected_frames
from tokenpath.load.lean import LeanRecorder
from tokenpath.probe.trace import TraceRecorder

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
