"""`tokenpath sweep`: frame size x interval through one proxy, then the flush rule those points imply.

Model: the proxy holds bytes until N are queued or T ms have passed since the first held byte. Frames of w bytes
on the wire every i ms then arrive in bursts of b, the first one late by:
  - about T, whatever i and w are, when the timer releases them (held time clusters at one value), or
  - (b - 1) x i < T when N is reached first, which bounds N: (b - 1) x w < N <= b x w.
T is the cluster of hold times seen at several intervals; N is the intersection of every size-released bound, a
range (the points never show N itself, only the burst sizes either side of it). Either is null when the points do not
show it (e.g. loopback, where a 64 KB segment never fills).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tokenpath.errors import UsageError
from tokenpath.experiment.runner import MatrixRunner
from tokenpath.experiment.spec import Condition, Experiment, Link, PathSpec
from tokenpath.probe.table import fmt
from tokenpath.progress import escaped, styled
from tokenpath.results import model
from tokenpath.results.model import Inferred, MatrixResults, SweepPoint
from tokenpath.stats import median
from tokenpath.stub.config import MAX_FRAME_BYTES, MAX_STREAM_SECONDS, MAX_TOKENS

TIMER_CLUSTER = 0.15  # hold times within 15 % of the longest are the timer's
SIZE_RELEASED_BELOW = 0.7  # a burst released before 70 % of the timer was released by size


MAX_SWEEP_RUNS = 1000  # streams per point: past this a sweep runs for days
MAX_SWEEP_INTERVAL_MS = 60_000.0  # a minute between frames: past any proxy's flush timer


def sweep_experiment(
    proxy: str, variant: str, link: Link, tls: bool, sizes: list[int], intervals: list[float], runs: int, frames: int
) -> Experiment:
    if link not in ("loopback", "veth"):
        raise UsageError(f"`link` {link!r}: expected loopback or veth")
    # A matrix file's numbers are checked when it is read (spec.parse); these come from flags, so are checked here,
    # before certification: `--sizes -5` or `--runs 0` ran the whole sweep and then blamed the direct path.
    if not 1 <= runs <= MAX_SWEEP_RUNS:
        raise UsageError(f"`runs` {runs}: expected 1 to {MAX_SWEEP_RUNS} streams per point")
    if not 1 <= frames <= MAX_TOKENS:
        raise UsageError(f"`frames` {frames}: expected 1 to {MAX_TOKENS} frames per stream")
    bad_sizes = [s for s in sizes if not 1 <= s <= MAX_FRAME_BYTES]
    if not sizes or bad_sizes:
        raise UsageError(f"`sizes` {bad_sizes or sizes}: each a frame size of 1 to {MAX_FRAME_BYTES} bytes")
    bad_intervals = [i for i in intervals if not (math.isfinite(i) and 0 <= i <= MAX_SWEEP_INTERVAL_MS)]
    if not intervals or bad_intervals:
        raise UsageError(f"`intervals` {bad_intervals or intervals}: each 0 to {MAX_SWEEP_INTERVAL_MS:g} ms")
    longest_s = (max(intervals) * frames) / 1000
    if longest_s > MAX_STREAM_SECONDS:
        raise UsageError(f"a stream of {frames} frames every {max(intervals):g} ms would run {longest_s:.0f} s: at "
                         f"most {MAX_STREAM_SECONDS:.0f} s (fewer `frames`, shorter `intervals`)")  # fmt: skip
    return Experiment(
        name=f"sweep: {proxy}{'' if variant == 'stock' else f' ({variant})'} over {link}{' with TLS' if tls else ''}",
        paths=[PathSpec("direct"), PathSpec(proxy, variant)],
        conditions=[Condition(i, s, link, tls) for i in intervals for s in sizes],
        frames=frames,
        runs=runs,
    )


def _held(within_floor: bool | None) -> str:
    """The held? column: None is a point not placed (no floor, or a first token undecided under load)."""
    return "?" if within_floor is None else ("no" if within_floor else "yes")


def sweep_table(results: MatrixResults, title: str) -> Table:
    table = Table(title=f"tokenpath sweep: {escaped(title)}")  # the proxy's and variant's names, as typed
    for col in ("frame B", "interval ms", "fpr", "+TTFT ms", "burst", "held?"):
        table.add_column(col, justify="right")
    for p in results.points or ():
        figures = (fmt(p.fpr_median, 2), fmt(p.added_ttft_ms_median), str(p.modal_burst))
        table.add_row(str(p.frame_bytes), f"{p.interval_ms:g}", *figures, _held(p.within_floor))
    return table


def inferred_line(results: MatrixResults, proxy: str) -> str | None:
    """What the sweep says of the proxy, under its table (None before a rule is inferred): rich markup, the proxy's
    name and the results' words escaped."""
    inferred = results.inferred
    if inferred is None:
        return None
    said = f"{proxy} {inferred.rule or ''}"
    return f"{styled(said, 'bold')} ({escaped(inferred.explanation)})"


