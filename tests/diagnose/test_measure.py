"""measure.figures: a probe Trace to the figures classify() reads (per arrival: frames, decoded bytes, time), and the
stub check, against a scripted control plane."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from tokenpath.audit import StreamLog, Write
from tokenpath.diagnose import measure
from tokenpath.diagnose.classify import classify
from tokenpath.diagnose.series import Run, plan
from tokenpath.diagnose.shape import Kind, seen
from tokenpath.errors import UsageError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.trace import FrameArrival, Read, Trace
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd
from tokenpath.wire.reader import WireFrame
from tokenpath.wire.sse import Frame

MS = 1_000_000


def content(size: int) -> Frame:
    """A content frame of `size` bytes, as the stub's plain format writes one (`data: 17...`)."""
    data = b"1" + b"." * (size - 9)
    return Frame(raw=b"data: " + data + b"\n\n", data=data)


def trace_of(groups: list[list[int]], t_ms: list[float], sent_ns: int = 5 * MS) -> Trace:
    """A trace whose head came in its own read, then the frames (sized by value) in reads at `t_ms`."""
    reads = [Read(sent_ns + MS, 100, 0)]
    frames: list[FrameArrival] = []
    for group, t in zip(groups, t_ms, strict=True):
        index = len(reads)
        t_ns = sent_ns + int(t * MS)
        reads.append(Read(t_ns, sum(group), len(group)))
        frames += [FrameArrival(t_ns, index, content(size)) for size in group]
    return Trace(
        "tp-1",
        sent_ns,
        reads=reads,
        frames=frames,
        t_first_byte_ns=sent_ns + MS,
        read_count=len(reads),
        frame_count=len(frames),
        bursts=Counter(len(g) for g in groups),
        content_encoding="gzip",
    )


def test_figures_per_arrival() -> None:
    run = dataclasses.replace(plan(controlled=True)[0], frames=6)  # the schedule places exactly its own frames
    fig = measure.figures(run, trace_of([[60, 60], [60], [60, 60, 60]], [200.0, 250.0, 400.0]))
    assert fig.bursts == (2, 1, 3)  # the head's read completed no frame: not an arrival
    assert fig.burst_bytes == (120, 60, 180)
    assert fig.arrivals_ms == (200.0, 250.0, 400.0)
    assert fig.ttfb_ms == 1.0
    assert fig.head_ms is None  # the trace has no final head's time: the head rules read TTFB
    after_hints = trace_of([[60]], [200.0])  # a 103 at 1 ms (the first byte), the 200's head at 150 ms
    after_hints.t_head_ns = after_hints.t_sent_ns + 150 * MS
    assert measure.figures(run, after_hints).head_ms == 150.0
    assert fig.content_encoding == "gzip"
    assert (fig.interval_ms, fig.frame_bytes, fig.stub_ttft_ms) == (run.interval_ms, run.frame_bytes, run.ttft_ms)
    assert fig.holds_ms() == (50.0, 250.0 - (150 + 2 * 50), 400.0 - (150 + 3 * 50))


def test_run_series_probes_each_run_in_order() -> None:
    seen: list[str | None] = []

    def probe(cfg: ProbeConfig) -> Trace:
        seen.append(cfg.accept_encoding)
        return trace_of([[60]] * 4, [150.0, 200.0, 250.0, 300.0])

    out = measure.run_series(ProbeConfig(url="http://127.0.0.1:9"), plan(controlled=False), probe)
    assert [m.figures.name for m in out] == ["base", "browser"]
    assert seen == [None, None, "gzip, deflate, br, zstd"]  # the first run's warm-up stream, then the series


@pytest.mark.parametrize(
    ("answer", "stub"),
    [
        ((200, b'{"status": "ok", "pacing": {"tokens": 1}}'), True),
        ((200, b'{"status": "ok"}'), False),
        ((404, b""), False),
        ((200, b"not json"), False),
        (OSError("refused"), False),
    ],
)
def test_is_stub(monkeypatch: pytest.MonkeyPatch, answer: object, stub: bool) -> None:
    def exchange(url: str, method: str, path: str, **_: object) -> object:
        assert (method, path) == ("GET", measure.HEALTH_PATH)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(measure, "exchange", exchange)
    assert measure.is_stub("http://127.0.0.1:9/v1") is stub


def test_https_is_never_asked_and_check_stub_names_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "exchange", lambda *a, **k: pytest.fail("asked"))
    assert measure.is_stub("https://127.0.0.1:9") is False
    with pytest.raises(UsageError, match="`stub_url`"):
        measure.check_stub("https://127.0.0.1:9")


def test_run_series_exposes_each_run_s_end() -> None:
    cut = StreamEnd(EndKind.CUT_SILENT, BodyEnd.CLOSE, 60_000 * MS, 60_000 * MS)

    def probe(cfg: ProbeConfig) -> Trace:
        trace = trace_of([[60]] * 2, [150.0, 200.0])
        trace.end = cut
        return trace

    out = measure.run_series(ProbeConfig(url="http://127.0.0.1:9"), plan(controlled=False), probe)
    assert [m.end for m in out] == [cut, cut]


