"""Finding one limit by bisection, sans-IO: which silences (or totals) to try next, from what the earlier tries
showed. Each round tries several values at once (the caller waits for them together), and a cut's own timing
(it came N s into the silence) is a hint that brackets the limit in the next round: a survey then takes about two
limits' time, not one per halving.

    search = Bisection(min_s=1, max_s=600, resolution_s=1)
    while not search.done:
        values = search.next_values()
        search.record(value, survived, hint_s)  # for each value tried
    search.longest_survived_s, search.shortest_cut_s
"""

from __future__ import annotations

from dataclasses import dataclass, field

PER_ROUND = 3  # values tried at once in a round after the first
MAX_ROUNDS = 12  # a bound on the tries, whatever the path does (a path that cuts at random never converges)


@dataclass(slots=True)
class Bisection:
    min_s: float
    max_s: float
    resolution_s: float
    longest_survived_s: float | None = None  # the longest value that came through whole
    shortest_cut_s: float | None = None  # the shortest value that was cut
    rounds: int = 0
    _hint_s: float | None = None  # when the last cut came, counted as the value is (into the silence, or in all)
    _tried: set[float] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not 0 < self.min_s < self.max_s:
            raise ValueError(f"need 0 < min ({self.min_s}) < max ({self.max_s})")
        if self.resolution_s <= 0:
            raise ValueError(f"resolution must be positive, not {self.resolution_s}")

    @property
    def done(self) -> bool:
        if self.rounds >= MAX_ROUNDS:
            return True
        if self.rounds and self.shortest_cut_s is None:
            return True  # max came through: no limit up to max
        if self.rounds and self.longest_survived_s is None and self.shortest_cut_s == self.min_s:
            return True  # min was cut: the limit is below the bounds
        low, high = self._bounds()
        return high - low <= self.resolution_s

    def _bounds(self) -> tuple[float, float]:
        low = self.longest_survived_s if self.longest_survived_s is not None else 0.0
        high = self.shortest_cut_s if self.shortest_cut_s is not None else self.max_s
        return low, high

    def next_values(self) -> list[float]:
        """The values to try together this round (rounded to the resolution's milliseconds)."""
        if self.rounds == 0:
            return [self.max_s, self.min_s]
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
        """One try's outcome; `hint_s`: for a cut, when it came (the limit is about there)."""
        self._tried.add(value_s)
        if survived:
            if self.longest_survived_s is None or value_s > self.longest_survived_s:
                self.longest_survived_s = value_s
        elif self.shortest_cut_s is None or value_s < self.shortest_cut_s:
            self.shortest_cut_s = value_s
            if hint_s is not None:
                self._hint_s = hint_s

    def end_round(self) -> None:
        self.rounds += 1