def wire_bytes(frame_bytes: int) -> int:
    """A frame as the proxy sends it to an HTTP/1.1 client: one chunk (hex size, CRLF, data, CRLF)."""
    return frame_bytes + len(f"{frame_bytes:x}") + 4


def points(results: MatrixResults, proxy: str) -> tuple[SweepPoint, ...]:
    return tuple(
        SweepPoint(
            r.condition.frame_bytes,
            r.condition.interval_ms,
            r.fpr_median,
            r.added_ttft_ms_median,
            r.modal_burst,
            r.within_floor,
        )
        for r in results.rows
        if r.proxy == proxy and r.fpr_median is not None
    )


def longest_holds(results: MatrixResults, proxy: str) -> dict[tuple[int, float], float]:
    """Per point of `proxy` (frame bytes, interval ms): the longest any byte of its streams was held, in ms. That is
    the larger of its frames' after-first delay p99 (arrival minus write) and its added TTFB (its response head's
    hold, against direct's head in the same condition); a point with neither figure is left out."""
    direct = {
        (r.condition.frame_bytes, r.condition.interval_ms): r.ttfb_ms_median
        for r in results.rows
        if r.proxy == "direct"
    }
    holds: dict[tuple[int, float], float] = {}
    for r in results.rows:
        if r.proxy != proxy:
            continue
        key = (r.condition.frame_bytes, r.condition.interval_ms)
        figures = [r.after_first_delay_ms_p99]
        head_direct = direct.get(key)
        if r.ttfb_ms_median is not None and head_direct is not None:
            figures.append(r.ttfb_ms_median - head_direct)
        known = [f for f in figures if f is not None]
        if known:
            holds[key] = max(known)
    return holds


def stated(ms: float, spread: float) -> float:
    """A timer to the precision its points support: two significant figures (the timer's start, the first held byte,
    is only known to within the stub's write and the proxy's read of it, and kernel timers tick in jiffies of up to
    10 ms), coarser when the points' estimates spread wider than that."""
    step = 10.0 ** (math.floor(math.log10(ms)) - 1)
    while step < spread:
        step *= 10
    return round(round(ms / step) * step, max(0, -math.floor(math.log10(step))))


