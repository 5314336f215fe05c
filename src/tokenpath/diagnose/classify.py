"""From the figures of a diagnosis's runs to a verdict: which cause, its size or period or encoding, and the
evidence. Pure: no I/O, no clock; every threshold is named here.

Each run gets a shape first:

| shape       | when                                                                                        |
|-------------|---------------------------------------------------------------------------------------------|
| whole       | every frame came in one arrival                                                             |
| streams     | fpr <= STREAM_FPR, nothing held (paced: frames within HOLD_MS of their writes, typically) |
| first_event | the first arrival held back with the next (paced: >= HOLD_MS late; else >= FIRST_BURST frames) |
| held        | bursts (fpr > STREAM_FPR), or every frame alone but each >= HOLD_MS late                      |

Then the identity runs decide the cause, the browser run adds compression, and the base run's head adds "head
held". Where the runs do not tell one story the verdict is UNSURE and the evidence says which signals disagreed:

- a timer keeps its hold (first frame of a burst: arrival - write) from the short to the long interval, while the
  bytes per burst change: TIME_QUANTIZED, the period is that hold
- a byte threshold keeps its bytes per burst, while the hold grows with the interval: BYTE_QUANTIZED
- both kept, or neither: UNSURE

Without a paced stub (any endpoint) there are no write times: a run's arrivals alone say time (regular gaps,
varying bytes) or bytes (regular bytes, varying gaps), and anything less clear is UNSURE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from statistics import mean, median, pstdev
from typing import Any

STREAM_FPR = 1.25  # frames per read at or below this is the noise floor of a streaming path (certified ~1.00)
HOLD_MS = 20.0  # a frame later than this past its write was held (a streaming path adds ~0.1-3 ms)
FIRST_BURST = 3  # without write times, a first arrival of this many frames and singles after it is a hold-back
MIN_FRAMES = 3  # fewer frames than this cannot show a burst
HEAD_HELD_SHARE = 0.5  # TTFB past this share of the stub's TTFT: the head waited for the first frame
SAME_SHARE = 0.25  # two holds or two byte counts within 25 % (of the larger) are the same
SAME_HOLD_MS = 15.0  # ... or holds within this many ms (a timer's phase against the frames moves it a little)
REGULAR_CV = 0.2  # without write times: a coefficient of variation at or below this is regular
IRREGULAR_CV = 0.3  # ... and at or above this is not


class Cause(StrEnum):
    STREAMS = "streams"
    WHOLE_RESPONSE = "whole_response"
    BYTE_QUANTIZED = "byte_quantized"
    TIME_QUANTIZED = "time_quantized"
    COMPRESSION_HOLD = "compression_hold"
    FIRST_EVENT_HOLD = "first_event_hold"
    HEAD_HELD = "head_held"
    UNSURE = "unsure"


class Shape(StrEnum):
    TOO_SHORT = "too_short"
    WHOLE = "whole"
    STREAMS = "streams"
    FIRST_EVENT = "first_event"
    HELD = "held"


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What one run of the series measured, as classify() needs it. Times are ms since the request was sent."""

    name: str
    frames: int
    bursts: tuple[int, ...]  # frames completed by each arrival, in order
    burst_bytes: tuple[int, ...]  # decoded frame bytes completed by each arrival
    arrivals_ms: tuple[float, ...]  # when each arrival's read returned
    ttfb_ms: float | None = None
    ttft_ms: float | None = None
    accept_encoding: str | None = None  # the header sent (None: none)
    content_encoding: str = "identity"  # as the answer came
    # The stub's schedule when it is paced by the diagnosis (frame k written at ttft + k x interval), else None.
    interval_ms: float | None = None
    frame_bytes: int | None = None
    stub_ttft_ms: float | None = None

    @property
    def paced(self) -> bool:
        return self.interval_ms is not None and self.stub_ttft_ms is not None

    @property
    def fpr(self) -> float | None:
        return self.frames / len(self.bursts) if self.bursts else None

    @property
    def compressed(self) -> bool:
        return self.content_encoding not in ("", "identity")

    def holds_ms(self) -> tuple[float, ...]:
        """Per arrival: how late its oldest frame came (arrival - that frame's scheduled write). () unpaced."""
        if self.interval_ms is None or self.stub_ttft_ms is None:
            return ()
        out, first = [], 0
        for burst, t in zip(self.bursts, self.arrivals_ms, strict=True):
            out.append(t - (self.stub_ttft_ms + first * self.interval_ms))
            first += burst
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "accept_encoding": self.accept_encoding,
            "content_encoding": self.content_encoding,
            "interval_ms": self.interval_ms,
            "frame_bytes": self.frame_bytes,
            "stub_ttft_ms": self.stub_ttft_ms,
            "frames": self.frames,
            "arrivals": len(self.bursts),
            "frames_per_read": self.fpr,
            "ttfb_ms": self.ttfb_ms,
            "ttft_ms": self.ttft_ms,
            "bursts": list(self.bursts),
            "burst_bytes": list(self.burst_bytes),
            "arrivals_ms": [round(t, 2) for t in self.arrivals_ms],
            "holds_ms": [round(h, 2) for h in self.holds_ms()],
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: Cause
    summary: str  # one line a user reads
    evidence: tuple[str, ...] = ()
    size_bytes: int | None = None  # BYTE_QUANTIZED: bytes per burst
    period_ms: float | None = None  # TIME_QUANTIZED: the hold (paced) or the gap between bursts (unpaced)
    timer: str | None = None  # TIME_QUANTIZED: what a timer of that period usually is
    encoding: str | None = None  # COMPRESSION_HOLD: the Content-Encoding that held
    notes: tuple[str, ...] = field(default=())  # secondary findings (large frames, compression that streams...)

    @property
    def held(self) -> bool:
        """The path holds the stream (a cause that is not STREAMS and not UNSURE)."""
        return self.cause not in (Cause.STREAMS, Cause.UNSURE)

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause.value,
            "held": self.held,
            "summary": self.summary,
            "size_bytes": self.size_bytes,
            "period_ms": None if self.period_ms is None else round(self.period_ms, 1),
            "timer": self.timer,
            "encoding": self.encoding,
            "evidence": list(self.evidence),
            "notes": list(self.notes),
        }


