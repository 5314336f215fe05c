"""The report's charts: matplotlib figures rendered to inline SVG text, one function per chart.

Every function takes parts of a results document and returns SVG markup (or None when there is nothing to draw).
Text stays text in the SVG (`svg.fonttype = none`): the page stays small, searchable, and needs no font files.
matplotlib is imported when a chart is drawn, not with this module (a table or CSV alone needs none of its ~0.7 s), and
only its object API is used (a bare Figure, saved by the SVG backend): pyplot's import and global figure state bought
nothing. The style is set per chart (rc_context), never on matplotlib's global rcParams."""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec

from tokenpath.results.model import FloorEntry, Inferred, LoadRow, MatrixRow, MatrixRun, Percentiles, SweepPoint
from tokenpath.stats import median, percentile

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "tokenpath",  # stable ids: the same results give the same page
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 100,
}

P = ParamSpec("P")


def styled(chart: Callable[P, str | None]) -> Callable[P, str | None]:
    """Draws `chart` under STYLE: matplotlib reads rcParams when an artist is made and again when the SVG is written,
    so the whole chart runs inside the context."""

    @functools.wraps(chart)
    def draw(*args: P.args, **kwargs: P.kwargs) -> str | None:
        import matplotlib

        with matplotlib.rc_context(STYLE):
            return chart(*args, **kwargs)

    return draw


def new_figure(figsize: tuple[float, float]) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


DIRECT_COLOUR = "#9a9a9a"
PATH_COLOUR = "#d1495b"
FLOOR_BAND = "#cfe8d5"
LOG_TICKS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
PALETTE = ("#00798c", "#d1495b", "#edae49", "#66a182", "#2e4057", "#8d96a3", "#7b4b94", "#c06c00")


def to_svg(fig: Figure) -> str:
    buf = io.StringIO()
    # no timestamp (dc:date): the same results give the same bytes
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: the SVG goes inline in HTML


def literal(text: str) -> str:
    """Free text (a proxy's or a target's name) as matplotlib shows it: a `$` is a dollar, never the start of
    mathtext (which would render `cost$1$` as math and fail on `gw$$`)."""
    return text.replace("$", r"\$")


def label(row: MatrixRow) -> str:
    return literal(row.path_label)


