"""measure.figures: a probe Trace to the figures classify() reads (per arrival: frames, decoded bytes, time), and the
stub check, against a scripted control plane."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from tokenpath.diagnose import measure
from tokenpath.diagnose.series import plan
from tokenpath.errors import UsageError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.trace import FrameArrival, Read, Trace
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd
from tokenpath.wire.sse import Frame

MS = 1_000_000


def trace_of(groups: list[list[int]], t_ms: list[float], sent_ns: int = 5 * MS) -> Trace:
    """A trace whose head came in its own read, then the frames (sized by value) in reads at `t_ms`."""
    reads = [Read(sent_ns + MS, 100, 0)]
    frames: list[FrameArrival] = []
    for group, t in zip(groups, t_ms, strict=True):
        index = len(reads)
        t_ns = sent_ns + int(t * MS)
        reads.append(Read(t_ns, sum(group), len(group)))
        frames += [FrameArrival(t_ns, index, Frame(raw=b"x" * size)) for size in group]
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
