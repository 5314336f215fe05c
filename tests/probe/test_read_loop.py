"""probe/client.py read_until_done: the one read loop every client runs (HTTP/1.1, HTTP/2, HTTP/3, WebSocket), driven
here through its transport seam (ReadSource) by scripted reads and a scripted clock: no socket, no QUIC."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.probe.test_client import FakeClock
from tokenpath.errors import FirstByteTimeout, HTTPStatusError, IdleTimeout, NetworkError, TotalTimeout
from tokenpath.probe.client import ProbeConfig, Woke, read_until_done
from tokenpath.probe.trace import PARTIAL_TRACE, TraceRecorder
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind

MS = 1_000_000
S = 1000 * MS
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
CONTENT = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


class Timer:
    """A wake-up with no read, 10 ms into the wait."""


TIMER = Timer()
Step = tuple[int, bytes] | Timer | None | Exception
CFG = ProbeConfig(url="http://127.0.0.1:9", first_byte_timeout_s=1, idle_timeout_s=1, total_timeout_s=10)


class Scripted:
    """A ReadSource of scripted reads: (time, bytes) fed to the recorder as a socket's would be; b"" is the peer's
    close; None, no read (the wait ran out at `until`); TIMER, no read 10 ms into the wait (a transport's own timer,
    QUIC's); an exception is raised by the read."""

    def __init__(self, rec: TraceRecorder, clock: FakeClock, script: list[Step]) -> None:
        self.rec, self.clock = rec, clock
        self.script: Iterator[Step] = iter(script)
        self.waits: list[tuple[int, int]] = []  # (now, until) of every wait the loop asked for

    def next_read(self, now_ns: int, until_ns: int) -> Woke | None:
        self.waits.append((now_ns, until_ns))
        step = next(self.script)
        if isinstance(step, Exception):
            raise step
        if step is None or isinstance(step, Timer):
            self.clock.now = until_ns if step is None else now_ns + 10 * MS
            return None
        t, data = step
        self.clock.now = t
        if not data:
            self.rec.on_eof(t)
            return Woke(t, 0, closed=True)
        return Woke(t, self.rec.on_read(t, data))

    def error_preview(self, deadline: int) -> str:
        return self.rec.body_preview.decode()


def run(script: list[Step], cfg: ProbeConfig = CFG) -> tuple[TraceRecorder, Scripted]:
    clock = FakeClock()
    rec = TraceRecorder("s", 0)
    source = Scripted(rec, clock, script)
    read_until_done(rec, source, cfg, clock, 10 * S)
    return rec, source


def test_the_loop_reads_to_the_end_each_wait_bounded_by_the_nearest_deadline() -> None:
    rec, source = run([(5 * MS, HEAD), (100 * MS, CONTENT), TIMER, (900 * MS, CONTENT + DONE), (950 * MS, b"")])
    assert rec.trace.frame_count == 3
    assert rec.trace.end is not None
    assert rec.trace.end.kind is EndKind.COMPLETE
    assert source.waits[0] == (0, 1 * S)  # the first byte's deadline
    assert source.waits[1] == (5 * MS, 1 * S)  # a head is no frame: idle counts from the request
    assert source.waits[2] == (100 * MS, 1100 * MS)  # idle: one second after the last frame
    assert source.waits[3] == (110 * MS, 1100 * MS)  # a wake-up with no read moves no deadline
    assert len(source.waits) == 5  # the close ended the body


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ([None], FirstByteTimeout),
        ([(5 * MS, HEAD), (100 * MS, CONTENT), None], IdleTimeout),
        ([(5 * MS, HEAD), (100 * MS, CONTENT), (1200 * MS, b": ping\n\n"[:3])], IdleTimeout),  # bytes, no frame
    ],
)
def test_silence_past_a_deadline_is_its_timeout_and_ends_no_stream(script: list[Step], error: type[Exception]) -> None:
    with pytest.raises(error) as caught:
        run(script)
    assert STREAM_END.of(caught.value) is None  # a timeout of ours: no stream's end
    partial = PARTIAL_TRACE.of(caught.value)
    assert partial is not None
    assert partial.t_end_ns is not None


def test_the_total_deadline_counts_from_the_start() -> None:
    cfg = ProbeConfig(url="http://127.0.0.1:9", first_byte_timeout_s=1, idle_timeout_s=1, total_timeout_s=0.5)
    clock = FakeClock()
    rec = TraceRecorder("s", 0)
    with pytest.raises(TotalTimeout):
        read_until_done(rec, Scripted(rec, clock, [(5 * MS, HEAD), (600 * MS, CONTENT)]), cfg, clock, 500 * MS)


def test_a_read_that_breaks_carries_the_end_and_the_trace_so_far() -> None:
    with pytest.raises(NetworkError) as caught:
        run([(5 * MS, HEAD), (100 * MS, CONTENT), NetworkError("the server reset the stream")])
    end = STREAM_END.of(caught.value)
    assert end is not None
    assert (end.kind, end.how) == (EndKind.CUT_ERROR, BodyEnd.RESET)
    partial = PARTIAL_TRACE.of(caught.value)
    assert partial is not None
    assert partial.frame_count == 1
    assert partial.end == end


def test_the_head_is_checked_once_and_an_error_status_carries_its_end() -> None:
    head = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 7\r\n\r\nupstrea"
    with pytest.raises(HTTPStatusError, match=r"HTTP 502.*upstrea") as caught:
        run([(5 * MS, head)])
    end = STREAM_END.of(caught.value)
    assert end is not None
    assert end.how is BodyEnd.STATUS
