"""Finding one limit by bisection, sans-IO: which silences (or totals) to try next, from what the earlier tries
showed. Each round tries several values at once (the caller waits for them together), and a cut's own timing
(it came N s into the silence) is a hint that brackets the limit in the next round; once bracketed, the two values
that bracket it are tried again once (the confirming round): the one survives again, the other is cut again near
the same time, or the limit is not called firm. A survey then takes about three limits' time, not one per halving.

    search = Bisection(min_s=1, max_s=600, resolution_s=1)
    while not search.done:
        values = search.next_values()
        search.record(value, survived, hint_s)  # for each value tried
        search.end_round()
    search.inconsistent or (search.longest_survived_s, search.shortest_cut_s)

One limit explains a path's cuts only if they agree (`inconsistent`): every cut came no sooner than the longest
value that came through (a timer that cut at 7.6 s cannot let 12.667 s of silence through, nor one that held 1 s let
15 s through), a value that came through once and was cut once was cut at its own length (it sits at the limit), and
a value cut twice was cut near the same time both times. A path that cuts at random
(a flaky link, a load balancer draining backends) breaks one of these sooner or later, and the search stops there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PER_ROUND = 3  # values tried at once in a round after the first
MAX_ROUNDS = 12  # a bound on the tries, whatever the path does (a path that cuts at random never converges)
MAX_SLACK_S = 0.5  # how far a cut's timing may stray (timers, scheduling) and still be the same limit's, at most


@dataclass(slots=True)
class Bisection:
    min_s: float
    max_s: float
    resolution_s: float
    longest_survived_s: float | None = None  # the longest value that came through whole
    shortest_cut_s: float | None = None  # the shortest value that was cut
    rounds: int = 0
    confirmed: bool = False  # the bracketing values were tried again and did as they did the first time
    _hint_s: float | None = None  # when the last cut came, counted as the value is (into the silence, or in all)
    _tried: set[float] = field(default_factory=set)
    _cuts: dict[float, list[float | None]] = field(default_factory=dict)  # value -> when each of its cuts came
    _survived: set[float] = field(default_factory=set)  # every value that came through
    _confirming: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.min_s < self.max_s:
            raise ValueError(f"need 0 < min ({self.min_s}) < max ({self.max_s})")
        if self.resolution_s <= 0:
            raise ValueError(f"resolution must be positive, not {self.resolution_s}")

    @property
    def slack_s(self) -> float:
        """How far two timings of one limit may differ (half the resolution, MAX_SLACK_S at most)."""
        return min(self.resolution_s / 2, MAX_SLACK_S)

    @property
    def done(self) -> bool:
        if self.rounds >= MAX_ROUNDS or self.inconsistent is not None or self.confirmed:
            return True
        return bool(self.rounds) and self.shortest_cut_s is None  # max came through: no limit up to max

    @property
    def bracketed(self) -> bool:
        """The limit is bracketed within the resolution, or below min (min was cut)."""
        if not self.rounds or self.shortest_cut_s is None:
            return False
        if self.longest_survived_s is None:
            return self.shortest_cut_s == self.min_s
        return self.shortest_cut_s - self.longest_survived_s <= self.resolution_s

    @property
    def cut_times_s(self) -> list[float | None]:
        """When each cut came (None: held, no timing), in the order of the values cut."""
        return [hint for value in sorted(self._cuts) for hint in self._cuts[value]]

    @property
    def inconsistent(self) -> str | None:
        """Why no one limit explains what the tries showed (None: one can), in words. Each cut came at a time (its
        hint; a held one: no later than its value): none may come sooner than a value that came through, a value
        that came through once and was cut once sits at the limit (cut within the slack of its own length: Envoy's
        3 s total lets 3.0017 s through and cuts the next at 2.998 s), and a value cut twice was cut near the same
        time both times."""
        slack = self.slack_s
        if self._survived:
            most = max(self._survived)
            for value, hints in sorted(self._cuts.items()):
                for hint in hints:
                    at = hint if hint is not None else value
                    if at < most - slack:
                        came = f"a cut came after {round(at, 3):g} s" if hint is not None else f"{value:g} s was held"
                        return f"{came}, yet {most:g} s came through"
                    if value in self._survived and (hint is None or abs(hint - value) > slack):
                        return f"{value:g} s came through once, and was cut after {_when(hint)}"
        return self._disagreeing_repeat()

    def _disagreeing_repeat(self) -> str | None:
        for value, hints in self._cuts.items():
            first = hints[0]
            for hint in hints[1:]:
                if (hint is None) != (first is None) or (
                    hint is not None and first is not None and abs(hint - first) > self.slack_s
                ):
                    return f"{value:g} s was cut after {_when(first)}, then after {_when(hint)}"
        return None

    def _bounds(self) -> tuple[float, float]:
        low = self.longest_survived_s if self.longest_survived_s is not None else 0.0
        high = self.shortest_cut_s if self.shortest_cut_s is not None else self.max_s
        return low, high

    def next_values(self) -> list[float]:
        """The values to try together this round (rounded to the resolution's milliseconds); once the limit is
        bracketed, the two that bracket it again (the confirming round)."""
        if self.rounds == 0:
            return [self.max_s, self.min_s]
        if self.bracketed:
            self._confirming = True
            return [v for v in (self.longest_survived_s, self.shortest_cut_s) if v is not None]
        low, high = self._bounds()
        values: list[float] = []
        if self._hint_s is not None and low < self._hint_s < high:
            half = self.resolution_s / 2  # both sides of where the cut came: one survives, one is cut
            values += [max(self._hint_s - half, (low + self._hint_s) / 2), min(self._hint_s + half, high)]
        while len(values) < PER_ROUND:  # the rest evenly between the bounds
            step = (high - low) / (PER_ROUND + 1 - len(values))
            values.append(low + step * (PER_ROUND - len(values)))
        fresh = sorted({round(v, 3) for v in values if low < v < high} - self._tried)
        return fresh or [round((low + high) / 2, 3)]

    def record(self, value_s: float, survived: bool, hint_s: float | None = None) -> None:
        """One try's outcome; `hint_s`: for a cut, when it came (the limit is about there; None: held). The bounds
        never cross: a value on the far side of the other bound (at the limit, or a path no one limit explains:
        `inconsistent` says which) leaves them as they were."""
        self._tried.add(value_s)
        low, high = self.longest_survived_s, self.shortest_cut_s
        if survived:
            self._survived.add(value_s)
            if (low is None or value_s > low) and (high is None or value_s < high):
                self.longest_survived_s = value_s
            return
        self._cuts.setdefault(value_s, []).append(hint_s)
        if (high is None or value_s < high) and (low is None or value_s > low):
            self.shortest_cut_s = value_s
            if hint_s is not None:
                self._hint_s = hint_s

    def end_round(self) -> None:
        self.rounds += 1
        if self._confirming:
            self.confirmed = self.inconsistent is None


def _when(hint_s: float | None) -> str:
    return f"{round(hint_s, 3):g} s" if hint_s is not None else "no end (held)"
