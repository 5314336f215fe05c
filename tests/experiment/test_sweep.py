from __future__ import annotations

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
    assert inferred.timer_ms == 182.5
    assert inferred.size_bytes is not None
    assert inferred.caveat is None


def test_a_point_not_placed_is_neither_held_nor_streaming() -> None:
    from tokenpath.experiment.sweep import _held

    assert [_held(True), _held(False), _held(None)] == ["no", "yes", "?"]  # None: undecided under load, or no floor