# --- one run ------------------------------------------------------------------------------------------------------


def shape(run: RunFigures) -> Shape:
    if run.frames < MIN_FRAMES or not run.bursts:
        return Shape.TOO_SHORT
    if len(run.bursts) == 1:
        return Shape.WHOLE
    holds = run.holds_ms()
    rest_fpr = sum(run.bursts[1:]) / len(run.bursts[1:])
    if holds:
        later_held = median(holds[1:]) >= HOLD_MS
        # A first frame that came late but alone is a hiccup (a busy client or host), not a hold-back: a path that
        # holds the first event past the interval hands over the next one with it.
        first_held = holds[0] >= HOLD_MS and run.bursts[0] > 1
        if run.fpr is not None and run.fpr <= STREAM_FPR and not first_held and not later_held:
            return Shape.STREAMS
        if first_held and not later_held and rest_fpr <= STREAM_FPR:
            return Shape.FIRST_EVENT
        return Shape.HELD
    if run.bursts[0] >= FIRST_BURST and rest_fpr <= STREAM_FPR:
        return Shape.FIRST_EVENT
    if run.fpr is not None and run.fpr <= STREAM_FPR:
        return Shape.STREAMS
    return Shape.HELD


def _inner(values: Sequence[float]) -> Sequence[float]:
    """The bursts a rule released on its own: not the last (the end of the response releases it, whatever the rule)
    and, when one other remains, not the first (a hold that can start with the head's bytes, before any frame)."""
    if len(values) >= 3:
        return values[1:-1]
    return values[:-1] if len(values) > 1 else values


def typical_hold(run: RunFigures) -> float:
    return median(_inner(run.holds_ms()))


def typical_bytes(run: RunFigures) -> float:
    return median(_inner([float(b) for b in run.burst_bytes]))


def _same(a: float, b: float, floor: float = 0.0) -> bool:
    return abs(a - b) <= max(floor, SAME_SHARE * max(abs(a), abs(b)))


