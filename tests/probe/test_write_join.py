"""probe --stub-url: a run joined to the stub's write log of its stream (frame k is write k): added TTFT, and p50/p99
of each later frame's arrival minus its write; no figure when the frames are not the writes one to one."""

from __future__ import annotations

import pytest

from tests.probe.test_client import MS, chunk
from tests.probe.test_decoding import probe
from tokenpath.audit import StreamLog, Write
from tokenpath.probe.metrics import run_metrics

ROLE = b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
TOKENS = [b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i for i in range(4)]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def log(frames: list[bytes], written_ms: list[float], first_content: int | None = 1) -> StreamLog:
    writes = tuple(
        Write(i, int(t * MS), int(t * MS), len(f)) for i, (f, t) in enumerate(zip(frames, written_ms, strict=True))
    )
    return StreamLog("s1", 10.0, 0, "complete", writes, first_content)


def test_added_ttft_and_each_later_frame_from_the_writes() -> None:
    # Written at 0 (role), 20, 30, 40, 50 ms; the path delivers the first token 1 ms late, then holds the rest
    # and delivers them together at 80 ms.
    steps: list[tuple[float, bytes | None]] = [(1, HEAD + chunk(ROLE)), (20, chunk(TOKENS[0])),
                                               (59, chunk(b"".join(TOKENS[1:])) + b"0\r\n\r\n")]  # fmt: skip
    _, trace = probe(steps)
    frames = [ROLE, *TOKENS]
    m = run_metrics(trace, log(frames, [0, 20, 30, 40, 50]))
    assert m.added_ttft_ms == pytest.approx(1)
    assert m.added_frame_delay_ms["p50"] == pytest.approx(40)  # 80 - 40
    assert m.added_frame_delay_ms["p99"] == pytest.approx(50, abs=0.5)  # 80 - 30
    assert run_metrics(trace).added_ttft_ms is None  # without a log: nothing joined


def test_frames_that_are_not_the_writes_give_no_join() -> None:
    _, trace = probe([(1, HEAD + chunk(ROLE + b"".join(TOKENS)) + b"0\r\n\r\n")])
    resized = [ROLE, *TOKENS[:-1], TOKENS[-1] + b"x"]
    assert run_metrics(trace, log(resized, [0, 1, 2, 3, 4])).added_ttft_ms is None
    assert run_metrics(trace, log([ROLE, *TOKENS[:-1]], [0, 1, 2, 3])).added_frame_delay_ms == {}
    assert run_metrics(trace, log([ROLE, *TOKENS], [0, 1, 2, 3, 4], first_content=2)).added_ttft_ms is None
