"""When each target is probed next, and which scheduled probes were dropped. Pure: the caller passes the time, so
tests drive it with a fake clock.

A target is due every `interval` seconds from the start of its previous probe, +/- `jitter` of the interval (so
targets with one interval drift apart instead of probing in lockstep). First probes are spread over the first few
seconds, not stacked at start. A scheduled probe that cannot run is dropped, never queued, and said so
(`drop_overdue`), with one of two reasons:

- OVERRUN: its time came while the target's previous probe still ran (a target is never probed twice at once);
- CONCURRENCY: every `max_concurrency` slot stayed busy for LATE_SHARE of its interval past its time.

Either way the next probe of that target is scheduled one interval on, so a slow or crowded monitor probes less
often (and its drop counter climbs) instead of building a backlog that would fire in a burst later.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from tokenpath.monitor.config import MonitorConfig

FIRST_SPREAD_S = 5.0  # first probes of all targets are spread over at most this long
# How late a due probe may still start when it waits for a free slot, as a share of its interval: past half of it,
# it would be nearer the next scheduled probe than its own time, so the next one stands in for it.
LATE_SHARE = 0.5

OVERRUN = "overrun"  # the `reason` label of a probe skipped because the previous one of its target still runs
CONCURRENCY = "concurrency"  # ... dropped because every slot was busy (max_concurrency)
DROP_REASONS = (OVERRUN, CONCURRENCY)


class Schedule:
    def __init__(
        self, intervals: dict[str, float], jitter: float, now: float, rng: random.Random | None = None
    ) -> None:
        self._intervals = dict(intervals)
        self._jitter = jitter
        self._rng = rng or random.Random()
        names = list(intervals)
        spread = min(FIRST_SPREAD_S, *intervals.values()) if names else 0.0
        self._due = {name: now + spread * i / len(names) for i, name in enumerate(names)}
        self._busy: set[str] = set()

    @classmethod
    def for_config(cls, config: MonitorConfig, now: float, rng: random.Random | None = None) -> Schedule:
        """Each target's declared interval, the declared jitter."""
        return cls({t.name: t.interval_s for t in config.targets}, config.settings.jitter, now, rng)

    def due(self, now: float) -> list[str]:
        """Targets whose time has come and that are not being probed, the most overdue first."""
        ready = [n for n, t in self._due.items() if t <= now and n not in self._busy]
        return sorted(ready, key=self._due.__getitem__)

    def start(self, name: str, now: float) -> None:
        self._busy.add(name)
        self._due[name] = now + self._next_interval(name)

    def finish(self, name: str) -> None:
        self._busy.discard(name)

    def drop_overdue(self, now: float, slot_free: bool = False) -> list[tuple[str, str, int]]:
        """The scheduled probes that can no longer run, as (target, reason, how many), each target's next time moved
        past `now`. Call it after starting what could start: an idle target still due here found no slot, unless
        `slot_free` (a slot freed meanwhile, or the caller was slow to come back: it starts late, on the next turn)."""
        dropped = []
        for name, due in self._due.items():
            interval = self._intervals[name]
            if name in self._busy:
                reason, late_by = OVERRUN, 0.0  # its time came while it runs: skipped at once
            elif slot_free:
                continue
            else:
                reason, late_by = CONCURRENCY, LATE_SHARE * interval
            if now < due + late_by:
                continue
            missed = int((now - due - late_by) // interval)  # a loop that slept long missed several: skip them
            due += missed * interval
            while due + late_by <= now:  # left: less than an interval; a jittered step is at least half of one
                due += self._next_interval(name)
                missed += 1
            self._due[name] = due
            dropped.append((name, reason, missed))
        return dropped

    def seconds_to_next(self, now: float, slot_free: bool = True) -> float | None:
        """How long until something is to be done: an idle target due (when a slot is free), a probe to drop (an idle
        one past its wait for a slot, a busy one whose next time came); 0 if now. None without targets."""
        times = []
        for name, due in self._due.items():
            if name in self._busy or slot_free:
                times.append(due)
            else:
                times.append(due + LATE_SHARE * self._intervals[name])
        return max(0.0, min(times) - now) if times else None

    def _next_interval(self, name: str) -> float:
        return self._intervals[name] * (1.0 + self._jitter * self._rng.uniform(-1.0, 1.0))

    @property
    def busy(self) -> Sequence[str]:
        return sorted(self._busy)
