"""From runs to rows: medians and spread over included runs, the direct floor, and a verdict in plain words.

A run whose stream was cut (wire/ending.py: cut_error or cut_silent) is a short stream, not a whole one: like a run
the stub's audit failed, it is excluded from every figure (frames per read, TTFT, added TTFT, bursts, the floor) and
counted, under its kind, in the row's `exclusions`; `ends` counts every run by how it ended, failed probes too."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from tokenpath.axes import Condition
from tokenpath.diagnose.shape import Kind
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.spec import PathSpec
from tokenpath.report.tables import row_shape
from tokenpath.results.model import (
    FLOOR_MARGIN_FPR,
    FLOOR_MARGIN_TTFT_MS,
    UNDECIDED_VERDICT,
    MatrixRow,
    MatrixRun,
)
from tokenpath.stats import median, percentile
from tokenpath.wire.httpversion import HttpVersion


@dataclass(frozen=True, slots=True)
class Floor:
    """What the direct path measured in the same run: anything within it is not a proxy effect."""

    fpr: float
    added_ttft_ms: float  # median of the direct path's (arrival - write) for the first content frame
    ttft_spread_ms: float  # p90 - p50 of the same; against an endpoint, the range of direct's own TTFT
    # max - min of the same: how much this host moved the direct path's first token while it was measured (load
    # on a shared host comes and goes; p90 - p50 of three runs is 0 whenever the top two agree). Not in to_json.
    ttft_range_ms: float = 0.0

    @classmethod
    def from_direct(cls, runs: list[RunRecord]) -> Floor | None:
        ok = [r for r in runs if r.included and r.metrics and r.metrics.frames_per_read is not None]
        if not ok:
            return None
        added = sorted(r.path_added_ttft_ms for r in ok if r.path_added_ttft_ms is not None) or [0.0]
        fpr = max(r.metrics.frames_per_read or 1.0 for r in ok if r.metrics)
        spread = percentile(added, 90) - median(added)
        # The range net of each run's own host delay: a direct round the host slowed shows it in the stub's timers
        # too, so it no longer widens, for every later round, what a path must exceed.
        net = sorted(r.path_added_ttft_ms - r.host_delay_ms for r in ok if r.path_added_ttft_ms is not None) or [0.0]
        return cls(fpr=fpr, added_ttft_ms=median(added), ttft_spread_ms=spread, ttft_range_ms=net[-1] - net[0])

    @classmethod
    def from_direct_endpoint(cls, runs: list[RunRecord]) -> Floor | None:
        """Against a real endpoint: the direct path's worst fpr, and its own TTFT range (max - min) as the noise a
        path's TTFT difference must exceed to count. Each run's difference is taken within its round, between two
        streams that each vary as much as direct's do, so the whole range is the noise: p90 - p50 of three runs is
        max - median, one-sided, and 0.0 whenever the top two agree."""
        ok = [r for r in runs if r.included and r.metrics and r.metrics.frames_per_read is not None]
        ttfts = sorted(r.metrics.ttft_ms for r in ok if r.metrics and r.metrics.ttft_ms is not None)
        if not ok or not ttfts:
            return None
        fpr = max(r.metrics.frames_per_read or 1.0 for r in ok if r.metrics)
        spread = ttfts[-1] - ttfts[0]
        return cls(fpr=fpr, added_ttft_ms=0.0, ttft_spread_ms=spread, ttft_range_ms=spread)

    def to_json(self) -> dict[str, float]:
        return {"fpr": self.fpr, "added_ttft_ms": self.added_ttft_ms, "ttft_spread_ms": self.ttft_spread_ms}


def build_row(path: PathSpec, cond: Condition, runs: list[RunRecord], floor: Floor | None) -> MatrixRow:
    """The row as the model holds it, with its raw runs and the verdict in words."""
    included = [r for r in runs if r.included and r.metrics]
    row = MatrixRow(
        proxy=path.proxy,
        variant=path.variant,
        condition=cond,
        content_encoding=_content_encoding(runs),
        runs=len(runs),
        excluded=len(runs) - len(included),
        exclusions=dict(Counter(r.exclusion_reason.split(":")[0] for r in runs if r.exclusion_reason)),
        ends=dict(Counter(r.end.kind.value for r in runs if r.end is not None)),
        verdict=_not_carried(runs) if runs and all(r.upgrade_refused for r in runs) else "no valid runs",
        fallback_ms_median=_fallback_ms(runs),
        raw=tuple(_run(r, cond) for r in runs),
    )
    if not included:
        return row
    fprs = sorted(r.metrics.frames_per_read or 0.0 for r in included if r.metrics)
    base = floor.added_ttft_ms if floor else 0.0
    added = sorted(r.path_added_ttft_ms - base for r in included if r.path_added_ttft_ms is not None)
    bursts: Counter[int] = Counter()
    for r in included:
        assert r.metrics is not None
        bursts.update(r.metrics.bursts)
    modal = bursts.most_common(1)[0][0] if bursts else 0
    delays = [r.frame_delay_ms["p50"] for r in included if r.frame_delay_ms]
    after_p50 = [r.frame_delay_ms["after_first_p50"] for r in included if "after_first_p50" in r.frame_delay_ms]
    after_p99 = [r.frame_delay_ms["after_first_p99"] for r in included if "after_first_p99" in r.frame_delay_ms]
    row = replace(
        row,
        fpr_median=median(fprs),
        fpr_min=fprs[0],
        fpr_max=fprs[-1],
        added_ttft_ms_median=median(added) if added else None,
        added_ttft_ms_p90=percentile(added, 90) if added else None,
        ttft_ms_median=median([r.metrics.ttft_ms for r in included if r.metrics and r.metrics.ttft_ms is not None]),
        ttfb_ms_median=median([r.metrics.ttfb_ms for r in included if r.metrics and r.metrics.ttfb_ms is not None]),
        first_token_ms_median=_first_token_ms(included) if cond.reasoning_tokens else None,
        arrivals_median=median([r.metrics.arrivals for r in included if r.metrics]),
        modal_burst=modal,
        modal_burst_gap_ms=_modal_gap(included, modal),
        frame_delay_ms_median=median(delays) if delays else None,
        after_first_delay_ms_p50=median(after_p50) if after_p50 else None,
        after_first_delay_ms_p99=median(after_p99) if after_p99 else None,
    )
    # The verdict's: every kept run's added TTFT net of the host's delay in that run (RunRecord.host_delay_ms),
    # fastest first, and its frames per read net of the joins that delay explains (frames_per_read_net); the row's
    # figures above stay as measured (the raw runs hold each run's for any other reader).
    judged = sorted(r.path_added_ttft_ms - base - r.host_delay_ms for r in included if r.path_added_ttft_ms is not None)
    net_fprs = [r.frames_per_read_net for r in included]
    judged_fpr = median([f for f in net_fprs if f is not None]) if any(f is not None for f in net_fprs) else None
    row = replace(row, within_floor=_within_floor(row, judged, floor, judged_fpr))
    return replace(row, verdict=_verdict(row, judged, floor, netted=judged != added, fpr=judged_fpr))


REPEAT_SHARE = 0.25  # a path's delay repeats: its median run within this share of its fastest run's excess


class Evidence(StrEnum):
    """What a path's added first-token times say against the direct floor."""

    WITHIN = "within"  # its fastest run is inside the floor's noise: no proxy effect
    BEYOND = "beyond"  # its fastest run is beyond the noise by more than the host moved either path: a proxy effect
    AMBIGUOUS = "ambiguous"  # beyond the noise, but by less than the measured spread: a loaded round, or a delay