def _cv(values: Sequence[float]) -> float | None:
    return pstdev(values) / mean(values) if len(values) >= 2 and mean(values) > 0 else None


def timer_kind(period_ms: float) -> str:
    """What a flush timer of this period usually is (docs/findings.md, seed 003)."""
    if period_ms < 25:
        return "a short flush timer"
    if period_ms < 80:
        return "Nagle's algorithm with delayed ACKs (~40 ms)"
    if period_ms < 150:
        return "a ~100 ms flush interval"
    if period_ms <= 300:
        return "a 200-250 ms flush timer (MSG_MORE / TCP_CORK; stock HAProxy holds ~180-200 ms)"
    return "a long flush timer"


def _describe(run: RunFigures) -> str:
    fpr = f"{run.fpr:.2f}" if run.fpr is not None else "-"
    what = f"{run.name}: {run.frames} frames in {len(run.bursts)} arrivals (fpr {fpr}"
    if run.paced:
        what += f"; {run.frame_bytes} B every {run.interval_ms:g} ms"
        holds = run.holds_ms()
        if holds:
            what += f"; first held {max(holds[0], 0):.0f} ms, typical {max(typical_hold(run), 0):.0f} ms"
    if run.accept_encoding is not None:
        what += f"; Accept-Encoding {run.accept_encoding!r} -> {run.content_encoding}"
    return what + f"): {shape(run).value}"


# --- the series ---------------------------------------------------------------------------------------------------


def classify(runs: Sequence[RunFigures]) -> Verdict:
    """The verdict over a diagnosis's runs (series.plan's names: base, slow, large, browser; only base is
    required)."""
    by = {r.name: r for r in runs}
    if "base" not in by:
        raise ValueError("classify() needs the `base` run")
    evidence = tuple(_describe(r) for r in runs)
    identity = _identity_verdict(by, evidence)
    browser = by.get("browser")
    if browser is None:
        return identity
    return _with_compression(identity, browser, evidence)


def _unsure(why: str, evidence: tuple[str, ...], notes: tuple[str, ...] = ()) -> Verdict:
    return Verdict(Cause.UNSURE, f"unsure: {why}", evidence, notes=notes)


def _identity_verdict(by: dict[str, RunFigures], evidence: tuple[str, ...]) -> Verdict:
    base = by["base"]
    others = [by[n] for n in ("slow", "large") if n in by]
    shapes = {r.name: shape(r) for r in (base, *others)}
    if Shape.TOO_SHORT in shapes.values():
        short = [n for n, s in shapes.items() if s is Shape.TOO_SHORT]
        return _unsure(f"too few frames to tell ({', '.join(short)}: < {MIN_FRAMES})", evidence)
    slow = by.get("slow")
    slow_shape = shapes.get("slow")
    base_shape = shapes["base"]
    if base_shape is Shape.WHOLE:
        if slow_shape not in (None, Shape.WHOLE):
            return _unsure(f"the short interval was held whole but the long one {slow_shape.value}", evidence)
        return Verdict(
            Cause.WHOLE_RESPONSE,
            "buffers the whole response: every frame in one read, at its end",
            evidence,
            notes=_large_notes(by),
        )
    if base_shape is Shape.STREAMS:
        disagree = [n for n, s in shapes.items() if s is not Shape.STREAMS]
        if disagree:
            what = ", ".join(f"{n} {shapes[n].value}" for n in disagree)
            return _unsure(f"small frames at a short interval stream, but {what}", evidence)
        return _head_or_streams(base, evidence)
    if base_shape is Shape.FIRST_EVENT:
        if slow_shape not in (None, Shape.FIRST_EVENT, Shape.STREAMS):
            return _unsure(f"the first event was held back, but the long interval {slow_shape.value}", evidence)
        first = base.holds_ms()[0] if base.paced else None
        late = f" ({first:.0f} ms)" if first is not None else f" ({base.bursts[0]} frames in the first read)"
        return Verdict(Cause.FIRST_EVENT_HOLD, f"holds back the first event{late}, then streams", evidence)
    # HELD: bursts. A timer or a byte threshold?
    if not base.paced:
        return _unpaced_bursts(base, evidence)
    if slow is None or slow_shape is None:
        return _unsure("bursts, but without a second interval time and size cannot be told apart", evidence)
    if slow_shape is not Shape.HELD:
        return _unsure(f"bursts at the short interval, but the long interval {slow_shape.value}", evidence)
    return _paced_bursts(base, slow, by.get("large"), evidence)


