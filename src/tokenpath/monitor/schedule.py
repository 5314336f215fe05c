"""When each target is probed next. Pure: the caller passes the time, so tests drive it with a fake clock.

A target is due every `interval` seconds from the start of its previous probe, +/- `jitter` of the interval (so
targets with one interval drift apart instead of probing in lockstep). It is never probed twice at once: a probe
that outlasts its interval makes the next one start as soon as it ends. First probes are spread over the first
few seconds, not stacked at start.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from tokenpath.monitor.config import MonitorConfig

FIRST_SPREAD_S = 5.0  # first probes of all targets are spread over at most this long


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
        spread = self._jitter * self._rng.uniform(-1.0, 1.0)
        self._due[name] = now + self._intervals[name] * (1.0 + spread)

    def finish(self, name: str) -> None:
        self._busy.discard(name)

    def seconds_to_next(self, now: float) -> float | None:
        """How long until some idle target is due (0 if one is now); None while every target is being probed."""
        idle = [t for n, t in self._due.items() if n not in self._busy]
        return max(0.0, min(idle) - now) if idle else None

    @property
    def busy(self) -> Sequence[str]:
        return sorted(self._busy)
