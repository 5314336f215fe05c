"""diagnose/bisect.py against a scripted path: a limit it must bracket within the resolution, in few rounds, and
the bounds' two ends (no limit up to max, a limit below min)."""

from __future__ import annotations

import pytest

from tokenpath.diagnose.bisect import MAX_ROUNDS, Bisection
from tokenpath.diagnose.limits import LimitFound, Measure, SurveyConfig, hint_s, keepalive_silence_s, pacing
from tokenpath.errors import UsageError
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd


def run(search: Bisection, limit_s: float | None, hints: bool = True) -> int:
    """Drive the search against a path that cuts anything longer than `limit_s` at `limit_s`; returns the tries."""
    tries = 0
    while not search.done:
        for value in search.next_values():
            tries += 1
            survived = limit_s is None or value <= limit_s
            search.record(value, survived, None if survived or not hints else limit_s)
        search.end_round()
    return tries


@pytest.mark.parametrize("limit_s", [1.3, 7.0, 59.5, 299.0])
def test_it_brackets_the_limit_within_the_resolution(limit_s: float) -> None:
    search = Bisection(1.0, 300.0, 1.0)
    run(search, limit_s)
    assert search.longest_survived_s is not None
    assert search.shortest_cut_s is not None
    assert search.longest_survived_s <= limit_s < search.shortest_cut_s
    assert search.shortest_cut_s - search.longest_survived_s <= 1.0


def test_the_cuts_timing_brackets_it_in_the_second_round() -> None:
    search = Bisection(1.0, 600.0, 1.0)
    run(search, 60.0)
    assert search.rounds == 3  # max and min; then both sides of where the cut came; then both again (confirmed)
    assert search.confirmed
    blind = Bisection(1.0, 600.0, 1.0)
    run(blind, 60.0, hints=False)
    assert blind.rounds > search.rounds


def test_no_limit_up_to_max_and_a_limit_below_min_end_at_once() -> None:
    free = Bisection(1.0, 10.0, 0.5)
    assert run(free, None) == 2
    assert free.shortest_cut_s is None
    tight = Bisection(1.0, 10.0, 0.5)
    run(tight, 0.5)
    assert tight.longest_survived_s is None
    assert tight.shortest_cut_s == 1.0
    assert tight.rounds == 2  # min tried again, cut again at the same time: below min, confirmed
    assert tight.confirmed


def test_a_path_that_cuts_at_random_is_bounded() -> None:
    search = Bisection(1.0, 300.0, 0.001)
    flip = iter(range(10_000))
    while not search.done:
        for value in search.next_values():
            search.record(value, next(flip) % 2 == 0)
        search.end_round()
    assert search.rounds <= MAX_ROUNDS


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="min"):
        Bisection(5.0, 1.0, 1.0)
    with pytest.raises(UsageError, match="--resolution"):
        SurveyConfig(("http://127.0.0.1:1",), min_s=1, max_s=2, resolution_s=5)
    with pytest.raises(UsageError, match="http://"):
        SurveyConfig(("https://example.com",))


def test_each_measure_asks_the_stub_for_its_silence() -> None:
    assert pacing(Measure.FIRST_BYTE, 2.5) == {
        "head_at": "first-token",
        "ttft_ms": 2500,
        "tokens": 2,
        "interval_ms": 10,
    }
    mid = pacing(Measure.MID_STREAM, 2.5, heartbeat_ms=500)
    assert (mid["pause_ms"], mid["pause_after"], mid["heartbeat_ms"]) == (2500, 1, 500)
    total = pacing(Measure.TOTAL, 10.0, resolution_s=1.0)
    assert (total["tokens"] + 1) * total["interval_ms"] == pytest.approx(10_000, rel=0.05)


def test_the_keepalive_try_stays_inside_a_total_limit() -> None:
    cfg = SurveyConfig(("http://127.0.0.1:1",), min_s=0.5, max_s=100, resolution_s=0.5)
    idle = LimitFound(Measure.MID_STREAM, 9.5, 10.0, None, 5)
    assert keepalive_silence_s([idle], cfg) == 20.0
    total = LimitFound(Measure.TOTAL, 15.0, 15.5, None, 5)
    assert keepalive_silence_s([idle, total], cfg) == 12.0
    close = LimitFound(Measure.TOTAL, 11.0, 11.5, None, 5)
    assert keepalive_silence_s([idle, close], cfg) is None  # cannot tell the two limits apart


def test_the_hint_is_when_the_cut_came_from_the_request_not_from_the_last_byte() -> None:
    # Stock nginx buffering: the held bytes arrive with the cut, 0.3 ms before it, 60 s into a 70 s silence.
    end = StreamEnd(EndKind.CUT_ERROR, BodyEnd.TRUNCATED, at_ns=60_003_300_000, since_last_byte_ns=300_000)
    assert hint_s(end) == pytest.approx(60.0033)
    assert hint_s(None) is None