def representative_run(row: MatrixRow) -> MatrixRun | None:
    """The kept run with the median added TTFT: what a typical stream through this path looked like."""
    runs = [r for r in row.raw if r.included and r.arrivals]
    if not runs:
        runs = [r for r in row.raw if r.arrivals]
    if not runs:
        return None
    runs.sort(key=lambda r: r.path_added_ttft_ms or 0.0)
    middle: MatrixRun = runs[len(runs) // 2]
    return middle


def frame_points(run: MatrixRun, interval_ms: float) -> tuple[list[float], list[float]]:
    """(stub write, client arrival) per frame, both in ms after the stub's first write. Arrivals are per read, so
    a burst of five frames is five points at one arrival time."""
    arrival = [t for t, frames in run.arrivals for _ in range(frames)]
    writes = list(run.writes_ms) or [k * interval_ms for k in range(len(arrival))]  # older runs: the schedule
    n = min(len(arrival), len(writes))
    return list(writes[:n]), arrival[:n]


@styled
def arrival_timeline(rows: Sequence[MatrixRow]) -> str | None:
    """One panel per path of one condition: frame k's write (x) against its arrival (y). A path that streams sits
    on the diagonal beside the direct path (grey); a burst is a vertical run of points; buffering is a flat line."""
    direct = next((r for r in rows if r.proxy == "direct"), None)
    others = [r for r in rows if r.proxy != "direct"] or ([direct] if direct else [])
    if not others:
        return None
    direct_run = representative_run(direct) if direct else None
    ncols = min(4, len(others))
    nrows = math.ceil(len(others) / ncols)
    fig = new_figure((3.0 * ncols, 2.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(others) :]:
        ax.set_visible(False)
    for ax, row in zip(axes.flat, others, strict=False):
        _timeline_panel(ax, row, direct_run)
    fig.tight_layout()
    fig.suptitle("Arrival timeline: each frame's stub write (x) against its client arrival (y)", fontsize=9, y=1.02)
    return to_svg(fig)


def _timeline_panel(ax: Axes, row: MatrixRow, direct_run: MatrixRun | None) -> None:
    interval = row.condition.interval_ms
    top = 0.0
    if direct_run is not None and row.proxy != "direct":
        x, y = frame_points(direct_run, interval)
        ax.plot(x, y, "o", ms=3, color=DIRECT_COLOUR, label="direct", zorder=2)
        top = max([top, *x, *y])
    run = representative_run(row)
    if run is not None:
        x, y = frame_points(run, interval)
        colour = DIRECT_COLOUR if row.proxy == "direct" else PATH_COLOUR
        ax.plot(x, y, "o", ms=3, color=colour, label=label(row), zorder=3)
        top = max([top, *x, *y])
    else:
        ax.text(0.5, 0.5, "no run kept", transform=ax.transAxes, ha="center")
    ax.plot([0, top], [0, top], ls=":", lw=0.8, color="#444444", zorder=1)  # arrival = write: nothing added
    fpr = row.fpr_median
    added = row.added_ttft_ms_median
    first = "first token n/a" if added is None else f"{added:+.1f} ms first token"  # unknown is not +0.0
    figures = "" if fpr is None else f"\nfpr {fpr:.2f}, {first}"
    ax.set_title(f"{label(row)}{figures}")
    ax.set_xlabel("stub write (ms)")
    ax.set_ylabel("client arrival (ms)")
    if ax.get_legend_handles_labels()[0]:  # a panel with no run plotted has nothing to name
        ax.legend(loc="lower right", fontsize=7, frameon=False)  # below the diagonal: never where a held frame lands


@styled
def frames_per_read(rows: Sequence[MatrixRow], floor: FloorEntry | None) -> str | None:
    """Median frames per read per path, min-max as the whisker; the direct path's range as a green band."""
    measured = [r for r in rows if r.fpr_median is not None]
    if not measured:
        return None
    fig = new_figure((6.5, 0.35 * len(measured) + 1.0))
    ax = fig.subplots()
    names = [label(r) for r in measured]
    medians = [r.fpr_median or 0.0 for r in measured]
    # A whisker reaches from the run's min to its max; one the file puts on the wrong side of the median is none.
    lo = [max(0.0, m - (r.fpr_min or m)) for r, m in zip(measured, medians, strict=True)]
    hi = [max(0.0, (r.fpr_max or m) - m) for r, m in zip(measured, medians, strict=True)]
    direct = next((r for r in measured if r.proxy == "direct"), None)
    if direct is not None:
        band_hi = max(direct.fpr_max or 1.0, (floor.fpr if floor else None) or 1.0)
        ax.axvspan(0.9, band_hi * 1.05, color=FLOOR_BAND, label="direct noise floor", zorder=0)
    colours = [DIRECT_COLOUR if r.proxy == "direct" else PALETTE[0] for r in measured]
    ax.barh(names, medians, xerr=[lo, hi], color=colours, zorder=2, capsize=2)
    ax.invert_yaxis()
    if max(medians) > 8:
        ax.set_xscale("log")
        top = max(m + h for m, h in zip(medians, hi, strict=True))
        ticks = [t for t in LOG_TICKS if t <= top * 1.5]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])  # 1 2 5 10 20 50: not only 10^0 and 10^1
        ax.minorticks_off()
    ax.set_xlabel("frames per read (1 = every frame on its own; higher = bursts)")
    ax.set_title("Frames per read")
    if direct is not None:  # outside the axes: a legend inside sat on a bar
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    fig.tight_layout()
    return to_svg(fig)


