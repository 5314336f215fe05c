"""From the figures of a diagnosis's runs to a verdict: which cause, its size or period or encoding, and the
evidence; or which runs the series needs next to tell. Pure: no I/O, no clock; every threshold is named here.

Each run gets its shape first (shape.py, the classifier the matrix's "seen as" uses too). Then the identity runs
(no Accept-Encoding) are read as one rule that releases held frames, the compressed runs add compression, and the
base run's head adds a note when it waited for the first frame:

- every run streams: STREAMS (a head held until the first frame, with no token later for it, is a note)
- the first arrival held back with the frames after it, the rest on time: FIRST_HOLD, its size and time
- frames released along the stream: a rule that fits every run. A timer keeps its hold across rates, a byte
  threshold its bytes per release; a run held to its end bounds both (a timer shorter than that wait, or a
  threshold below those bytes, would have released it), and a run that streamed bounds the threshold below its
  frame size. TIME_QUANTIZED, BYTE_QUANTIZED, or UNSURE naming what contradicts each
- every run held to its end: WHOLE_RESPONSE once the series reached its bound (series.MAX_STREAM_BYTES), which
  the summary states ("at least")
- identity streams, a compressing client's answer held: COMPRESSION_HOLD, with what the hold looked like

Where the figures so far cannot tell (held to the end below the bound, two rules that fit alike, a compressed
answer too short to show its rule), the verdict is UNSURE with `wants`: the series' runs that would tell
(series.py), which measure.py runs before asking again. A verdict without `wants` stands.

Repeats (measure.py measures an unsure series again): each run is read by its repeat held least (least_held), as a
busy host only ever delays a stream, never un-holds one; so a held repeat is evidence and a streaming one is not
proof. A run held (its frames held together: whole, bursts, the first frames; every frame alone but late is what a
busy host makes) in a clear share of its repeats (at least CLEAR_HELD of them and at least CLEAR_SHARE) but not in
all is an intermittent hold (intermittent()): a user feels it whenever it happens, so it is named with its share
("intermittent: holds in 2 of 3 runs (base); ...") and the cause, fix and exit code (16) of a steady hold, read from
the most-held repeats. Holds are counted across the series too: a clear share of all its streams, whichever runs
they fell on (one run held twice at least), is the path's ("holds in 8 of 15 streams (...)"), and so is one stream
held whole (held_whole: one arrival after its last write, its first frame held past HOST_DELAY_MS, which no busy
host does). One other held repeat (1 of 3, or 1 of 2: a modest burst) is a busy host's outlier: the least-held
runs tell, with a note naming it. Repeats that agree (every one held, or none) read as one pass does.

Without write times (an endpoint that is not a paced stub) a run's arrivals alone say time (regular gaps, varying
bytes) or bytes (regular bytes, varying gaps); when both are regular, one pacing cannot tell them apart (UNSURE).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from statistics import mean, median, pstdev
from typing import Any, TypeVar

from tokenpath.diagnose import series
from tokenpath.diagnose.shape import HOLD_MS, SEVERITY, Kind, Seen, holds, seen, size
from tokenpath.wire.ending import StreamEnd

SAME_SHARE = 0.25  # two holds or two byte counts within 25 % (of the larger) are the same
SAME_HOLD_MS = 15.0  # ... or holds within this many ms (a timer's phase against the frames moves it a little)
HEAD_HELD_SHARE = 0.5  # TTFB past this share of the stub's TTFT: the head waited for the first frame
HEAD_FRAMES = 2  # a first arrival of this many frames, every later one alone: the head's bytes counted to a size
REGULAR_CV = 0.2  # without write times: a coefficient of variation at or below this is regular
IRREGULAR_CV = 0.3  # ... and at or above this is not


class Cause(StrEnum):
    STREAMS = "streams"
    WHOLE_RESPONSE = "whole_response"
    BYTE_QUANTIZED = "byte_quantized"
    TIME_QUANTIZED = "time_quantized"
    FIRST_HOLD = "first_hold"
    COMPRESSION_HOLD = "compression_hold"
    CUT = "cut"  # the path ended a stream before its end (a check names the limit: diagnose/cuts.py)
    UNSURE = "unsure"


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What one run of the series measured, as classify() needs it. Times are ms since the request was sent."""

    name: str
    frames: int
    bursts: tuple[int, ...]  # frames completed by each arrival, in order
    burst_bytes: tuple[int, ...]  # decoded frame bytes completed by each arrival
    arrivals_ms: tuple[float, ...]  # when each arrival's read returned
    ttfb_ms: float | None = None  # the first response byte: a 1xx's (103 Early Hints) when one came first
    ttft_ms: float | None = None
    # The final response head's read: what the head rules read (a path that sends a 103 at once and holds the 200
    # until the first token holds the head). None: as TTFB (figures made before this was measured).
    head_ms: float | None = None
    accept_encoding: str | None = None  # the header sent (None: none)
    content_encoding: str = "identity"  # as the answer came
    # The stub's schedule when the diagnosis paced it, else None.
    interval_ms: float | None = None
    frame_bytes: int | None = None
    stub_ttft_ms: float | None = None
    # Each frame's write (ms since the request was sent): the stub's own log, or its schedule. None: unknown.
    writes_ms: tuple[float, ...] | None = None
    # How the stream ended when the path cut it (wire/ending.py; measure.py reads it from the probe's error), else
    # None: a cut run's figures are a short stream's.
    end: StreamEnd | None = None
    # What carried the run, as the trace says (not as asked): its HTTP version ("1.1", "2", "3") and transport.
    http_version: str = "1.1"
    transport: str = "sse"
    # Of `frames`, those without output (measure.figures): keep-alives, control events, the end marker. They stay in
    # the shape (a path's holds are judged on every frame it held); a run of nothing else is unsure (classify).
    other_frames: int = 0

    @property
    def paced(self) -> bool:
        return self.writes_ms is not None

    @property
    def head_at_ms(self) -> float | None:
        """When the final response head came: its own read, else (not measured) the first byte's."""
        return self.head_ms if self.head_ms is not None else self.ttfb_ms

    @property
    def fpr(self) -> float | None:
        return self.frames / len(self.bursts) if self.bursts else None

    @property
    def compressed(self) -> bool:
        return self.content_encoding not in ("", "identity")

    @property
    def nbytes(self) -> int:
        return sum(self.burst_bytes)

    @property
    def mean_frame_bytes(self) -> float:
        return self.nbytes / self.frames if self.frames else 0.0

    @property
    def span_ms(self) -> float:
        """From the first frame's write to the last's (0 unpaced)."""
        return self.writes_ms[-1] - self.writes_ms[0] if self.writes_ms else 0.0

    def seen(self) -> Seen:
        return seen(self.bursts, self.arrivals_ms, self.writes_ms, self.burst_bytes)

    def holds_ms(self) -> tuple[float, ...]:
        """Per arrival: how late its oldest frame came (arrival - that frame's write). () unpaced."""
        return holds(self.bursts, self.arrivals_ms, self.writes_ms) if self.writes_ms else ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": self.seen().kind.value,
            "accept_encoding": self.accept_encoding,
            "content_encoding": self.content_encoding,
            "interval_ms": self.interval_ms,
            "frame_bytes": self.frame_bytes,
            "stub_ttft_ms": self.stub_ttft_ms,
            "frames": self.frames,
            "other_frames": self.other_frames,
            "bytes": self.nbytes,
            "arrivals": len(self.bursts),
            "frames_per_read": self.fpr,
            "ttfb_ms": self.ttfb_ms,
            "head_ms": self.head_ms,
            "ttft_ms": self.ttft_ms,
            "bursts": list(self.bursts),
            "burst_bytes": list(self.burst_bytes),
            "arrivals_ms": [round(t, 2) for t in self.arrivals_ms],
            "holds_ms": [round(h, 2) for h in self.holds_ms()],
            "end": self.end.to_json() if self.end is not None else None,
            "http_version": self.http_version,
            "transport": self.transport,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: Cause
    summary: str  # one line a user reads
    evidence: tuple[str, ...] = ()
    size_bytes: int | None = None  # BYTE_QUANTIZED: bytes per release; FIRST_HOLD (and its compression): first bytes
    period_ms: float | None = None  # TIME_QUANTIZED: the hold; FIRST_HOLD: how late the first token came
    timer: str | None = None  # TIME_QUANTIZED: what a timer of that period usually is
    encoding: str | None = None  # COMPRESSION_HOLD: the Content-Encoding that held
    notes: tuple[str, ...] = field(default=())  # secondary findings (large frames, compression that streams...)
    held_bytes: int | None = None  # WHOLE_RESPONSE: the longest stream held to its end
    at_least: bool = False  # WHOLE_RESPONSE: that stream was shorter than the series' bound: it holds at least it
    shape: Kind | None = None  # COMPRESSION_HOLD: what the compressed answer looked like
    wants: tuple[str, ...] = ()  # the runs (series names) that would tell; empty when the verdict stands
    end: StreamEnd | None = None  # CUT: the cut stream's end, its timing (report.py names its limit and fix)
    # An intermittent hold (intermittent()): of the clearest run's repeats, (held, measured), or of the series'
    # streams when no run's own share tells; None: steady or none.
    held_runs: tuple[int, int] | None = None

    @property
    def held(self) -> bool:
        """The path holds the stream (a cause that is not STREAMS, CUT or UNSURE: a cut is its own finding)."""
        return self.cause not in (Cause.STREAMS, Cause.CUT, Cause.UNSURE)

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause.value,
            "held": self.held,
            "summary": self.summary,
            "size_bytes": self.size_bytes,
            "period_ms": None if self.period_ms is None else round(self.period_ms, 1),
            "timer": self.timer,
            "encoding": self.encoding,
            "held_bytes": self.held_bytes,
            "at_least": self.at_least,
            "intermittent": None
            if self.held_runs is None
            else {"held_runs": self.held_runs[0], "runs": self.held_runs[1]},
            "evidence": list(self.evidence),
            "notes": list(self.notes),
        }


