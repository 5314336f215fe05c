"""Measuring a path against an origin that keeps no audit log (issue 37 §2): paired runs, pure.

A round against a real origin interleaves the direct path with every path, each path between two direct streams of
its own (direct, path 1, direct, path 2, direct, ...), the same prompt, fixed seed and sampling, so every stream
carries the same tokens. A path's run is then compared with the mean of the two direct streams around it: what the
path added to the first token and to the gaps between arrivals, with the origin's drift across the round removed
(it moves both sides of the pair alike). The two directs around a run are also its check: when they disagree beyond
PAIR_BOUND the origin's own pace moved while the path was measured (a CPU-bound model on a busy machine does), and
the run is excluded, counted, never re-run. The origin's own jitter is the spread of the direct streams, reported
apart from what the paths add; each added figure carries a distribution-free interval for its median.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tokenpath.probe.metrics import RunMetrics
from tokenpath.report import tables
from tokenpath.results.model import Paired
from tokenpath.stats import median

PAIR_BOUND_MS = 25.0  # the two directs around a run may differ by this much, or PAIR_BOUND_SHARE of their mean
PAIR_BOUND_SHARE = 0.25
CONFIDENCE = 0.95  # the intervals' aim; with few runs the widest one (min to max) and its own level are stated
RULE = (
    f"against a real origin a path's run is excluded when the two direct streams around it disagree on TTFT by more "
    f"than max({PAIR_BOUND_MS:g} ms, {100 * PAIR_BOUND_SHARE:g} % of their mean) (the origin's own pace moved), or "
    "carry another number of frames than it (the sampling did not repeat); excluded runs are counted, never re-run"
)
UNSTABLE = "origin unstable"  # an exclusion reason's first word(s): the rows count exclusions by it
UNPAIRED = "no direct pair"
OTHER_TOKENS = "token count differs"


@dataclass(frozen=True, slots=True)
class Pairing:
    """One path run against the direct streams around it."""

    added_ttft_ms: float | None = None  # its TTFT - the mean of theirs
    added_gap_ms: float | None = None  # its median gap between arrivals - the mean of theirs
    added_max_gap_ms: float | None = None  # its longest gap - the mean of theirs
    excluded_because: str | None = None


def pair_bound_ms(reference_ms: float) -> float:
    return max(PAIR_BOUND_MS, PAIR_BOUND_SHARE * reference_ms)


def pair(path: RunMetrics, before: RunMetrics | None, after: RunMetrics | None) -> Pairing:
    """`path`'s run between the direct runs `before` and `after` (None: that stream failed)."""
    directs = [d for d in (before, after) if d is not None and d.ttft_ms is not None]
    if len(directs) < 2:
        return Pairing(excluded_because=f"{UNPAIRED}: a direct stream around this run failed")
    first, second = (d.ttft_ms for d in directs)
    assert first is not None
    assert second is not None
    reference = (first + second) / 2
    if abs(first - second) > pair_bound_ms(reference):
        bound = pair_bound_ms(reference)
        return Pairing(
            excluded_because=f"{UNSTABLE}: the directs around it took {first:.0f} and {second:.0f} ms to the first "
            f"token (more than {bound:.0f} ms apart)"
        )
    counts = {d.frames for d in directs}
    if len(counts) > 1 or path.frames not in counts:
        seen = "/".join(str(d.frames) for d in directs)
        return Pairing(excluded_because=f"{OTHER_TOKENS}: {path.frames} frames, the directs around it {seen}")
    ttft = None if path.ttft_ms is None else path.ttft_ms - reference
    return Pairing(ttft, _added(path, directs, "p50"), _added(path, directs, "max"))


def _added(path: RunMetrics, directs: list[RunMetrics], key: str) -> float | None:
    theirs = [d.gaps_ms[key] for d in directs if key in d.gaps_ms]
    if key not in path.gaps_ms or len(theirs) != len(directs):
        return None
    return path.gaps_ms[key] - sum(theirs) / len(theirs)


