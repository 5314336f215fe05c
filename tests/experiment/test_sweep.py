from __future__ import annotations

from typing import Any

import pytest

from tokenpath.errors import UsageError
from tokenpath.experiment.sweep import infer
from tokenpath.results.model import SweepPoint


def point(size: int, interval: float, added: float, burst: int, within_floor: bool = False) -> SweepPoint:
    return SweepPoint(size, interval, float(burst), added, burst, within_floor)


def test_one_interval_names_no_rule_and_says_why() -> None:
    """At 50 ms only, bursts of 2 at 1,000 B and a 180 ms hold at 60 B fit a size and a timer alike."""
    pts = [point(60, 50, 180, 4), point(1000, 50, 50, 2), point(2000, 50, 0.1, 1, within_floor=True)]
    inferred = infer(pts)
    assert inferred.size_bytes is None
    assert inferred.timer_ms is None
    assert "second interval" in (inferred.rule or "")
    assert "one interval (50 ms) cannot tell" in (inferred.caveat or "")


def test_two_intervals_name_the_rule() -> None:
    pts = [point(60, 50, 182, 4), point(60, 25, 183, 8), point(1000, 50, 50, 2), point(1000, 25, 25, 2)]
    inferred = infer(pts)
    assert inferred.timer_ms == 180  # no holds given: the added TTFT, a lower bound, to two significant figures
    assert "at least ~180 ms" in (inferred.rule or "")
    assert inferred.size_bytes is not None
    assert inferred.caveat is None


def test_a_point_not_placed_is_neither_held_nor_streaming() -> None:
    from tokenpath.experiment.sweep import _held

    assert [_held(True), _held(False), _held(None)] == ["no", "yes", "?"]  # None: undecided under load, or no floor


def cork_points() -> list[SweepPoint]:
    """The reviewer's `sweep cork --link loopback` (Linux TCP_CORK: >= 1448 B queued or 200 ms): added TTFT reads
    ~180 ms at the timer's points, the stub's 20 ms TTFT short of the timer, which starts at the held head."""
    return [
        SweepPoint(60, 25, 6.67, 180.224018, 8, False),
        SweepPoint(500, 25, 2.86, 50.166202, 3, False),
        SweepPoint(1000, 25, 2.0, 25.118684, 2, False),
        SweepPoint(60, 100, 2.86, 180.330499, 3, False),
        SweepPoint(500, 100, 2.86, 180.309379, 3, False),
        SweepPoint(1000, 100, 2.0, 100.200699, 2, False),
    ]


# Per point, the larger of after_first_delay_ms_p99 and the added TTFB (cork's ttfb_ms_median minus direct's).
CORK_HOLDS = {
    (60, 25.0): max(200.308161, 200.970313 - 0.575334),
    (500, 25.0): max(50.291198, 70.516369 - 0.470468),
    (1000, 25.0): max(25.353853, 45.509777 - 0.570276),
    (60, 100.0): max(200.276333, 200.672876 - 0.427755),
    (500, 100.0): max(200.288692, 200.683592 - 0.39143),
    (1000, 100.0): max(100.308431, 120.596705 - 0.373985),
}


def test_the_timer_is_the_longest_hold_not_the_first_frames_added_ttft() -> None:
    inferred = infer(cork_points(), CORK_HOLDS)
    assert inferred.timer_ms == 200  # the kernel's 200 ms, not 180.3
    assert "after ~200 ms" in (inferred.rule or "")
    assert "180" not in (inferred.rule or "")


def test_the_size_threshold_is_stated_as_the_range_the_points_allow() -> None:
    inferred = infer(cork_points(), CORK_HOLDS)
    # bursts of 3 x 507 wire bytes (500 B): 1014 < N <= 1521, which holds the true 1448
    assert inferred.size_range == (1015, 1521)
    assert inferred.size_bytes == 1521  # the upper bound, documented as such
    assert "between 1015 and 1521 B are queued" in (inferred.rule or "")
    assert ">= 1521" not in (inferred.rule or "")


def test_the_timer_is_stated_to_the_precision_its_points_support() -> None:
    from tokenpath.experiment.sweep import stated

    assert stated(200.29, 0.1) == 200
    assert stated(45.31, 0.2) == 45
    assert stated(182.5, 30) == 200  # points 30 ms apart support no finer than 100 ms steps


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"sizes": [-5]}, "`sizes` [-5]: each a frame size of 1 to"),
        ({"sizes": []}, "`sizes` []: each a frame size"),
        ({"runs": 0}, "`runs` 0: expected 1 to"),
        ({"frames": -1}, "`frames` -1: expected 1 to"),
        ({"intervals": [float("nan")]}, "`intervals` [nan]: each 0 to"),
        ({"intervals": [1000.0], "frames": 5000}, "would run 5000 s"),
    ],
)
def test_a_sweeps_numbers_are_checked_before_it_runs(change: dict[str, Any], says: str) -> None:
    """From flags, never a matrix file's parse: `--sizes -5` or `--runs 0` certified, swept, then blamed the direct
    path for keeping no run."""
    from tokenpath.experiment.grid import DEFAULT_INTERVALS, DEFAULT_SIZES
    from tokenpath.experiment.sweep import sweep_experiment

    args: dict[str, Any] = {"sizes": list(DEFAULT_SIZES), "intervals": list(DEFAULT_INTERVALS), "runs": 3, "frames": 30}
    sweep_experiment("pass", "stock", "loopback", False, **args)  # the defaults are taken
    with pytest.raises(UsageError) as refused:
        sweep_experiment("pass", "stock", "loopback", False, **{**args, **change})
    assert says in str(refused.value)
