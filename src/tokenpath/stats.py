"""Small order statistics used by every report (nearest-rank percentiles: each value is one that was measured)."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted sequence; p in [0, 100]. Empty → nan."""
    if not sorted_values:
        return float("nan")
    if p <= 0:
        return float(sorted_values[0])
    rank = -(-p * len(sorted_values) // 100)  # ceil without floats drifting
    return float(sorted_values[min(len(sorted_values), int(rank)) - 1])


def median(values: Sequence[float]) -> float:
    """The middle value (mean of the two middle values for an even count). Empty → nan."""
    if not values:
        return float("nan")
    s = sorted(values)
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
