from __future__ import annotations

import itertools
import random

from tokenpath.monitor.schedule import CONCURRENCY, FIRST_SPREAD_S, LATE_SHARE, OVERRUN, Schedule


def test_first_probes_are_spread_and_then_come_every_interval_within_the_jitter() -> None:
    s = Schedule({"a": 10.0, "b": 10.0}, jitter=0.1, now=0.0, rng=random.Random(1))
    assert s.due(0.0) == ["a"]  # b waits its share of the first spread
    assert s.due(FIRST_SPREAD_S / 2) == ["a", "b"]
    starts = []
    now = 0.0
    for _ in range(400):
        for name in s.due(now):
            if name == "a":
                starts.append(now)
            s.start(name, now)
            s.finish(name)
        wait = s.seconds_to_next(now)
        assert wait is not None
        now += wait
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) > 50
    assert all(9.0 - 0.02 <= g <= 11.0 + 0.02 for g in gaps), (min(gaps), max(gaps))
    assert max(gaps) - min(gaps) > 0.5  # the jitter is applied, not only declared


def test_a_target_is_never_probed_twice_at_once_and_a_probe_due_meanwhile_is_dropped_as_overrun() -> None:
    s = Schedule({"a": 1.0}, jitter=0.0, now=0.0)
    s.start("a", 0.0)
    assert s.drop_overdue(0.5) == []
    assert s.seconds_to_next(0.5, slot_free=False) == 0.5  # the watch wakes when the next one is due, to skip it
    assert s.drop_overdue(1.0) == [("a", OVERRUN, 1)]
    assert s.due(1.5) == []  # still being probed
    assert s.drop_overdue(3.2) == [("a", OVERRUN, 2)]  # the ones of 2.0 and 3.0: a watch that slept counts both
    s.finish("a")
    assert s.due(3.5) == []  # not at once: the next one keeps its time
    assert s.seconds_to_next(3.5) == 0.5
    assert s.due(4.0) == ["a"]
    assert s.drop_overdue(4.0) == []


def test_a_probe_that_finds_no_slot_waits_half_its_interval_then_is_dropped_as_concurrency() -> None:
    s = Schedule({"slow": 10.0, "b": 2.0}, jitter=0.0, now=0.0)  # first times spread: slow at 0, b at 1
    s.start("slow", 0.0)  # the one slot
    assert s.due(1.5) == ["b"]
    assert s.drop_overdue(1.5) == []  # still within LATE_SHARE of its interval
    assert LATE_SHARE == 0.5
    assert s.seconds_to_next(1.5, slot_free=False) == 0.5  # wakes to drop it, not only when a probe ends
    assert s.drop_overdue(2.0) == [("b", CONCURRENCY, 1)]
    assert s.due(2.5) == []  # its next time is one interval after the dropped one
    s.finish("slow")
    assert s.due(3.0) == ["b"]
    assert s.drop_overdue(7.2) == [("b", CONCURRENCY, 2)]  # those of 3.0 and 5.0; 7.0's may still start
    assert s.due(7.2) == ["b"]


def test_with_a_slot_free_a_late_probe_is_not_dropped_it_starts_late() -> None:
    """A watch loop slow to come back (a loaded host) found every probe due at once: slots were free, so none of
    them is 'concurrency'; they start on this turn."""
    s = Schedule({"a": 2.0}, jitter=0.0, now=0.0)
    assert s.drop_overdue(5.0, slot_free=True) == []
    assert s.due(5.0) == ["a"]
    assert s.drop_overdue(5.0) == [("a", CONCURRENCY, 3)]  # no free slot: those of 0, 2 and 4 s (its wait ends now)


def test_after_a_drop_the_next_time_is_in_the_future_whatever_the_jitter() -> None:
    s = Schedule({"a": 1.0}, jitter=0.5, now=0.0, rng=random.Random(7))
    now = 0.0
    for _ in range(500):
        now += 0.37
        for _name, _reason, count in s.drop_overdue(now):
            assert count >= 1
        assert (s.seconds_to_next(now, slot_free=False) or 0.0) > 0.0  # nothing left overdue past its wait


def test_zero_jitter_keeps_the_exact_interval() -> None:
    s = Schedule({"a": 2.0}, jitter=0.0, now=0.0)
    s.start("a", 0.0)
    s.finish("a")
    assert s.seconds_to_next(0.5) == 1.5


def test_the_declared_interval_and_jitter_are_the_ones_the_watch_schedules_by() -> None:
    from tokenpath.monitor.config import from_dict

    def gaps(jitter: float) -> list[float]:
        cfg = from_dict({"monitor": {"interval_s": 2, "jitter": jitter},
                         "target": [{"name": "a", "url": "http://127.0.0.1:9"}]})  # fmt: skip
        s = Schedule.for_config(cfg, now=0.0, rng=random.Random(3))
        starts: list[float] = []
        now = 0.0
        while len(starts) < 30:
            for name in s.due(now):
                starts.append(now)
                s.start(name, now)
                s.finish(name)
            now += s.seconds_to_next(now) or 0.0
        return [b - a for a, b in itertools.pairwise(starts)]

    assert {round(g, 9) for g in gaps(0.0)} == {2.0}
    jittered = gaps(0.25)
    assert all(1.5 - 1e-9 <= g <= 2.5 + 1e-9 for g in jittered)
    assert max(jittered) - min(jittered) > 0.3