def _cdf(encoded: str) -> tuple[list[float], list[float]]:
    """Each recorded value (ms, the top of its bucket) against the share of streams at or below it: the points of
    hdrh's recorded iterator, read straight off the counts (the iterator steps through every empty bucket too, in
    Python: a tenth of a second per histogram)."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram.decode(encoded)
    total = hist.get_total_count()
    stored = min(hist.counts_len, hist.encoder.payload.counts_len)  # a decoded array may stop early: the rest is 0
    xs, ys, below = [], [], 0
    for index, count in enumerate(hist.counts[:stored]):
        if count:
            below += count
            xs.append(hist.get_highest_equivalent_value(hist.get_value_from_index(index)) / 1000)
            ys.append(below / total)
    return xs, ys


def level_of(row: LoadRow) -> float:
    return float(row.level or 0)


@styled
def added_ttft_cdf(levels: Sequence[LoadRow], unit: str) -> str | None:
    """Per level, the distribution of added TTFT per target (log x): tails show as lines that bend late."""
    by_level: dict[float, list[LoadRow]] = {}
    for row in levels:
        if row.histogram_corrected or row.histogram:
            by_level.setdefault(level_of(row), []).append(row)
    if not by_level:
        return None
    colours = _target_colours(levels)
    ncols = min(3, len(by_level))
    nrows = math.ceil(len(by_level) / ncols)
    fig = new_figure((3.6 * ncols, 2.8 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(by_level) :]:
        ax.set_visible(False)
    for ax, (level, rows) in zip(axes.flat, sorted(by_level.items()), strict=False):
        for row in rows:
            x, y = _cdf(row.histogram_corrected or row.histogram or "")
            style = "--" if row.unreliable else "-"
            name = literal(row.target) + (" (unreliable)" if row.unreliable else "")
            ax.step(x, y, where="post", ls=style, color=colours[row.target], label=name)
        ax.set_xscale("log")
        ax.set_ylim(0, 1.01)
        ax.set_title(f"{level:g} {unit}")
        ax.set_xlabel("added TTFT (ms, log)")
        ax.set_ylabel("fraction of streams")
        ax.legend(fontsize=6, frameon=False, loc="lower right")
    fig.tight_layout()
    fig.suptitle("Added TTFT, cumulative distribution per target", fontsize=9, y=1.03)
    return to_svg(fig)


def _target_colours(levels: Sequence[LoadRow]) -> dict[str, str]:
    names = list(dict.fromkeys(r.target for r in levels))
    return {n: DIRECT_COLOUR if n == "direct" else PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _by_target(levels: Sequence[LoadRow]) -> dict[str, list[LoadRow]]:
    out: dict[str, list[LoadRow]] = {}
    for row in sorted(levels, key=level_of):
        out.setdefault(row.target, []).append(row)
    return out


@styled
def percentiles_vs_level(levels: Sequence[LoadRow], unit: str) -> str | None:
    """The first article's table as a plot: p50, p99, p99.9 of added TTFT against concurrency, per target.
    Hollow markers are levels flagged unreliable (their warnings are in the table)."""
    if not levels:
        return None
    colours = _target_colours(levels)
    fig = new_figure((10.5, 3.0))
    axes = fig.subplots(1, 3, sharey=True)
    for ax, (key, name) in zip(axes, (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")), strict=True):
        for target, rows in _by_target(levels).items():
            pts = [(level_of(r), max(v, 0.01), r.unreliable) for r in rows if (v := getattr(_main(r), key)) is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=colours[target], label=literal(target))
            for x, y, bad in pts:
                ax.plot([x], [y], "o", ms=5, color=colours[target], mfc="white" if bad else colours[target])
        ax.set_yscale("log")
        ax.set_title(f"{name} added TTFT")
        _level_axis(ax, levels, unit)
    axes[0].set_ylabel("ms (log)")
    axes[0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return to_svg(fig)


def _level_axis(ax: Axes, levels: Sequence[LoadRow], unit: str) -> None:
    xs = sorted({level_of(r) for r in levels})
    if xs and xs[-1] / max(xs[0], 1e-9) > 20:
        ax.set_xscale("log")
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(unit)


def _main(row: LoadRow) -> Percentiles:
    figures: Percentiles = row.added_ttft_corrected_ms or row.added_ttft_ms
    return figures


@styled
def resources_vs_level(levels: Sequence[LoadRow], unit: str) -> str | None:
    """CPU (cores) and RSS (MB) of each target's processes against concurrency. The direct path has none."""
    measured = [r for r in levels if r.cpu_cores is not None]
    if not measured:
        return None
    colours = _target_colours(levels)
    fig = new_figure((8.5, 2.8))
    cpu, rss = fig.subplots(1, 2)
    for target, rows in _by_target(measured).items():
        xs = [level_of(r) for r in rows]
        cpu.plot(xs, [r.cpu_cores or 0 for r in rows], "o-", color=colours[target], label=literal(target))
        rss.plot(xs, [r.rss_mb or 0 for r in rows], "o-", color=colours[target], label=literal(target))
    cpu.set_title("proxy CPU (cores)")
    rss.set_title("proxy RSS (MB)")
    for ax in (cpu, rss):
        _level_axis(ax, measured, unit)
        ax.set_ylim(bottom=0)
    cpu.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return to_svg(fig)