def paced_trace(cfg: ProbeConfig, loaded: bool) -> Trace:
    """The stub's schedule of the run `cfg` asks for (its `tokenpath` member), each frame alone 1 ms after its write;
    `loaded`: a busy host kept the client off the CPU for frames 4-8, read at once 30 ms after the last's write."""
    pacing = dict(cfg.extra_body)["tokenpath"]
    size, interval, ttft, n = pacing["frame_bytes"], pacing["interval_ms"], pacing["ttft_ms"], pacing["tokens"]
    if pacing["format"] != "plain":
        raise AssertionError(pacing)
    writes = [ttft + k * interval for k in range(n)]
    groups, at = [[size] for _ in writes], [w + 1.0 for w in writes]
    if loaded:
        groups = [*groups[:4], [size] * 5, *groups[9:]]
        at = [*at[:4], writes[8] + 30.0, *at[9:]]
    return trace_of(groups, at)


def test_an_unsure_answer_is_measured_again_and_a_delay_the_load_made_is_no_evidence() -> None:
    """Under load one stream's frames came together (the client was off the CPU), the other runs streamed: the
    first answer is unsure. The series is measured again, each run read by its repeat held least: it streams; as
    base's repeats disagree it is measured once more, and a hold in 1 of 3 repeats (a modest burst) is a busy
    host's outlier: named in a note, not counted."""
    base_streams = 0
    asked: list[str] = []

    def probe(cfg: ProbeConfig) -> Trace:
        nonlocal base_streams
        pacing = dict(cfg.extra_body)["tokenpath"]
        name = "base" if (pacing["interval_ms"], pacing["frame_bytes"]) == (50.0, 60) else "other"
        asked.append(name)
        base_streams += name == "base"
        return paced_trace(cfg, loaded=name == "base" and base_streams == 2)  # the first after the warm-up

    identity = plan(controlled=True, encodings=False)
    loaded_once = [measure.figures(r, paced_trace(measure.config_for(TEMPLATE, r), r.name == "base")) for r in identity]
    first = classify(loaded_once)
    assert first.cause == "unsure", first  # what the loaded stream alone made of the series
    measured, verdict = measure.diagnose_series(TEMPLATE, identity, probe)
    assert verdict.cause == "streams", verdict
    assert any("measured 3 times" in note for note in verdict.notes)  # said, not hidden
    assert any("too few repeats to count (base 1 of 3)" in note for note in verdict.notes)
    assert verdict.held_runs is None
    names = [m.figures.name for m in measured]
    assert names == ["base", "slow", "large", "long"]  # one of each, in the series' order (it grew by `long` first)
    assert len(asked) == 1 + len(identity) + 1 + 2 * len(names)  # the warm-up, the series, `long`, two repeats


def test_a_hold_that_repeats_stays_unsure_and_the_repeats_are_bounded() -> None:
    asked = 0

    def probe(cfg: ProbeConfig) -> Trace:
        nonlocal asked
        asked += 1
        pacing = dict(cfg.extra_body)["tokenpath"]
        return paced_trace(cfg, loaded=(pacing["interval_ms"], pacing["frame_bytes"]) == (50.0, 60))

    identity = plan(controlled=True, encodings=False)
    _, verdict = measure.diagnose_series(TEMPLATE, identity, probe)
    assert verdict.cause == "unsure"
    assert any(f"measured {1 + measure.MAX_REPEATS} times" in note for note in verdict.notes)
    assert asked == 1 + len(identity) + 1 + measure.MAX_REPEATS * (len(identity) + 1)  # grown by `long`, repeated


TEMPLATE = ProbeConfig(url="http://127.0.0.1:9")


def keepalive() -> Frame:
    return Frame(raw=b": ping\n\n", comments=[b" ping"])


def with_frames(trace: Trace, extra: list[tuple[float, list[WireFrame]]]) -> Trace:
    """`trace` with reads of other frames (keep-alives) added at their times, in time order."""
    sent = trace.t_sent_ns
    rows = [(r.t_ns, r, [f.frame for f in trace.frames if f.read_index == i]) for i, r in enumerate(trace.reads)]
    rows += [
        (sent + int(t * MS), Read(sent + int(t * MS), sum(len(f.raw) for f in fs), len(fs)), fs) for t, fs in extra
    ]
    rows.sort(key=lambda row: row[0])
    reads = [r for _, r, _ in rows]
    frames = [FrameArrival(r.t_ns, i, f) for i, (_, r, fs) in enumerate(rows) for f in fs]
    return dataclasses.replace(trace, reads=reads, frames=frames, read_count=len(reads), frame_count=len(frames))


def test_a_stream_of_keep_alives_only_is_unsure() -> None:
    """A keep-alive is a frame without content (README): 40 of them, then the end, is no stream that streams. They
    are counted apart (other_frames) and stay in the shape: a path's holds are judged on every frame it held."""
    endpoint = plan(controlled=False)[0]
    only = with_frames(trace_of([], []), [(50.0 * k, [keepalive()]) for k in range(1, 41)])
    fig = measure.figures(endpoint, only)
    assert (fig.frames, fig.other_frames, len(fig.bursts)) == (40, 40, 40)
    verdict = classify([fig])
    assert verdict.cause == "unsure"
    assert "no content frame came (base: 40 frames" in verdict.summary


