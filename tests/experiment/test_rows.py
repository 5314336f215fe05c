"""Rows, floors and verdicts from synthetic runs whose figures are known exactly."""

from __future__ import annotations

from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.rows import Floor, build_row
from tokenpath.experiment.spec import Condition, PathSpec
from tokenpath.probe.metrics import RunMetrics

COND = Condition(50.0, 60, "loopback", False)


def record(fpr: float, added: float, frames: int = 40, passed: bool = True, burst: int = 1) -> RunRecord:
    arrivals = int(frames / fpr)
    metrics = RunMetrics("s", 200, frames, arrivals, fpr, 0.3, 20 + added, {}, {burst: arrivals}, 2000.0)
    r = RunRecord("p", "s", metrics=metrics, path_added_ttft_ms=added, audit={"passed": passed, "late_writes": 0})
    r.arrivals = [(i * 50.0 * burst, burst) for i in range(arrivals)]
    return r


def test_direct_floor_and_a_streaming_path_within_it() -> None:
    direct = [record(1.0, 0.10), record(1.0, 0.12), record(1.02, 0.11)]
    floor = Floor.from_direct(direct)
    assert floor is not None
    assert floor.fpr == 1.02
    row = build_row(PathSpec("nginx", "http_1_1"), COND, [record(1.0, 0.2)] * 3, floor)
    assert row.within_floor is True
    assert row.verdict.startswith("streams")
    assert row.added_ttft_ms_median == 0.2 - 0.11


def test_coalescing_path_gets_bursts_and_late_first_token() -> None:
    floor = Floor.from_direct([record(1.0, 0.1)])
    row = build_row(PathSpec("haproxy"), COND, [record(5.0, 200.0, burst=5)] * 3, floor)
    assert row.within_floor is False
    assert row.modal_burst == 5
    assert row.modal_burst_gap_ms == 250.0
    assert row.verdict == "coalesces: bursts of 5, first token +200 ms"


def test_buffering_path() -> None:
    floor = Floor.from_direct([record(1.0, 0.1)])
    row = build_row(PathSpec("buffer"), COND, [record(40.0, 1950.0, burst=40)] * 2, floor)
    assert row.verdict.startswith("buffers the whole response")


def test_exclusions_are_counted_and_kept_out_of_the_figures() -> None:
    floor = Floor.from_direct([record(1.0, 0.1)])
    runs = [record(1.0, 0.1), record(9.0, 500.0, passed=False), RunRecord("p", "x", error="connection reset")]
    row = build_row(PathSpec("nginx"), COND, runs, floor)
    assert (row.runs, row.excluded) == (3, 2)
    assert row.exclusions == {"stub audit failed": 1, "probe failed": 1}
    assert row.fpr_median == 1.0
    assert [r.included for r in row.raw] == [True, False, False]


def test_no_valid_runs() -> None:
    row = build_row(PathSpec("nginx"), COND, [RunRecord("p", "x", error="refused")], None)
    assert row.verdict == "no valid runs"
    assert row.fpr_median is None
