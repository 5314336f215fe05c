"""Two result sets side by side: the same rows matched by key, a ratio, and a verdict only where the difference is
larger than the spread each set measured. Overlapping ranges are "not distinguishable", however far apart the
medians look: a shared, noisy host makes that the honest answer. A difference no larger than the direct floor
(what the direct path could resolve in either run) is "same", whatever the ranges."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tokenpath.axes import Condition
from tokenpath.errors import UsageError
from tokenpath.results.model import (
    FLOOR_MARGIN_FPR,
    FLOOR_MARGIN_TTFT_MS,
    LoadResults,
    LoadRow,
    MatrixResults,
    MatrixRow,
    Results,
)
from tokenpath.stats import median

NOT_DISTINGUISHABLE = "not distinguishable"
Row = TypeVar("Row", MatrixRow, LoadRow)


@dataclass(frozen=True)
class Figure:
    median: float | None
    low: float | None  # the measured spread: min and max over runs
    high: float | None


SAME = "same (within the direct floor)"
NONE = Figure(None, None, None)  # the side of a row that one run does not have


@dataclass(frozen=True)
class Comparison:
    key: str
    metric: str
    a: Figure
    b: Figure
    floor: float | None = None  # the smallest difference the direct path could resolve in either run
    only: str | None = None  # "A" or "B": the row is in that run only (the other side's figure is empty)

    @property
    def ratio(self) -> float | None:
        if self.a.median is None or self.b.median is None or abs(self.a.median) < 0.05:
            return None  # a ratio against ~0 ms says nothing
        return self.b.median / self.a.median

    @property
    def verdict(self) -> str:
        if self.only is not None:
            return f"only in {self.only}"
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


def _matrix_key(row: MatrixRow) -> tuple[str, Condition]:
    """A row of one file is the row of the other with the same path in the same condition (its value)."""
    return row.path_label, row.condition


def _matrix_name(row: MatrixRow) -> str:
    return f"{row.path_label}: {row.condition.label}"


def _matrix_floor(metric: str, row: MatrixRow, results: MatrixResults) -> float | None:
    """The smallest difference the direct path resolved for this row's condition: its added-TTFT spread plus the
    row margin (as rows.py decides "within the floor"); for frames per read, the row margin."""
    if metric == "frames per read":
        return FLOOR_MARGIN_FPR
    floors = [f.ttft_spread_ms for f in results.floors if f.fpr and f.condition == row.condition]
    spread = floors[0] if floors else None
    return spread + FLOOR_MARGIN_TTFT_MS if spread is not None else None


def _load_floor(metric: str, row: LoadRow) -> float | None:
    """The direct path's p50-to-p99 spread at this row's level, plus the same margin."""
    floor = row.floor_ms
    if floor is None or floor.p50 is None or floor.p99 is None:
        return None
    return float(floor.p99 - floor.p50) + FLOOR_MARGIN_TTFT_MS


def _matrix_figures(row: MatrixRow) -> dict[str, Figure]:
    kept = [r for r in row.raw if r.included]
    added = [r.path_added_ttft_ms for r in kept if r.path_added_ttft_ms is not None]
    fprs = [r.metrics.frames_per_read for r in kept if r.metrics and r.metrics.frames_per_read is not None]
    return {
        "added TTFT ms": Figure(row.added_ttft_ms_median, *_span(added, floor=_floor_of(row, added))),
        "frames per read": Figure(row.fpr_median, *_span(fprs)),
    }


def _floor_of(row: MatrixRow, added: list[float]) -> float:
    """Raw runs hold the path's own added time; rows subtract the direct median. Shift the spread the same way."""
    if row.added_ttft_ms_median is None or not added:
        return 0.0
    return float(median(added) - row.added_ttft_ms_median)


def _span(values: list[float], floor: float = 0.0) -> tuple[float | None, float | None]:
    if len(values) < 2:
        return None, None
    return min(values) - floor, max(values) - floor


def _load_key(row: LoadRow) -> str:
    level = f"{row.level:g}/s" if row.open_loop else f"{row.level} streams"
    return f"{row.target} @ {level}"