def test_content_among_keep_alives_is_judged_as_before() -> None:
    """One content frame is enough to judge the stream: only a stream of nothing but frames without output is
    unsure for that reason."""
    run = plan(controlled=True)[0]  # base: 12 frames, 50 ms apart from 150 ms
    held = trace_of([[60] * 12], [701.0])
    fig = measure.figures(run, with_frames(held, [(100.0 * k, [keepalive()]) for k in range(1, 7)]))
    assert (fig.frames, fig.other_frames) == (18, 6)
    assert "no content frame came" not in classify([fig]).summary


SKEW_S = 5  # a stub on another host: its CLOCK_MONOTONIC 5 s off the client's (/tmp/review-diagnose/skewshim.py)


def log_of(trace: Trace, offset_ns: int = 0, before_ms: float = 1.0) -> StreamLog:
    """The stub's write log of `trace`'s frames, one write each `before_ms` before it arrived, on a clock `offset_ns`
    off the client's."""
    writes = tuple(
        Write(k, f.t_ns - int(before_ms * MS) + offset_ns, f.t_ns - int(before_ms * MS) + offset_ns, len(f.frame.raw))
        for k, f in enumerate(trace.frames)
    )
    return StreamLog(trace.stream_id, 50.0, trace.t_sent_ns + offset_ns, "complete", writes, 0)


def streaming() -> tuple[Run, Trace]:
    """base (12 frames, 50 ms apart from 150 ms), each frame alone 1.5 ms after its schedule."""
    run = plan(controlled=True)[0]
    assert (run.frames, run.ttft_ms, run.interval_ms) == (12, 150.0, 50.0)
    return run, trace_of([[60]] * 12, [151.5 + 50 * k for k in range(12)])


def test_frame_writes_reads_a_log_on_the_client_s_clock() -> None:
    run, trace = streaming()
    writes = measure.frame_writes(run, trace, log_of(trace), trace.api)
    assert writes == tuple(150.5 + 50 * k for k in range(12))  # the log's, not the schedule's
    assert measure.off_clock(trace, log_of(trace)) is None


@pytest.mark.parametrize(
    ("offset_s", "said"), [(-SKEW_S, "before the request was sent"), (SKEW_S, "after its frame arrived")]
)
def test_frame_writes_does_not_use_a_log_on_another_clock(offset_s: int, said: str) -> None:
    """A log whose writes land before the request was sent, or after their frame arrived, is another host's clock:
    the run is placed on its schedule (or not at all), never 5 s "held" or "early"."""
    run, trace = streaming()
    skewed = log_of(trace, offset_s * 1_000_000_000)
    assert measure.frame_writes(run, trace, skewed, trace.api) == tuple(150.0 + 50 * k for k in range(12))
    unplaced = dataclasses.replace(run, frames=13)  # frames the schedule does not place: no writes at all
    assert measure.frame_writes(unplaced, trace, skewed, trace.api) is None
    assert said in (measure.off_clock(trace, skewed) or "")
    assert measure.figures(run, trace, skewed).seen().kind is Kind.STREAMS  # not "holds the whole response"


def test_a_write_within_the_slack_is_on_the_clock() -> None:
    """The stub reads its clock before it writes: a write a hair after its arrival (a browser's mapped times) is
    still this clock's."""
    run, trace = streaming()
    log = log_of(trace, before_ms=-1.0)
    assert measure.off_clock(trace, log) is None
    assert measure.frame_writes(run, trace, log, trace.api) == tuple(152.5 + 50 * k for k in range(12))


def test_a_series_against_a_stub_on_another_clock_says_so() -> None:
    """diagnose --stub-url of a stub whose audit is on another clock: the runs stream on their schedule, and a note
    says the log was not used and why."""
    last: list[Trace] = []

    def probe(cfg: ProbeConfig) -> Trace:
        last[:] = [paced_trace(cfg, loaded=False)]
        return last[0]

    def audit(stream_id: str) -> StreamLog:
        return log_of(last[0], -SKEW_S * 1_000_000_000)

    measured, verdict = measure.diagnose_series(TEMPLATE, plan(controlled=True, encodings=False), probe, audit)
    assert verdict.cause == "streams", verdict
    assert all("before the request was sent" in m.clock_note for m in measured)
    assert any("not on this host's clock" in n and "read on its schedule" in n for n in verdict.notes), verdict.notes


def test_shape_judges_without_writes_that_come_after_their_arrivals() -> None:
    """Writes on a clock 5 s ahead of the arrivals (each frame's write after it arrived): the shape is judged by
    counts, one arrival of 12 frames being the whole response (it used to fail on the writes it could not read)."""
    writes = [SKEW_S * 1000 + 150.0 + 50 * k for k in range(12)]
    assert seen([12], [701.0], writes).kind is Kind.WHOLE
    assert seen([1] * 12, [151.0 + 50 * k for k in range(12)], writes).kind is Kind.STREAMS
