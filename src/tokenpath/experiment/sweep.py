"""`tokenpath sweep`: frame size x interval through one proxy, then the flush rule those points imply.

Model: the proxy holds bytes until N are queued or T ms have passed since the first held byte. Frames of w bytes
on the wire every i ms then arrive in bursts of b, the first one late by:
  - about T, whatever i and w are, when the timer releases them (held time clusters at one value), or
  - (b - 1) x i < T when N is reached first, which bounds N: (b - 1) x w < N <= b x w.
T is the cluster of hold times seen at several intervals; N is the intersection of every size-released bound.
Either is null when the points do not show it (e.g. loopback, where a 64 KB segment never fills).
"""

from __future__ import annotations

from collections.abc import Sequence
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

TIMER_CLUSTER = 0.15  # hold times within 15 % of the longest are the timer's
SIZE_RELEASED_BELOW = 0.7  # a burst released before 70 % of the timer was released by size


def sweep_experiment(
    proxy: str, variant: str, link: Link, tls: bool, sizes: list[int], intervals: list[float], runs: int, frames: int
) -> Experiment:
    if link not in ("loopback", "veth"):
        raise UsageError(f"`link` {link!r}: expected loopback or veth")
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


def infer(pts: Sequence[SweepPoint]) -> Inferred:
    held = [p for p in pts if p.within_floor is False and (p.added_ttft_ms_median or 0) > 0]
    if not held:
        return Inferred(explanation="no point was held: the proxy streams")
    longest = max(p.added_ttft_ms_median or 0.0 for p in held)
    timer_pts = [p for p in held if (p.added_ttft_ms_median or 0.0) >= (1 - TIMER_CLUSTER) * longest]
    timer_ms = None
    if len({p.interval_ms for p in timer_pts}) >= 2:
        timer_ms = round(median([p.added_ttft_ms_median or 0.0 for p in timer_pts]), 1)
    cap = timer_ms if timer_ms is not None else longest
    lo, hi, evidence = 0, None, []
    for p in held:
        burst = p.modal_burst or 1
        if (p.added_ttft_ms_median or 0.0) < SIZE_RELEASED_BELOW * cap and burst >= 2:
            w = wire_bytes(p.frame_bytes)
            lo, hi = max(lo, (burst - 1) * w), min(hi or burst * w, burst * w)
            evidence.append(f"{p.frame_bytes} B @ {p.interval_ms:g} ms: bursts of {burst}")
    size_bytes = None
    parts = []
    if timer_ms is not None:
        n_intervals = len({p.interval_ms for p in timer_pts})
        parts.append(f"held ~{timer_ms:g} ms at {len(timer_pts)} points over {n_intervals} intervals")
    if hi is not None and lo < hi:
        size_bytes = hi
        parts.append(f"released by size between {lo + 1} and {hi} bytes ({'; '.join(evidence)})")
    elif hi is not None:
        parts.append(f"size bounds do not reconcile ({lo} > {hi}): not a plain byte threshold")
    rule = "flushes when " + " or ".join(
        x
        for x in (f">= {size_bytes} B are queued" if size_bytes else "", f"after {timer_ms:g} ms" if timer_ms else "")
        if x
    )
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
    results = replace(results, provenance=replace(results.provenance, kind="sweep"), points=pts, inferred=infer(pts))
    model.write(results, out_dir)
    return results