def _head_or_streams(base: RunFigures, evidence: tuple[str, ...]) -> Verdict:
    ttft = base.stub_ttft_ms
    if (
        base.paced
        and ttft is not None
        and base.ttfb_ms is not None
        and base.ttfb_ms >= max(HOLD_MS, HEAD_HELD_SHARE * ttft)
    ):
        return Verdict(
            Cause.HEAD_HELD,
            f"holds the response head until the first frame (TTFB "
            f"{base.ttfb_ms:.0f} ms; the stub sent it at once, the first frame at {ttft:g} ms)",
            evidence,
        )
    notes: tuple[str, ...] = ()
    head_with_first = base.ttfb_ms is not None and base.ttft_ms is not None and base.ttft_ms - base.ttfb_ms < 1.0
    if not base.paced and head_with_first and base.ttft_ms is not None and base.ttft_ms >= HOLD_MS:
        notes = (
            "the head came with the first frame (the origin or the path held it: a paced stub behind the "
            "path would tell which)",
        )
    return Verdict(Cause.STREAMS, "streams: every frame in its own read, on time", evidence, notes=notes)


def _paced_bursts(base: RunFigures, slow: RunFigures, large: RunFigures | None, ev: tuple[str, ...]) -> Verdict:
    hold_b, hold_s = typical_hold(base), typical_hold(slow)
    bytes_b, bytes_s = typical_bytes(base), typical_bytes(slow)
    time_kept = _same(hold_b, hold_s, SAME_HOLD_MS) and min(hold_b, hold_s) >= HOLD_MS
    # Frames held one by one cannot be a byte threshold's doing: one below a frame's size would let each go at once.
    grouped = max(median(_inner([float(b) for b in r.bursts])) for r in (base, slow)) > 1
    bytes_kept = grouped and _same(bytes_b, bytes_s)
    seen = (
        f"hold {hold_b:.0f} ms at {base.interval_ms:g} ms vs {hold_s:.0f} ms at {slow.interval_ms:g} ms; "
        f"bytes per burst {bytes_b:.0f} vs {bytes_s:.0f}"
    )
    if time_kept == bytes_kept:
        return _unsure(
            f"bursts, and {'both' if time_kept else 'neither'} the hold and the bytes per burst stayed "
            f"the same across intervals ({seen})",
            ev,
        )
    if time_kept:
        period = median([hold_b, hold_s])
        notes = _large_time_note(large, period)
        return Verdict(
            Cause.TIME_QUANTIZED,
            f"holds frames on a timer: bursts every ~{period:.0f} ms, whatever the interval ({timer_kind(period)})",
            (*ev, seen),
            period_ms=period,
            timer=timer_kind(period),
            notes=notes,
        )
    size = round(median([bytes_b, bytes_s]))
    return Verdict(
        Cause.BYTE_QUANTIZED,
        f"holds frames until ~{size} B are queued: bursts of the same size whatever the interval",
        (*ev, seen),
        size_bytes=size,
        notes=_large_byte_note(large, size),
    )


def _large_time_note(large: RunFigures | None, period: float) -> tuple[str, ...]:
    if large is None:
        return ()
    if shape(large) is Shape.STREAMS:
        return (
            f"{large.frame_bytes} B frames went through at once: a full segment also releases it (over a real "
            "link, MSG_MORE/TCP_CORK flush at 1,448 B)",
        )
    if shape(large) is Shape.HELD and _same(typical_hold(large), period, SAME_HOLD_MS):
        return (f"{large.frame_bytes} B frames were held the same ~{typical_hold(large):.0f} ms",)
    return ()