def _same(a: float, b: float, floor: float = 0.0) -> bool:
    return abs(a - b) <= max(floor, SAME_SHARE * max(abs(a), abs(b)))


def _cv(values: Sequence[float]) -> float | None:
    return pstdev(values) / mean(values) if len(values) >= 2 and mean(values) > 0 else None


def timer_kind(period_ms: float) -> str:
    """What a flush timer of this period usually is (docs/findings.md, seed 003), named by mechanism, never by a
    proxy: a path that did not say which proxy it is gets no proxy's name."""
    if period_ms < 25:
        return "a short flush timer"
    if period_ms < 80:
        return "Nagle's algorithm with delayed ACKs (~40 ms)"
    if period_ms < 150:
        return "a ~100 ms flush interval"
    if period_ms <= 300:
        return "a 200-250 ms flush timer (MSG_MORE / TCP_CORK)"
    return "a long flush timer"


def _describe(run: RunFigures) -> str:
    fpr = f"{run.fpr:.2f}" if run.fpr is not None else "-"
    what = f"{run.name}: {run.frames} frames ({size(run.nbytes)}) in {len(run.bursts)} arrivals (fpr {fpr}"
    if run.interval_ms is not None:
        sized = f"{run.frame_bytes} B" if run.frame_bytes is not None else "own-size"
        what += f"; {sized} frames every {run.interval_ms:g} ms"
    late = run.holds_ms()
    if late:
        what += f"; first held {max(late[0], 0):.0f} ms, longest {max(max(late), 0):.0f} ms"
    if run.accept_encoding is not None:
        what += f"; Accept-Encoding {run.accept_encoding!r} -> {run.content_encoding}"
    return what + f"): {run.seen().label()}"


