from __future__ import annotations

import itertools
import random

from tokenpath.monitor.schedule import FIRST_SPREAD_S, Schedule


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


def test_a_target_is_never_probed_twice_at_once() -> None:
    s = Schedule({"a": 1.0}, jitter=0.0, now=0.0)
    s.start("a", 0.0)
    assert s.due(5.0) == []  # overdue, but still being probed
    assert s.seconds_to_next(5.0) is None
    s.finish("a")
    assert s.due(5.0) == ["a"]  # a probe that outlasted its interval: the next starts at once
    assert s.seconds_to_next(5.0) == 0.0


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