@styled
def sweep_chart(points: Sequence[SweepPoint], inferred: Inferred | None) -> str | None:
    """fpr and added TTFT against frame size, one line per interval; the inferred size threshold as a vertical
    line, the inferred timer as a horizontal one."""
    if not points:
        return None
    fig = new_figure((9.5, 3.0))
    fpr_ax, ttft_ax = fig.subplots(1, 2)
    intervals = sorted({p.interval_ms for p in points})
    for i, interval in enumerate(intervals):
        pts = sorted((p for p in points if p.interval_ms == interval), key=lambda p: p.frame_bytes)
        xs = [p.frame_bytes for p in pts]
        colour = PALETTE[i % len(PALETTE)]
        fpr_ax.plot(xs, [p.fpr_median or 0 for p in pts], "o-", color=colour, label=f"every {interval:g} ms")
        ttft_ax.plot(xs, [p.added_ttft_ms_median or 0 for p in pts], "o-", color=colour, label=f"{interval:g} ms")
    size = inferred.size_bytes if inferred else None  # the upper bound of the threshold the points allow
    span = inferred.size_range if inferred else None
    said = f" flushes at {span[0]}-{span[1]} B" if span and span[0] != span[1] else f" flushes at ~{size} B"
    for ax in (fpr_ax, ttft_ax):
        if size:
            ax.axvline(size, ls="--", color="#444444", lw=1)
            ax.text(size, ax.get_ylim()[1], said, va="top", fontsize=7)
        ax.set_xlabel("frame size (bytes)")
    if inferred is not None and inferred.timer_ms:
        ttft_ax.axhline(inferred.timer_ms, ls=":", color="#444444", lw=1)
        ttft_ax.text(
            0,
            inferred.timer_ms,
            f"timer ~{inferred.timer_ms:g} ms",
            va="bottom",
            fontsize=7,
            transform=ttft_ax.get_yaxis_transform(),
        )
    fpr_ax.set_ylabel("frames per read")
    ttft_ax.set_ylabel("added TTFT (ms)")
    fpr_ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    fig.suptitle("What makes the proxy flush: frames per read and added TTFT against frame size", fontsize=9, y=1.03)
    return to_svg(fig)


ADDED_P50 = "#2e6fba"  # used by no other chart: the page's screenshot test finds the chart by it
ADDED_P99 = "#a9c6ea"


@styled
def added_ttft(paths: Sequence[tuple[str, Sequence[float]]], floor_ms: float | None) -> str | None:
    """The report's answer as a picture: per path (name, each kept run's added TTFT in ms), p50 and p99 as bars,
    the direct path's noise as a band from 0 to `floor_ms`. The legend sits outside the axes, clear of every bar."""
    measured = [(name, sorted(values)) for name, values in paths if values]
    if not measured:
        return None
    fig = new_figure((7.5, 0.3 * len(measured) + 1.1))
    ax = fig.subplots()
    ys = list(range(len(measured)))
    p50 = [median(v) for _, v in measured]
    p99 = [percentile(v, 99) for _, v in measured]
    if floor_ms is not None:
        ax.axvspan(0, floor_ms, color=FLOOR_BAND, label="direct floor (noise)", zorder=0)
    ax.barh(ys, p99, color=ADDED_P99, height=0.7, label="p99", zorder=2)
    ax.barh(ys, p50, color=ADDED_P50, height=0.7, label="p50", zorder=3)
    for y, value in zip(ys, p99, strict=True):
        ax.text(value, y, f" {value:.0f} ms", va="center", fontsize=7, zorder=4)
    ax.set_yticks(ys, [literal(name) for name, _ in measured])
    ax.invert_yaxis()
    ax.set_xlim(left=min(0.0, *p50))
    ax.margins(x=0.12)  # room for the figures beside the longest bar
    ax.set_xlabel("added TTFT (ms): the first token's arrival minus the stub's write of it, less direct's")
    ax.set_title("Added TTFT per path: p50 and p99 over the kept runs")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=7)
    fig.tight_layout()
    return to_svg(fig)