# --- repeats of a run: the one a loaded host hit least, and a hold that comes and goes ---------------------------

T = TypeVar("T")

CLEAR_HELD = 2  # a hold in at least this many repeats of one run ...
CLEAR_SHARE = 0.5  # ... and in at least this share of them is the path's (intermittent); one alone is a busy host's
# ... or as many streams, in as large a share, of the whole series (a path that holds every other stream, whichever
# run it falls on), one run held twice at least. A whole response held longer than this is never a busy host's: a
# loaded host delays a stream by tens of ms (a scheduler's stall), while a paced run held whole waited at least its
# span (550 ms for `base`).
HOST_DELAY_MS = 400.0


def _rank(f: RunFigures) -> tuple[bool, int, float]:
    """How little a run was held: uncut first, then its shape nearest streaming, then its longest hold shortest."""
    kind = f.seen().kind
    rank = -1 if kind is Kind.TOO_SHORT else SEVERITY.index(kind)  # SEVERITY: the most held first
    return (f.end is None, rank, -max(f.holds_ms(), default=0.0))


def least_held(runs: Sequence[T], figures: Callable[[T], RunFigures]) -> list[T]:
    """One of each run name, in the order the names first came: of its repeats, the one held least (its shape
    nearest streaming, then its longest hold shortest). A busy host only ever adds delay, never takes a path's hold
    away: a hold the path makes in every repeat is in this one, one the load made is gone from a quiet one. A run
    the path cut, or too short to show a shape, is kept only when no repeat is better."""
    best: dict[str, T] = {}
    for run in runs:
        name = figures(run).name
        if name not in best or _rank(figures(run)) > _rank(figures(best[name])):
            best[name] = run
    return list(best.values())


def most_held(runs: Sequence[T], figures: Callable[[T], RunFigures]) -> list[T]:
    """One of each run name, in the order the names first came: of its repeats, the one held most (uncut and long
    enough to show a shape first, then its shape the most held, then its longest hold longest)."""

    def held(f: RunFigures) -> tuple[bool, int, float]:
        uncut, rank, hold = _rank(f)
        return (uncut and rank >= 0, -rank if rank >= 0 else -len(SEVERITY), -hold)

    best: dict[str, T] = {}
    for run in runs:
        name = figures(run).name
        if name not in best or held(figures(run)) > held(figures(best[name])):
            best[name] = run
    return list(best.values())


def held_whole(run: RunFigures) -> bool:
    """The path held this stream whole: uncut, every frame in one arrival after the last one's write, its first
    frame held longer than any busy host delays a stream (HOST_DELAY_MS). One such repeat is the path's."""
    late = run.holds_ms()
    return run.end is None and run.seen().kind is Kind.WHOLE and bool(late) and late[0] >= HOST_DELAY_MS


def repeat_held(run: RunFigures) -> bool:
    """The path held this stream's frames together: uncut, and its shape whole, bursts, or the first frames held
    (more than a head waiting for its first frame). Every frame alone but late is not counted: that is what a busy
    host makes of a streaming path, stream after stream (a path's steady short timer is still named: least_held)."""
    return run.end is None and run.seen().kind in (Kind.WHOLE, Kind.BURSTS, Kind.FIRST_HELD) and not facts(run).streams


@dataclass(frozen=True, slots=True)
class Share:
    """Of one run name's repeats, how many the path held."""

    name: str
    held: int
    runs: int
    whole: int = 0  # of those, held whole (held_whole): never a busy host's

    @property
    def clear(self) -> bool:
        """Held in a clear share of its repeats, or held whole in one: not one loaded-host outlier."""
        return self.whole > 0 or _clear_share(self.held, self.runs)

    def words(self) -> str:
        return f"{self.name} {self.held} of {self.runs}"