def ttft_evidence(added: Sequence[float], floor: Floor) -> Evidence:
    """The rule a row's first token is judged by, on a shared host whose load comes and goes. `added`: the path's
    runs' added TTFT over the floor's median, each net of the host's delay in its own run (the most the stub's
    timers were late in it, RunRecord.host_delay_ms). Load only ever delays a stream, and a path with a proxy in it
    has one more process to be scheduled, so its runs can all be hit while direct's are not; the stub's timers are
    hit by the same load in the same run, so that much of a run's delay is the host's. A delay the path makes is in
    every run, its fastest too, and is no smaller on a quiet host. So:
    - within: the fastest run is inside the floor's noise (the ranges overlap, as `report --compare` decides);
    - beyond: the fastest run is past that noise (its excess) by more than the host moved the direct path in the
      same rounds (its range), and the delay repeats: the path's median run within REPEAT_SHARE of the excess of
      its fastest (runs scattered across the excess are a loaded host's, not a path's delay);
    - ambiguous otherwise: the runner measures more rounds of the path beside the direct one (bounded)."""
    ordered = sorted(added)
    excess = ordered[0] - _ttft_noise(floor)
    if excess <= 0:
        return Evidence.WITHIN
    repeats = median(ordered) - ordered[0] <= REPEAT_SHARE * excess
    return Evidence.BEYOND if repeats and excess > floor.ttft_range_ms else Evidence.AMBIGUOUS


def undecided(row: MatrixRow, floor: Floor | None) -> bool:
    """A row whose first token the rounds so far could not place against the floor (Evidence.AMBIGUOUS): more
    rounds of it, with the direct path, are what tells."""
    return floor is not None and row.fpr_median is not None and row.within_floor is None


def _fallback_ms(runs: list[RunRecord]) -> float | None:
    """The median cost of the client's fallback to SSE (first upgrade -> first content event), over the runs that
    fell back and got content."""
    costs = [r.metrics.ws.fallback_ms for r in runs if r.metrics and r.metrics.ws and r.metrics.ws.fell_back]
    known = [c for c in costs if c is not None]
    return median(known) if known else None