@dataclass(frozen=True, slots=True)
class Interval:
    """Where the median lies: between two of the sorted values, at `confidence` (the binomial's, exact)."""

    low: float
    high: float
    confidence: float

    def describe(self) -> str:
        return f"[{self.low:.1f}, {self.high:.1f}] ({100 * self.confidence:.0f} %)"


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The distribution-free interval for a median (order statistics: the k-th lowest to the k-th highest value,
    with P(Binomial(n, 1/2) < k) on each side): no assumption about the origin's jitter. With too few values to reach
    `confidence`, min to max at the level they give (3 runs: 75 %)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None
    k, level = 1, _coverage(n, 1)
    while k + 1 <= (n + 1) // 2 and _coverage(n, k + 1) >= confidence:
        k += 1
        level = _coverage(n, k)
    return Interval(xs[k - 1], xs[n - k], level)


def _coverage(n: int, k: int) -> float:
    """P(x(k) <= median <= x(n-k+1)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1)."""
    tail = sum(math.comb(n, i) for i in range(k)) / (1 << n)
    return 1 - 2 * tail


def origin_jitter(directs: Sequence[RunMetrics]) -> dict[str, float]:
    """The origin's own figures over the direct streams: its TTFT (median and range) and its median gap between
    arrivals (median and range). What a path adds is read against these, never mixed into them."""
    ttfts = sorted(d.ttft_ms for d in directs if d.ttft_ms is not None)
    gaps = sorted(d.gaps_ms["p50"] for d in directs if "p50" in d.gaps_ms)
    out: dict[str, float] = {}
    if ttfts:
        out.update(origin_ttft_ms=median(ttfts), origin_ttft_ms_low=ttfts[0], origin_ttft_ms_high=ttfts[-1])
    if gaps:
        out.update(origin_gap_ms=median(gaps), origin_gap_ms_low=gaps[0], origin_gap_ms_high=gaps[-1])
    return out


def path_figures(pairings: Sequence[Pairing]) -> dict[str, float]:
    """A path's row over its kept pairs: the median added TTFT and gaps, with the interval of the TTFT's."""
    kept = [p for p in pairings if p.excluded_because is None]
    ttfts = [p.added_ttft_ms for p in kept if p.added_ttft_ms is not None]
    gaps = [p.added_gap_ms for p in kept if p.added_gap_ms is not None]
    longest = [p.added_max_gap_ms for p in kept if p.added_max_gap_ms is not None]
    out: dict[str, float] = {"pairs": float(len(kept))}
    interval = median_interval(ttfts)
    if interval is not None:
        out.update(
            added_ttft_ms=median(ttfts),
            added_ttft_ms_low=interval.low,
            added_ttft_ms_high=interval.high,
            confidence=interval.confidence,
        )
    if gaps:
        out["added_gap_ms"] = median(gaps)
    if longest:
        out["added_max_gap_ms"] = median(longest)
    return out


def bracketed(paths: Sequence[str]) -> list[str]:
    """A round's order: the direct path around every other one (direct, p1, direct, p2, ..., direct)."""
    others = [p for p in paths if p != "direct"]
    order = ["direct"]
    for label in others:
        order += [label, "direct"]
    return order


def streams_per_condition(paths: Sequence[str], runs: int, paired: bool) -> int:
    """The streams `runs` rounds of these paths make: one per path a round, or, paired, as bracketed orders them."""
    return runs * (len(bracketed(paths)) if paired else len(paths))


def paired(directs: Sequence[RunMetrics], pairings: Sequence[Pairing]) -> Paired:
    """A path's paired runs in one condition as the results hold them (MatrixRow.pairing): its kept and excluded
    pairs (by reason: the exclusion's first words), what it added over the kept ones, and the origin's own pace
    over the condition's direct streams beside it."""
    figures = path_figures(pairings)
    kept = int(figures.pop("pairs"))
    reasons = Counter(p.excluded_because.split(":")[0] for p in pairings if p.excluded_because is not None)
    own = origin_jitter(directs)
    return Paired(kept, len(pairings) - kept, dict(reasons), directs=len(directs), **figures, **own)


def summary(directs: Sequence[RunMetrics], pairings: dict[str, list[Pairing]]) -> list[str]:
    """The lines a condition against a real origin ends with: the origin's own pace over its direct streams, then
    what each path added over its kept pairs, with the median's interval (apart: the origin's jitter is never read as
    a path's). The report says the same of the stored rows (report/tables.py)."""
    own = paired(directs, [])
    lines = [tables.describe_origin_pace(own)] if own.origin_ttft_ms is not None else []
    return lines + [tables.describe_pairing(label, paired(directs, pairs)) for label, pairs in pairings.items()]