def _clear_share(held: int, runs: int) -> bool:
    return held >= CLEAR_HELD and held >= CLEAR_SHARE * runs


def shares(runs: Sequence[RunFigures]) -> list[Share]:
    """Per run name, in the order the names first came: how many of its repeats were held (and held whole)."""
    held: dict[str, int] = {}
    whole: dict[str, int] = {}
    count: dict[str, int] = {}
    for run in runs:
        held[run.name] = held.get(run.name, 0) + repeat_held(run)
        whole[run.name] = whole.get(run.name, 0) + held_whole(run)
        count[run.name] = count.get(run.name, 0) + 1
    return [Share(name, held[name], count[name], whole[name]) for name in count]


def disagree(runs: Sequence[RunFigures]) -> bool:
    """Some run's repeats disagree: held in some, not in others (another repeat tells noise from a share)."""
    return any(0 < s.held < s.runs for s in shares(runs))


def intermittent(runs: Sequence[RunFigures], checks: Sequence[Check] = ()) -> Verdict | None:
    """The verdict over repeats of the series (several figures per run name) when the path held a stream in a
    clear share of some run's repeats, else None (the least-held runs tell). A busy host only delays, never
    un-holds a stream: a held repeat is evidence, a streaming one is not proof, and a user feels the hold whenever
    it happens. The cause is classify()'s over each run's most-held repeat; when those runs name no rule, over
    those of the runs held at least once (with base), then the clearest run's held repeat alone (as base). Its
    summary says the share ("holds in 2 of 3 runs (base)"); it is held (exit 16) like a steady hold, with the same
    fix. When none of these names a rule: UNSURE naming the share. A run held in every repeat is a steady hold:
    the least-held runs tell, as before."""
    counted = shares(runs)
    held = sum(s.held for s in counted)
    total = sum(s.runs for s in counted)
    # the series' streams, whichever runs they fell on (one run held twice at least: not one loaded pass)
    across = _clear_share(held, total) and any(s.held >= CLEAR_HELD for s in counted)
    clear = [s for s in counted if (s.clear or (across and s.held)) and s.held < s.runs]  # in every repeat: steady
    if not clear:
        return None
    clearest = max(clear, key=lambda s: s.held / s.runs)  # the first of the clearest, in the series' order
    if _clear_share(clearest.held, clearest.runs):
        share = f"holds in {clearest.held} of {clearest.runs} runs ({clearest.name})"
        held_runs = (clearest.held, clearest.runs)
    else:  # no run's own share tells: the series' does, or a stream held whole
        whole = sum(s.whole for s in counted)
        how = f"{whole} of them whole, " if whole else ""
        names = ", ".join(s.words() for s in counted if s.held)
        share = f"holds in {held} of {total} streams ({how}{names})"
        held_runs = (held, total)
    per_run = f"held repeats per run: {', '.join(s.words() for s in counted)} ({held} of {total} streams)"
    note = (
        "intermittent: the path held some repeats and not others; a busy host only delays a stream, never "
        "un-holds one, so each held repeat is the path's"
    )
    heaviest = most_held(runs, lambda r: r)
    found = classify(heaviest, checks)
    ever = {s.name for s in counted if s.held}
    if not found.held and series.BASE in ever and len(ever) < len(counted):  # a run never held is no proof
        found = classify([r for r in heaviest if r.name in ever], checks)
    if not found.held:
        alone = next(r for r in heaviest if r.name == clearest.name)
        found = classify([replace(alone, name=series.BASE)])
        if not found.held and alone.seen().kind is Kind.WHOLE:  # held to its end: at least the longest one's bytes
            longest = max((r for r in heaviest if r.seen().kind is Kind.WHOLE), key=lambda r: r.nbytes)
            found = _whole(longest, found.evidence)
    evidence = (*(_describe(r) for r in heaviest), per_run)  # every run, whichever of them named the cause
    if not found.held:
        return _unsure(f"{share}, but its held runs name no one rule", evidence, notes=(note,))
    return replace(
        found,
        summary=f"intermittent: {share}; {found.summary}",
        evidence=evidence,
        notes=(*found.notes, note),
        wants=(),
        held_runs=held_runs,
    )


# --- what each run says about the rule ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Facts:
    """One run, read as evidence about a rule that holds frames and releases them."""

    run: RunFigures
    seen: Seen
    streams: bool  # every frame passed alone and on time (the first may have waited for its next: the head)
    released: bool  # frames released before the stream's end (bursts, or every frame alone but late)
    release_bytes: float = 0.0  # mean bytes per release (the first and the end's left out when others remain)
    release_hold_ms: float = 0.0  # median hold of those releases
    grouped: bool = False  # those releases carried more than one frame
    end_bytes: int = 0  # what was held to the stream's end
    end_hold_ms: float = 0.0  # ... and how long its oldest frame waited

    @property
    def frame_bytes(self) -> float:
        return self.run.mean_frame_bytes