def _large_byte_note(large: RunFigures | None, size: int) -> tuple[str, ...]:
    if large is None:
        return ()
    if shape(large) is Shape.STREAMS:
        return (f"{large.frame_bytes} B frames went through one by one: the threshold is below {large.frame_bytes} B",)
    if shape(large) is Shape.HELD:
        return (f"{large.frame_bytes} B frames came in bursts of ~{typical_bytes(large):.0f} B",)
    return ()


def _large_notes(by: dict[str, RunFigures]) -> tuple[str, ...]:
    """A whole-response hold that is a buffer of some KB shows its size with large frames (nginx: ~4 KB)."""
    large = by.get("large")
    if large is None or shape(large) is not Shape.HELD:
        return ()
    return (
        f"{large.frame_bytes} B frames came in bursts of ~{typical_bytes(large):.0f} B: the buffer holds about "
        "that much before it lets go",
    )


def _unpaced_bursts(base: RunFigures, ev: tuple[str, ...]) -> Verdict:
    gaps = [b - a for a, b in zip(base.arrivals_ms, base.arrivals_ms[1:], strict=False)]
    inner_gaps = list(_inner(gaps))
    inner_bytes = [float(b) for b in _inner(base.burst_bytes)]
    gaps_cv, bytes_cv = _cv(inner_gaps), _cv(inner_bytes)
    if gaps_cv is None or bytes_cv is None:
        return _unsure("bursts, but too few of them to tell a timer from a size", ev)
    seen = f"gaps between bursts vary {gaps_cv:.2f}, bytes per burst {bytes_cv:.2f} (coefficient of variation)"
    if gaps_cv <= REGULAR_CV and bytes_cv >= IRREGULAR_CV:
        period = median(inner_gaps)
        return Verdict(
            Cause.TIME_QUANTIZED,
            f"holds frames on a timer: bursts every ~{period:.0f} ms ({timer_kind(period)})",
            (*ev, seen),
            period_ms=period,
            timer=timer_kind(period),
        )
    if bytes_cv <= REGULAR_CV and gaps_cv >= IRREGULAR_CV:
        size = round(median(inner_bytes))
        return Verdict(Cause.BYTE_QUANTIZED, f"holds frames until ~{size} B are queued", (*ev, seen), size_bytes=size)
    return _unsure(
        f"bursts, but neither their timing nor their size is regular enough to name the rule ({seen}); "
        "a tokenpath stub behind the path (--stub-url) would vary the pacing and tell",
        ev,
    )


def _with_compression(identity: Verdict, browser: RunFigures, ev: tuple[str, ...]) -> Verdict:
    """The browser's Accept-Encoding run: compression without a flush where identity streams."""
    bshape = shape(browser)
    enc = browser.content_encoding
    if bshape is Shape.TOO_SHORT:
        return _unsure(f"the browser run has too few frames ({browser.frames})", ev, identity.notes)
    if not browser.compressed:
        note = "the path did not compress for a browser's Accept-Encoding"
        if identity.cause in (Cause.STREAMS, Cause.HEAD_HELD) and bshape is not Shape.STREAMS:
            return _unsure(f"identity streams, but the browser run {bshape.value} without any compression", ev)
        return _add_note(identity, note)
    if bshape is Shape.STREAMS:
        return _add_note(identity, f"compressed ({enc}) and flushed per event: streams")
    if identity.cause in (Cause.STREAMS, Cause.HEAD_HELD):
        how = "in one read at its end" if bshape is Shape.WHOLE else f"{bshape.value.replace('_', ' ')}"
        return Verdict(
            Cause.COMPRESSION_HOLD,
            f"compresses ({enc}) without a flush per event: a browser gets the "
            f"stream {how}; without Accept-Encoding it streams",
            ev,
            encoding=enc,
            notes=identity.notes,
        )
    if identity.cause is Cause.UNSURE:
        return identity
    return _add_note(identity, f"compressed ({enc}) answers are held too ({bshape.value})")


def _add_note(verdict: Verdict, note: str) -> Verdict:
    return Verdict(
        verdict.cause,
        verdict.summary,
        verdict.evidence,
        verdict.size_bytes,
        verdict.period_ms,
        verdict.timer,
        verdict.encoding,
        (*verdict.notes, note),
    )