def _not_carried(runs: list[RunRecord]) -> str:
    """A WebSocket row no run upgraded in; with the fallback policy, what falling back to SSE cost the user."""
    cost = _fallback_ms(runs)
    if cost is None:
        return "WebSocket not carried"
    tries = max(r.metrics.ws.attempts for r in runs if r.metrics and r.metrics.ws)
    return f"WebSocket not carried: SSE after {tries} upgrades, {cost:,.0f} ms to the first token"


def _run(record: RunRecord, cond: Condition) -> MatrixRun:
    """A run as the model holds it, in the HTTP version its probe spoke (the condition's when it got no answer:
    the probe fails a stream rather than fall back, so a row never mixes versions)."""
    run = record.to_run()
    spoke = HttpVersion(run.metrics.http_version) if run.metrics is not None else cond.http_version
    return replace(run, http_version=spoke)


def _first_token_ms(runs: list[RunRecord]) -> float | None:
    """The median time to the first reasoning or content frame: beside TTFT when the stub thinks first."""
    firsts = [r.metrics.first_token_ms for r in runs if r.metrics and r.metrics.first_token_ms is not None]
    return median(firsts) if firsts else None


def _content_encoding(runs: list[RunRecord]) -> str:
    """What the path answered with, over the runs that got an answer: one coding, or each seen ("gzip/identity"),
    most frequent first, so a path that compresses only sometimes says so."""
    seen = Counter(r.content_encoding for r in runs if r.metrics is not None)
    return "/".join(c for c, _ in seen.most_common()) or "identity"


def _modal_gap(runs: list[RunRecord], size: int) -> float | None:
    """The median time between an arrival of the modal burst size and the arrival before it."""
    gaps = [
        r.arrivals[i][0] - r.arrivals[i - 1][0]
        for r in runs
        for i in range(1, len(r.arrivals))
        if r.arrivals[i][1] == size
    ]
    return median(gaps) if gaps else None


def _ttft_noise(floor: Floor) -> float:
    """The largest added TTFT the direct path itself showed, plus the margin: what a path must exceed."""
    return floor.ttft_spread_ms + FLOOR_MARGIN_TTFT_MS


def _within_floor(row: MatrixRow, added: Sequence[float], floor: Floor | None, fpr: float | None) -> bool | None:
    """Frames per read (`fpr`: the median net of the host's delay) at direct's, and added TTFT not distinguishable
    from direct's (ttft_evidence). None: no floor, or a first token the rounds could not place (ambiguous: more
    rounds tell)."""
    if floor is None or row.fpr_median is None or fpr is None:
        return None
    if fpr > floor.fpr + FLOOR_MARGIN_FPR:
        return False
    if not added:
        return True
    evidence = ttft_evidence(added, floor)
    return None if evidence is Evidence.AMBIGUOUS else evidence is Evidence.WITHIN


def _verdict(
    row: MatrixRow,
    added_runs: Sequence[float],
    floor: Floor | None = None,
    netted: bool = False,
    fpr: float | None = None,
) -> str:
    """`added_runs`: as the rule judged them (ttft_evidence); `netted`: some were net of the host's delay, which
    the words then say, since the raw runs show more; `fpr`: frames per read as _within_floor judged it."""
    lowest = added_runs[0] if added_runs else None
    net = " net of the host's delay in it" if netted else ""
    if floor is not None and undecided(row, floor) and lowest is not None:
        return (
            f"{UNDECIDED_VERDICT} (fastest run +{lowest:.1f} ms{net}, beyond "
            f"the floor's {_ttft_noise(floor):.1f} ms by less than this host moved the streams)"
        )
    if row.within_floor:
        added = row.added_ttft_ms_median
        noise = _ttft_noise(floor) if floor is not None else None
        if noise is not None and added is not None and lowest is not None and added > noise:
            return (
                f"streams (not distinguishable from the direct floor: first token +{added:.0f} ms median, but "
                f"its fastest run, +{lowest:.1f} ms{net}, is within the floor's {noise:.1f} ms)"
            )
        return "streams (within the direct floor)"
    added = row.added_ttft_ms_median
    late = f", first token +{added:.0f} ms" if added is not None else ""
    if (row.arrivals_median or 0) <= 1:
        return f"buffers the whole response{late}"
    # Over the direct path's own frames per read: a format that writes some events together (Anthropic's first
    # three, the Responses API's) reads above 1.0 direct too, which is not coalescing.
    if (fpr if fpr is not None else row.fpr_median or 0) > (floor.fpr if floor is not None else 1.0) + FLOOR_MARGIN_FPR:
        shown = row_shape(row)  # diagnose's classifier: a held start, then every frame alone, is not "bursts of 1"
        if shown is not None and shown.kind is Kind.FIRST_HELD:
            return f"{shown.label()}, then streams{late}"
        return f"coalesces: bursts of {row.modal_burst}{late}"
    return f"streams, but late{late}"