def facts(run: RunFigures) -> Facts:
    s = run.seen()
    late = run.holds_ms()
    streams = s.kind is Kind.STREAMS or (s.kind is Kind.FIRST_HELD and s.first_frames <= HEAD_FRAMES)
    if s.kind is Kind.WHOLE:
        return Facts(run, s, False, False, end_bytes=run.nbytes, end_hold_ms=late[0] if late else 0.0)
    if s.kind not in (Kind.BURSTS, Kind.LATE) or len(run.bursts) < 2:
        return Facts(run, s, streams, False)
    releases = list(range(len(run.bursts) - 1))  # the last arrival is the end's
    inner = releases[1:] if len(releases) >= 2 else releases  # the first may count the head, or start with it
    return Facts(
        run,
        s,
        False,
        True,
        release_bytes=sum(run.burst_bytes[i] for i in inner) / len(inner),
        release_hold_ms=median(late[i] for i in inner) if late else 0.0,
        grouped=median(run.bursts[i] for i in inner) > 1,
        end_bytes=run.burst_bytes[-1],
        end_hold_ms=late[-1] if late else 0.0,
    )


def _margin(value: float, floor: float = 0.0) -> float:
    return value + max(floor, SAME_SHARE * value)


def timer_misfit(period: float, runs: Sequence[Facts]) -> str | None:
    """Why a timer of `period` ms cannot be the rule (None: every run fits it)."""
    for f in runs:
        name = f.run.name
        if f.streams:
            return f"{name} streamed, which a {period:.0f} ms timer would have held"
        if f.released and not _same(f.release_hold_ms, period, SAME_HOLD_MS):
            return f"{name} was held {f.release_hold_ms:.0f} ms per release, not {period:.0f}"
        if f.end_hold_ms > _margin(period, SAME_HOLD_MS):
            return f"{name} held frames {f.end_hold_ms:.0f} ms without a release"
    return None


def bytes_misfit(threshold: float, runs: Sequence[Facts]) -> str | None:
    """Why a threshold of `threshold` bytes cannot be the rule (None: every run fits it)."""
    for f in runs:
        name = f.run.name
        if f.streams and f.frame_bytes < (1 - SAME_SHARE) * threshold:
            return f"{name}'s {f.frame_bytes:.0f} B frames streamed, which a {size(threshold)} threshold would hold"
        if f.released and not f.grouped:
            return f"{name} was held one frame at a time, which no byte threshold does"
        if f.released and not _same(f.release_bytes, threshold):
            return f"{name} released {size(f.release_bytes)} at a time, not {size(threshold)}"
        if f.end_bytes > _margin(threshold):
            return f"{name} held {size(f.end_bytes)} without a release"
    return None


def both_misfit(period: float, threshold: float, runs: Sequence[Facts]) -> str | None:
    """A timer of `period` ms with a size that releases sooner (`threshold` bytes): whichever comes first."""
    for f in runs:
        name = f.run.name
        if f.streams and f.frame_bytes < (1 - SAME_SHARE) * threshold:
            return f"{name} streamed"
        if f.released and not _same(f.release_hold_ms, period, SAME_HOLD_MS):
            by_size = f.release_hold_ms < period and _same(f.release_bytes, threshold)
            if not by_size:
                return f"{name} was held {f.release_hold_ms:.0f} ms per release of {size(f.release_bytes)}"
        if f.end_hold_ms > _margin(period, SAME_HOLD_MS) or f.end_bytes > _margin(threshold):
            return f"{name} held {size(f.end_bytes)} for {f.end_hold_ms:.0f} ms without a release"
    return None


def _timer_candidate(released: Sequence[Facts]) -> float:
    """The hold of the runs held longest (holds within SAME_SHARE of the longest): a timer's, when there is one."""
    longest = max(f.release_hold_ms for f in released)
    return median(f.release_hold_ms for f in released if _same(f.release_hold_ms, longest, SAME_HOLD_MS))


# --- the series -----------------------------------------------------------------------------------------------------


# A check that names a cause before the rules below (e.g. a stream the path cut short): the runs in, a Verdict that
# stands (or one with `wants`), or None to leave them to the rules. Another diagnose module defines one; the CLI
# passes it in, so classify.py imports nothing of it.
Check = Callable[[Sequence[RunFigures], tuple[str, ...]], "Verdict | None"]


def classify(runs: Sequence[RunFigures], checks: Sequence[Check] = ()) -> Verdict:
    """The verdict over a diagnosis's runs (series.py's names; only `base` is required). Each of `checks` is asked
    first, in order, with the runs and their evidence lines; the first Verdict it returns is the answer."""
    by = {r.name: r for r in runs}
    if series.BASE not in by:
        raise ValueError("classify() needs the `base` run")
    evidence = tuple(_describe(r) for r in runs)
    for check in checks:
        found = check(runs, evidence)
        if found is not None:
            return found
    empty = [r for r in runs if r.frames <= r.other_frames]  # every frame kept was one without output
    if empty:
        said = ", ".join(f"{r.name}: {r.other_frames}" for r in empty)
        return _unsure(
            f"no content frame came ({said} frames, every one without content: keep-alives, control events or the "
            "end marker); a path that passes no token cannot be judged on its tokens",
            evidence,
        )
    identity = [by[n] for n in series.IDENTITY if n in by]
    verdict = _identity_verdict(identity, evidence) if by[series.BASE].paced else _unpaced(by[series.BASE], evidence)
    compressed = [by[n] for n in series.COMPRESSED if n in by]
    return _with_compression(verdict, compressed, evidence) if compressed else verdict


