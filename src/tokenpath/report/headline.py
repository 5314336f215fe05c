"""The report's answer, before anything else on the page: a headline sentence (how many paths hold the stream, the
worst, the line that fixed it in the same run), the added-TTFT figures per path for its chart, and the verdict
table. Pure: a MatrixResults in, text and figures out.

A path holds the stream where some condition's row is not within the direct floor (experiment/rows.py's rule). Its
fix is what this run measured: another variant of the same proxy whose row in that condition streams, with the
config line that makes it (proxies/ Variant.line, kept in results.json)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokenpath.report import tables
from tokenpath.results.model import FLOOR_MARGIN_TTFT_MS, FloorEntry, MatrixResults, MatrixRow
from tokenpath.stats import median, percentile

# The README's "Words" section: every column of the verdict table is a word defined there.
WORDS = "the README's “Words” section"


@dataclass(frozen=True, slots=True)
class PathFigures:
    name: str  # the path, and its condition when the run has several
    row: MatrixRow
    added_ms: tuple[float, ...]  # each kept run's added TTFT, less the direct floor's

    @property
    def holds(self) -> bool:
        return self.row.proxy != "direct" and self.row.within_floor is False


def path_figures(doc: MatrixResults) -> list[PathFigures]:
    """Every measured row but direct's, named by path (and condition when there are several)."""
    floors = {f.condition: f for f in doc.floors}
    several = len({r.condition for r in doc.rows}) > 1
    out = []
    for row in tables.side_by_side(doc.rows):
        if row.proxy == "direct" or row.fpr_median is None:
            continue
        floor = floors.get(row.condition)
        base = floor.added_ttft_ms if floor is not None and floor.added_ttft_ms is not None else 0.0
        added = tuple(r.path_added_ttft_ms - base for r in row.raw if r.included and r.path_added_ttft_ms is not None)
        name = f"{row.path_label} · {row.condition.label}" if several else row.path_label
        out.append(PathFigures(name, row, added))
    return out


def floor_noise_ms(doc: MatrixResults) -> float | None:
    """The widest direct floor's noise: added TTFT below it is not the path's."""
    noises = [noise(f) for f in doc.floors if f.ttft_spread_ms is not None]
    return max(noises) if noises else None


def noise(floor: FloorEntry) -> float:
    return (floor.ttft_spread_ms or 0.0) + FLOOR_MARGIN_TTFT_MS


def fix_for(doc: MatrixResults, row: MatrixRow) -> str | None:
    """The config line of another variant of the same proxy that streamed in the same condition, in this run."""
    info = doc.proxies.get(row.proxy)
    for other in doc.rows:
        if other.proxy != row.proxy or other.variant == row.variant or other.condition != row.condition:
            continue
        if other.within_floor and info is not None:
            line = info.variants.get(other.variant, {}).get("line")
            if line:
                return str(line)
    return None


def headline(doc: MatrixResults) -> str:
    """One sentence: how many paths hold the stream, the worst (by median added TTFT) and its fix."""
    figures = path_figures(doc)
    paths = {f.row.path_label for f in figures}
    held = [f for f in figures if f.holds]
    held_paths = {f.row.path_label for f in held}
    if not figures:
        return "No path was measured."
    if not held:
        return f"All {len(paths)} paths stream: every one within the direct floor."
    worst = max(held, key=lambda f: f.row.added_ttft_ms_median or 0.0)
    added = worst.row.added_ttft_ms_median
    how = f"+{added:.0f} ms" if added is not None else tables.seen_as(worst.row)
    sentence = f"{len(held_paths)} of {len(paths)} paths hold the stream; worst {how}: {worst.name}"
    line = fix_for(doc, worst.row)
    return f"{sentence}; fix: {line}" if line else f"{sentence} ({tables.seen_as(worst.row)})."


def _ttft(f: PathFigures) -> str:
    added = sorted(f.added_ms)
    return f"{median(added):.0f} / {percentile(added, 99):.0f}" if added else "-"


@dataclass(frozen=True, slots=True)
class VerdictColumn:
    header: str
    meaning: str  # the line under the table that says what the header means
    cell: Callable[[PathFigures], str]


# Its meaning as on the stub; against a real origin the page says what was computed instead (meaning()).
TTFT_COLUMN = VerdictColumn(
    "+TTFT p50 / p99 ms",
    "added TTFT: the first token's arrival - the stub's write of it, less the direct path's, over the kept runs",
    _ttft,
)
# Each column's header, meaning and cell declared together: a header never sits over another column's cells.
VERDICT_COLUMNS: tuple[VerdictColumn, ...] = (
    VerdictColumn("path", "the proxy (and its variant), and the condition when there are several", lambda f: f.name),
    VerdictColumn("verdict", "what the path did to the stream, in plain words", lambda f: f.row.verdict),
    VerdictColumn(
        "seen as",
        "the runs' shape: streams, buffers all, bursts of N, holds the first N bytes, late",
        lambda f: tables.seen_as(f.row),
    ),
    TTFT_COLUMN,
    VerdictColumn(
        "fpr",
        "frames per read: 1.00 is every frame on its own; higher is bursts",
        lambda f: "-" if f.row.fpr_median is None else f"{f.row.fpr_median:.2f}",
    ),
    VerdictColumn(
        "kept", "runs kept under the declared exclusion rule / runs measured", lambda f: f"{f.row.kept}/{f.row.runs}"
    ),
)


def meaning(column: VerdictColumn, doc: MatrixResults) -> str:
    """The line under the verdict table for `column`: the +TTFT column's as its rows' added TTFT was computed (a
    real origin keeps no write log: the direct streams measured beside the path's stand in)."""
    if column is not TTFT_COLUMN or tables.added_ttft_words(doc) == tables.ADDED_TTFT_WORDS["stub"]:
        return column.meaning
    return f"added TTFT: {tables.added_ttft_words(doc)}, over the kept runs"


def worst_first(figures: Sequence[PathFigures]) -> list[PathFigures]:
    """The verdict table's order: the paths that hold first, the worst (median added TTFT) first."""
    return sorted(figures, key=lambda f: (not f.holds, -(f.row.added_ttft_ms_median or 0.0)))


def verdict_rows(figures: Sequence[PathFigures]) -> list[list[str]]:
    """The verdict table's cells, in worst_first order."""
    return [[c.cell(f) for c in VERDICT_COLUMNS] for f in worst_first(figures)]
