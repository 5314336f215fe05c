"""Two result sets side by side: the same rows matched by key, a ratio, and a verdict only where the difference is
larger than the spread each set measured. Overlapping ranges are "not distinguishable", however far apart the
medians look: a shared, noisy host makes that the honest answer. A difference no larger than the direct floor
(what the direct path could resolve in either run) is "same", whatever the ranges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenpath.errors import UsageError
from tokenpath.experiment.rows import FLOOR_MARGIN_FPR, FLOOR_MARGIN_TTFT_MS
from tokenpath.results.tables import condition_label
from tokenpath.stats import median

NOT_DISTINGUISHABLE = "not distinguishable"


@dataclass(frozen=True)
class Figure:
    median: float | None
    low: float | None  # the measured spread: min and max over runs
    high: float | None


SAME = "same (within the direct floor)"


@dataclass(frozen=True)
class Comparison:
    key: str
    metric: str
    a: Figure
    b: Figure
    floor: float | None = None  # the smallest difference the direct path could resolve in either run

    @property
    def ratio(self) -> float | None:
        if self.a.median is None or self.b.median is None or abs(self.a.median) < 0.05:
            return None  # a ratio against ~0 ms says nothing
        return self.b.median / self.a.median

    @property
    def verdict(self) -> str:
        a, b = self.a, self.b
        floor, ma, mb = self.floor, a.median, b.median
        if floor is not None and ma is not None and mb is not None and abs(mb - ma) <= floor:
            return SAME  # e.g. 0.06 vs -0.05 ms: both inside the noise the direct path measured
        if None in (a.low, a.high, b.low, b.high):
            return f"{NOT_DISTINGUISHABLE} (no spread measured)"
        assert a.low is not None
        assert a.high is not None
        assert b.low is not None
        assert b.high is not None
        if b.low > a.high:
            return "B higher"
        if b.high < a.low:
            return "B lower"
        return NOT_DISTINGUISHABLE


def _matrix_key(row: dict[str, Any]) -> str:
    path = row["proxy"] if row["variant"] == "stock" else f"{row['proxy']} ({row['variant']})"
    return f"{path}: {condition_label(row)}"


def _matrix_floor(metric: str, row: dict[str, Any], doc: dict[str, Any]) -> float | None:
    """The smallest difference the direct path resolved for this row's condition: its added-TTFT spread plus the
    row margin (as rows.py decides "within the floor"); for frames per read, the row margin."""
    if metric == "frames per read":
        return FLOOR_MARGIN_FPR
    label = condition_label(row)
    floors = [f["ttft_spread_ms"] for f in doc.get("floors", []) if f.get("fpr") and f["condition"] == label]
    return floors[0] + FLOOR_MARGIN_TTFT_MS if floors else None


def _load_floor(metric: str, row: dict[str, Any], doc: dict[str, Any]) -> float | None:
    """The direct path's p50-to-p99 spread at this row's level, plus the same margin."""
    floor = row.get("floor_ms") or {}
    if floor.get("p50") is None or floor.get("p99") is None:
        return None
    return float(floor["p99"] - floor["p50"]) + FLOOR_MARGIN_TTFT_MS


def _matrix_figures(row: dict[str, Any]) -> dict[str, Figure]:
    kept = [r for r in row.get("raw", []) if r.get("included")]
    added = [r["path_added_ttft_ms"] for r in kept if r.get("path_added_ttft_ms") is not None]
    fprs = [r["metrics"]["frames_per_read"] for r in kept if r.get("metrics")]
    return {
        "added TTFT ms": Figure(row.get("added_ttft_ms_median"), *_span(added, floor=_floor_of(row, added))),
        "frames per read": Figure(row.get("fpr_median"), *_span(fprs)),
    }


def _floor_of(row: dict[str, Any], added: list[float]) -> float:
    """Raw runs hold the path's own added time; rows subtract the direct median. Shift the spread the same way."""
    if row.get("added_ttft_ms_median") is None or not added:
        return 0.0
    return float(median(added) - row["added_ttft_ms_median"])


def _span(values: list[float], floor: float = 0.0) -> tuple[float | None, float | None]:
    if len(values) < 2:
        return None, None
    return min(values) - floor, max(values) - floor


def _load_key(row: dict[str, Any]) -> str:
    level = f"{row['rate']:g}/s" if row.get("rate") is not None else f"{row['concurrency']} streams"
    return f"{row['target']} @ {level}"


def _load_figures(row: dict[str, Any]) -> dict[str, Figure]:
    runs = row.get("runs_added_ttft_ms") or []
    out = {}
    for p in ("p50", "p99"):
        per_run = [r[p] for r in runs if r.get(p) is not None]
        out[f"added TTFT {p} ms"] = Figure(row["added_ttft_ms"][p], *_span(per_run))
    return out


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[Comparison]:
    if a["kind"] != b["kind"] and {a["kind"], b["kind"]} != {"matrix", "sweep"}:
        raise UsageError(f"--compare: cannot compare a {a['kind']} result with a {b['kind']} result")
    if a["kind"] == "load":
        rows_a, rows_b, key, figures, floor_of = a["levels"], b["levels"], _load_key, _load_figures, _load_floor
    else:
        rows_a, rows_b, key, figures, floor_of = a["rows"], b["rows"], _matrix_key, _matrix_figures, _matrix_floor
    other = {key(r): r for r in rows_b}
    out = []
    for row in rows_a:
        match = other.get(key(row))
        if match is None:
            continue
        fb = figures(match)
        for metric, fa in figures(row).items():
            known = [f for f in (floor_of(metric, row, a), floor_of(metric, match, b)) if f is not None]
            out.append(Comparison(key(row), metric, fa, fb[metric], max(known) if known else None))
    if not out:
        raise UsageError("--compare: the two result sets share no row (same path, condition or level)")
    return out