def _wanted(by_name: set[str], *names: str) -> tuple[str, ...]:
    return tuple(n for n in names if n not in by_name)


def _unsure(why: str, evidence: tuple[str, ...], wants: tuple[str, ...] = (), notes: tuple[str, ...] = ()) -> Verdict:
    return Verdict(Cause.UNSURE, f"unsure: {why}", evidence, notes=notes, wants=wants)


def _identity_verdict(runs: list[RunFigures], ev: tuple[str, ...]) -> Verdict:
    measured = {r.name for r in runs}
    all_facts = [facts(r) for r in runs]
    short = [f.run.name for f in all_facts if f.seen.kind is Kind.TOO_SHORT]
    if short:
        return _unsure(f"too few frames to tell ({', '.join(short)})", ev)
    if all(f.streams for f in all_facts):
        held_back = [f for f in all_facts if f.seen.kind is Kind.FIRST_HELD]
        # The first frame held with its next in one run is the head's bytes counted to a size; in every run, at
        # every size and interval, it is the first event held back.
        return _first_hold(held_back, all_facts, ev) if len(held_back) == len(all_facts) else _streams(runs[0], ev)
    firsts = [f for f in all_facts if f.seen.kind is Kind.FIRST_HELD and not f.streams]
    released = [f for f in all_facts if f.released]
    if firsts and not released:
        return _first_hold(firsts, all_facts, ev)
    if not released:
        if all(f.seen.kind is Kind.WHOLE for f in all_facts):
            wants = _wanted(measured, series.LONG)
            if wants:
                return _unsure("every stream so far was held to its end; a longer one tells how much", ev, wants)
            return _whole(max(runs, key=lambda r: r.nbytes), ev)
        wants = _wanted(measured, series.BASE_LONG)
        if wants:
            return _unsure("small frames were held to the end, larger ones passed; a longer stream tells", ev, wants)
        return _bounded_threshold(all_facts, ev)
    return _rule(released, all_facts, measured, ev)


def _streams(base: RunFigures, ev: tuple[str, ...]) -> Verdict:
    notes: tuple[str, ...] = ()
    ttft, head = base.stub_ttft_ms, base.head_at_ms
    if ttft is not None and head is not None and head >= max(HOLD_MS, HEAD_HELD_SHARE * ttft):
        notes = (
            f"the response head waited for the first frame (it came at {head:.0f} ms; the stub sent it at once "
            f"and its first frame at {ttft:g} ms): no token came later for it, but a client that times out "
            "waiting for the head now waits for the model's first token",
        )
    return Verdict(Cause.STREAMS, "streams: every frame in its own read, on time", ev, notes=notes)


def _first_hold(firsts: list[Facts], runs: list[Facts], ev: tuple[str, ...]) -> Verdict:
    """The first arrival held with the frames after it, then every frame on time: its size (and how late)."""
    nbytes = median(f.seen.first_bytes or 0 for f in firsts)
    late = median(f.run.holds_ms()[0] for f in firsts)
    frames = round(median(f.seen.first_frames for f in firsts))
    longer = [f.run.name for f in runs if f.seen.kind is Kind.WHOLE and f.end_bytes > _margin(nbytes)]
    longer += [f.run.name for f in runs if f.streams and f not in firsts and f.frame_bytes < nbytes / 2]
    if longer:
        return _unsure(
            f"the first ~{size(nbytes)} were held back in {', '.join(f.run.name for f in firsts)}, but "
            f"{', '.join(longer)} did not (held more to its end, or streamed smaller frames)",
            ev,
        )
    return Verdict(
        Cause.FIRST_HOLD,
        f"holds the first ~{size(nbytes)} ({frames} frames; the first token {late:+.0f} ms), then streams",
        ev,
        size_bytes=round(nbytes),
        period_ms=late,
    )


def _whole(longest: RunFigures, ev: tuple[str, ...]) -> Verdict:
    at_least = longest.nbytes < series.MAX_STREAM_BYTES * (1 - SAME_SHARE)
    what = (
        f"holds at least {size(longest.nbytes)}"
        if at_least
        else f"holds the whole response, at least {size(longest.nbytes)}"
    )
    return Verdict(
        Cause.WHOLE_RESPONSE,
        f"{what}: every frame of the longest stream tried ({longest.frames} frames over "
        f"{longest.span_ms / 1000:.1f} s) came at its end",
        ev,
        held_bytes=longest.nbytes,
        at_least=at_least,
    )


def _bounded_threshold(runs: list[Facts], ev: tuple[str, ...]) -> Verdict:
    """Small frames held to the end, larger ones passed one by one: a threshold between the two, named by bounds."""
    held = max(f.end_bytes for f in runs if f.seen.kind is Kind.WHOLE)
    passed = min(f.frame_bytes for f in runs if f.streams)
    if held >= passed:
        return _unsure(f"{size(held)} of small frames were held to the end, yet {size(passed)} frames passed alone", ev)
    return Verdict(
        Cause.BYTE_QUANTIZED,
        f"holds frames until more than {size(held)} are queued (frames of {size(passed)} pass at once)",
        ev,
        size_bytes=round(passed),
    )