def _load_figures(row: LoadRow) -> dict[str, Figure]:
    out = {}
    for p in ("p50", "p99"):
        per_run = [v for r in row.runs_added_ttft_ms if (v := getattr(r, p)) is not None]
        out[f"added TTFT {p} ms"] = Figure(getattr(row.added_ttft_ms, p), *_span(per_run))
    return out


def compare(a: Results, b: Results) -> list[Comparison]:
    if a.kind != b.kind and {a.kind, b.kind} != {"matrix", "sweep"}:
        raise UsageError(f"`compare`: cannot compare a {a.kind} result with a {b.kind} result")
    if isinstance(a, LoadResults) and isinstance(b, LoadResults):
        out = _compare_load(a, b)
    elif isinstance(a, MatrixResults) and isinstance(b, MatrixResults):
        out = _compare_matrix(a, b)
    else:
        out = []
    if all(c.only is not None for c in out):
        raise UsageError("`compare`: the two result sets share no row (same path, condition or level)")
    return out


def _compare_matrix(a: MatrixResults, b: MatrixResults) -> list[Comparison]:
    return _pair(
        a.rows,
        b.rows,
        _matrix_key,
        _matrix_name,
        _matrix_figures,
        lambda m, r: _matrix_floor(m, r, a),
        lambda m, r: _matrix_floor(m, r, b),
    )


def _compare_load(a: LoadResults, b: LoadResults) -> list[Comparison]:
    return _pair(a.levels, b.levels, _load_key, _load_key, _load_figures, _load_floor, _load_floor)


def _pair(
    rows_a: Sequence[Row],
    rows_b: Sequence[Row],
    key: Callable[[Row], Hashable],
    name: Callable[[Row], str],
    figures: Callable[[Row], dict[str, Figure]],
    floor_a: Callable[[str, Row], float | None],
    floor_b: Callable[[str, Row], float | None],
) -> list[Comparison]:
    """Rows matched by key (shown by name); per figure, the larger of the two floors is what a difference must beat.
    A row in one run only is shown as such; a key a run holds more than once is paired by its order, and said."""
    a: dict[tuple[Hashable, int], Row] = _numbered(rows_a, key)
    b: dict[tuple[Hashable, int], Row] = _numbered(rows_b, key)
    repeated = {k for k, n in (*a, *b) if n > 0}
    out = []
    for k, n in dict.fromkeys([*a, *b]):  # A's order, then the rows only B has
        row_a, row_b = a.get((k, n)), b.get((k, n))
        shown = name(row_a if row_a is not None else row_b)  # type: ignore[arg-type]
        shown += f" (repeated key: #{n + 1})" if k in repeated else ""
        if row_a is None or row_b is None:
            out += _one_side(shown, "A" if row_b is None else "B", figures(row_a if row_a is not None else row_b))  # type: ignore[arg-type]
            continue
        fb = figures(row_b)
        for metric, fa in figures(row_a).items():
            known = [f for f in (floor_a(metric, row_a), floor_b(metric, row_b)) if f is not None]
            out.append(Comparison(shown, metric, fa, fb[metric], max(known) if known else None))
    return out


def _numbered(rows: Sequence[Row], key: Callable[[Row], Hashable]) -> dict[tuple[Hashable, int], Row]:
    """Each row by its key and which occurrence of that key it is (0, 1, ...): a duplicate is kept, never the last
    of them standing for all."""
    seen: dict[Hashable, int] = {}
    out: dict[tuple[Hashable, int], Row] = {}
    for row in rows:
        k = key(row)
        seen[k] = seen.get(k, -1) + 1
        out[(k, seen[k])] = row
    return out


def _one_side(shown: str, side: str, figures: dict[str, Figure]) -> list[Comparison]:
    """A row only one run has: its figures on its side, none on the other."""
    return [
        Comparison(shown, metric, fig if side == "A" else NONE, NONE if side == "A" else fig, only=side)
        for metric, fig in figures.items()
    ]