def infer(pts: Sequence[SweepPoint], holds: Mapping[tuple[int, float], float] | None = None) -> Inferred:
    """The flush rule the points imply. `holds` (longest_holds) is each point's longest hold of any byte: the timer
    is read from it; without it the timer is only bounded below, by the first frames' added TTFT."""
    held = [p for p in pts if p.within_floor is False and (p.added_ttft_ms_median or 0) > 0]
    if not held:
        return Inferred(explanation="no point was held: the proxy streams")
    longest = max(p.added_ttft_ms_median or 0.0 for p in held)
    timer_pts = [p for p in held if (p.added_ttft_ms_median or 0.0) >= (1 - TIMER_CLUSTER) * longest]
    timer_intervals = len({p.interval_ms for p in timer_pts})
    timer_ms, timer_said, how_held = None, "", ""
    cap = longest  # the timer's scale in added TTFT: what a size-released point's added TTFT is compared with
    if timer_intervals >= 2:
        cap = median([p.added_ttft_ms_median or 0.0 for p in timer_pts])
        # A timer-released point's added TTFT is not the timer. The timer starts at the first held byte, and the
        # stub writes its response head at once and its first content frame its TTFT (20 ms by default) later, so
        # a proxy that holds the head releases the first frame T - TTFT after its write: the added TTFT reads T
        # minus the stub's TTFT (cork: 180 ms for a 200 ms timer). What the timer itself measures is the longest
        # hold any byte sees in a timer-released burst: the head's (the added TTFB, when the head is held), or
        # the first frame held after a release (after-first delay p99: each burst after the first starts its timer
        # at a frame, whatever the interval). No hold under a timer can exceed T, so the larger is the estimate.
        estimates = [
            max(p.added_ttft_ms_median or 0.0, (holds or {}).get((p.frame_bytes, p.interval_ms), 0.0))
            for p in timer_pts
        ]
        timer_ms = stated(median(estimates), max(estimates) - min(estimates))
        span = f"{min(estimates):.1f}-{max(estimates):.1f} ms"
        if holds is not None and all((p.frame_bytes, p.interval_ms) in holds for p in timer_pts):
            timer_said = f"after ~{timer_ms:g} ms"
            lead = f"held up to {span} (the longest hold of a byte)"
        else:
            timer_said = f"after at least ~{timer_ms:g} ms"
            lead = f"first frames held {span} (a lower bound: the timer starts at the first held byte)"
        how_held = f"{lead} at {len(timer_pts)} points over {timer_intervals} intervals"
    lo, hi, evidence = 0, None, []
    for p in held:
        burst = p.modal_burst or 1
        if (p.added_ttft_ms_median or 0.0) < SIZE_RELEASED_BELOW * cap and burst >= 2:
            w = wire_bytes(p.frame_bytes)
            lo, hi = max(lo, (burst - 1) * w), min(hi or burst * w, burst * w)
            evidence.append(f"{p.frame_bytes} B @ {p.interval_ms:g} ms: bursts of {burst}")
    size_bytes = None
    size_said = ""
    parts = []
    if timer_ms is not None:
        parts.append(how_held)
    if hi is not None and lo < hi:
        size_bytes = hi  # the upper bound: the points bound N to lo < N <= hi, and size_range carries both
        size_said = f">= {hi} B are queued" if lo + 1 == hi else f"between {lo + 1} and {hi} B are queued"
        parts.append(f"released by size between {lo + 1} and {hi} bytes ({'; '.join(evidence)})")
    elif hi is not None:
        parts.append(f"size bounds do not reconcile ({lo} > {hi}): not a plain byte threshold")
    rule = "flushes when " + " or ".join(x for x in (size_said, timer_said) if x)
    if size_bytes is None and timer_ms is None:
        rule = "holds frames, but neither a size nor a timer rule fits the points"
    intervals = sorted({p.interval_ms for p in pts})
    caveat = None
    if len(intervals) < 2:
        # At one interval a burst of b frames released early fits a byte threshold and a timer alike, and a timer
        # is only told from the stream's own length by seeing the same hold at another interval.
        caveat = (
            f"one interval ({intervals[0]:g} ms) cannot tell a size threshold from a timer: "
            "measure at least two intervals (--intervals 25,50) before naming a rule"
        )
        parts.append(caveat)
        rule = f"holds frames at {intervals[0]:g} ms; which rule releases them needs a second interval"
        size_bytes = None
    return Inferred(
        explanation="; ".join(parts),
        size_bytes=size_bytes,
        size_range=(lo + 1, hi) if size_bytes and hi is not None else None,
        timer_ms=timer_ms,
        rule=rule,
        caveat=caveat,
    )


def run_sweep(exp: Experiment, proxy: str, out_dir: Path, console: Console, force: bool = False) -> MatrixResults:
    """The matrix of the sweep's points, then what it says: written as a sweep once the rule is inferred."""
    results = MatrixRunner(exp, out_dir, force=force, console=console).run()
    pts = points(results, proxy)
    inferred = infer(pts, longest_holds(results, proxy))
    results = replace(results, provenance=replace(results.provenance, kind="sweep"), points=pts, inferred=inferred)
    model.write(results, out_dir)
    return results