def _rule(released: list[Facts], runs: list[Facts], measured: set[str], ev: tuple[str, ...]) -> Verdict:
    period = _timer_candidate(released)
    grouped = [f for f in released if f.grouped]
    threshold = median(f.release_bytes for f in grouped) if grouped else None
    no_timer = timer_misfit(period, runs)
    no_bytes = bytes_misfit(threshold, runs) if threshold is not None else "no release carried more than one frame"
    seen = "; ".join(
        f"{f.run.name}: {size(f.release_bytes)} per release, held {f.release_hold_ms:.0f} ms" for f in released
    )
    if no_timer is None and no_bytes is not None:
        return _time(period, runs, (*ev, seen))
    if no_bytes is None and no_timer is not None and threshold is not None:
        return _bytes(threshold, runs, (*ev, seen))
    if no_timer is None and threshold is not None:  # both fit: another rate tells them apart
        wants = _wanted(measured, series.LARGER, series.BASE_LONG)
        why = f"a {period:.0f} ms timer and a {size(threshold)} threshold fit these rates alike ({seen})"
        return _unsure(why, ev, wants)
    sooner = [f for f in released if f.release_hold_ms < (1 - SAME_SHARE) * period and f.grouped]
    if sooner:
        cap = median(f.release_bytes for f in sooner)
        if both_misfit(period, cap, runs) is None:
            verdict = _time(period, runs, (*ev, seen))
            note = f"frames were also released once ~{size(cap)} were queued (a size limit, e.g. one full segment)"
            return replace(verdict, size_bytes=round(cap), notes=(*verdict.notes, note))
    wants = _wanted(measured, series.LONG) if not any(f.run.name == series.LONG for f in runs) else ()
    return _unsure(f"no one rule fits: not a timer ({no_timer}); not a size ({no_bytes})", ev, wants)


def _time(period: float, runs: list[Facts], ev: tuple[str, ...]) -> Verdict:
    notes = tuple(
        f"{f.run.frame_bytes:.0f} B frames went through at once: a size also releases it (over a real link a full "
        "segment, 1,448 B, does)"
        for f in runs
        if f.streams
    )
    return Verdict(
        Cause.TIME_QUANTIZED,
        f"holds frames on a timer: bursts every ~{period:.0f} ms, whatever the interval ({timer_kind(period)})",
        ev,
        period_ms=period,
        timer=timer_kind(period),
        notes=notes[:1],
    )


def _bytes(threshold: float, runs: list[Facts], ev: tuple[str, ...]) -> Verdict:
    passed = [f for f in runs if f.streams]
    notes = (
        (f"{passed[0].frame_bytes:.0f} B frames went through one by one: the threshold is below that",)
        if passed
        else ()
    )
    return Verdict(
        Cause.BYTE_QUANTIZED,
        f"holds frames until ~{size(threshold)} are queued, then sends them together, whatever the interval",
        ev,
        size_bytes=round(threshold),
        notes=notes,
    )


# --- without a paced stub -------------------------------------------------------------------------------------------


def _unpaced(base: RunFigures, ev: tuple[str, ...]) -> Verdict:
    s = base.seen()
    if s.kind is Kind.TOO_SHORT:
        return _unsure(f"too few frames to tell ({base.name}: {base.frames})", ev)
    if s.kind is Kind.STREAMS:
        notes: tuple[str, ...] = ()
        head = base.head_at_ms
        head_with_first = head is not None and base.ttft_ms is not None and base.ttft_ms - head < 1.0
        if head_with_first and base.ttft_ms is not None and base.ttft_ms >= HOLD_MS:
            notes = (
                "the head came with the first frame (the origin or the path held it: a paced stub behind the "
                "path would tell which)",
            )
        return Verdict(Cause.STREAMS, "streams: every frame in its own read", ev, notes=notes)
    if s.kind is Kind.WHOLE:
        return Verdict(
            Cause.WHOLE_RESPONSE,
            f"holds at least {size(base.nbytes)}: the whole answer ({base.frames} frames) came in one read at its "
            "end; a longer answer, or a tokenpath stub behind the path (--stub-url), tells how much it holds",
            ev,
            held_bytes=base.nbytes,
            at_least=True,
        )
    if s.kind is Kind.FIRST_HELD:
        return Verdict(
            Cause.FIRST_HOLD,
            f"holds the first ~{size(s.first_bytes or 0)} ({s.first_frames} frames in the first read), then streams",
            ev,
            size_bytes=s.first_bytes,
        )
    return _unpaced_bursts(base, ev)


def _inner(values: Sequence[float]) -> Sequence[float]:
    """The releases a rule made on its own: not the last (the end's) and, when one other remains, not the first."""
    if len(values) >= 3:
        return values[1:-1]
    return values[:-1] if len(values) > 1 else values


def _unpaced_bursts(base: RunFigures, ev: tuple[str, ...]) -> Verdict:
    gaps = [b - a for a, b in zip(base.arrivals_ms, base.arrivals_ms[1:], strict=False)]
    inner_gaps = list(_inner(gaps))
    inner_bytes = [float(b) for b in _inner(base.burst_bytes)]
    gaps_cv, bytes_cv = _cv(inner_gaps), _cv(inner_bytes)
    if gaps_cv is None or bytes_cv is None:
        return _unsure("bursts, but too few of them to tell a timer from a size", ev)
    period, nbytes = median(inner_gaps), median(inner_bytes)
    seen = f"gaps between bursts vary {gaps_cv:.2f}, bytes per burst {bytes_cv:.2f} (coefficient of variation)"
    if gaps_cv <= REGULAR_CV and bytes_cv >= IRREGULAR_CV:
        return Verdict(
            Cause.TIME_QUANTIZED,
            f"holds frames on a timer: bursts every ~{period:.0f} ms ({timer_kind(period)})",
            (*ev, seen),
            period_ms=period,
            timer=timer_kind(period),
        )
    if bytes_cv <= REGULAR_CV and gaps_cv >= IRREGULAR_CV:
        return Verdict(
            Cause.BYTE_QUANTIZED,
            f"holds frames until ~{size(nbytes)} are queued",
            (*ev, seen),
            size_bytes=round(nbytes),
        )
    if gaps_cv <= REGULAR_CV and bytes_cv <= REGULAR_CV:
        why = (
            f"bursts of ~{size(nbytes)} every ~{period:.0f} ms, both regular ({seen}): at one pacing a timer and a "
            "byte threshold look alike"
        )
    else:
        why = f"bursts, but neither their timing nor their size is regular ({seen})"
    return _unsure(f"{why}; a tokenpath stub behind the path (--stub-url) varies the pacing and tells", ev)


# --- compression ------------------------------------------------------------------------------------------------


def _with_compression(identity: Verdict, runs: list[RunFigures], ev: tuple[str, ...]) -> Verdict:
    """The compressing client's runs: compression without a flush where identity streams. A compressed answer held
    to its end grows (browser_long, then browser_large) until it shows its rule or reaches the bound."""
    measured = {r.name for r in runs}
    last = runs[-1]  # series.COMPRESSED order: the longest measured
    shown = last.seen()
    enc = last.content_encoding
    streamlike = shown.kind is Kind.STREAMS or (shown.kind is Kind.FIRST_HELD and shown.first_frames <= HEAD_FRAMES)
    if shown.kind is Kind.TOO_SHORT:
        return _unsure(f"the {last.name} run has too few frames ({last.frames})", ev, notes=identity.notes)
    if identity.cause is not Cause.STREAMS:
        if identity.cause is Cause.UNSURE:
            return identity
        note = (
            f"compressed ({enc}) answers are held too ({shown.label()})"
            if last.compressed
            else "the path did not compress for a compressing client's Accept-Encoding"
        )
        return replace(identity, notes=(*identity.notes, note))
    if streamlike:
        note = (
            f"compressed ({enc}) and flushed per event: streams"
            if last.compressed
            else "the path did not compress for a compressing client's Accept-Encoding"
        )
        return replace(identity, notes=(*identity.notes, note))
    paced = last.paced
    if shown.kind is Kind.WHOLE and paced:
        wants = _wanted(measured, series.BROWSER_LONG, series.BROWSER_LARGE)[:1]
        if wants:
            why = f"the {last.name} run ({enc}) was held to its end; a longer one tells how much"
            return _unsure(why, ev, wants, identity.notes)
    if not last.compressed:
        return _unsure(
            f"identity streams, but a client that accepts compression was held ({shown.label()}) without "
            "any compression",
            ev,
            notes=identity.notes,
        )
    return _compression(identity, last, shown, ev)


def _compression(identity: Verdict, run: RunFigures, shown: Seen, ev: tuple[str, ...]) -> Verdict:
    enc = run.content_encoding
    if shown.kind is Kind.WHOLE:
        at_least = not run.paced or run.nbytes < series.MAX_STREAM_BYTES * (1 - SAME_SHARE)
        how = f"at least {size(run.nbytes)}" if at_least else f"the whole response, at least {size(run.nbytes)}"
        what, nbytes = f"without a flush per event: holds {how} to its end", None
    elif shown.kind is Kind.FIRST_HELD:
        first = shown.first_bytes or 0
        late = run.holds_ms()[0] if run.paced else None
        when = f"; the first token {late:+.0f} ms" if late is not None else ""
        what = f"only once ~{size(first)} have come: holds the first {shown.first_frames} frames{when}, then streams"
        nbytes, at_least = first, False
    else:
        released = facts(run)
        nbytes, at_least = round(released.release_bytes) if released.released else None, False
        what = f"and sends it in bursts of ~{size(nbytes)}" if nbytes else f"and holds it ({shown.label()})"
    return Verdict(
        Cause.COMPRESSION_HOLD,
        f"compresses ({enc}) {what}; without Accept-Encoding it streams",
        ev,
        size_bytes=nbytes,
        encoding=enc,
        notes=identity.notes,
        held_bytes=run.nbytes if shown.kind is Kind.WHOLE else None,
        at_least=at_least,
        shape=shown.kind,
    )
