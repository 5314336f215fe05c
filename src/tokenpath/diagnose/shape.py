"""The shape of one stream as its arrivals show it, in one classifier for every reader: the matrix's "seen as"
(report/tables.py, experiment/rows.py) and each run of a diagnosis (classify.py). Pure: arrivals (and, when known,
each frame's write) in, a Seen out.

| kind       | with write times                                              | without them (counts only)       |
|------------|---------------------------------------------------------------|----------------------------------|
| too_short  | fewer than MIN_FRAMES frames                                  | the same                         |
| whole      | nothing arrived before the last frame was written              | one arrival                      |
| first_held | the first arrival held (>= HOLD_MS late) with the frames after | >= FIRST_BURST frames in the     |
|            | it, every later one on time and alone (fpr <= STREAM_FPR)      | first arrival, the rest alone    |
| streams    | fpr <= STREAM_FPR, nothing held                                | fpr <= STREAM_FPR                |
| late       | every frame alone, but later ones >= HOLD_MS late              | (needs write times)              |
| bursts     | anything else: frames held and released together               | the same                         |

A first frame that came late but alone is a hiccup (a busy client or host), not a hold: a path that holds the first
event hands over the next one with it. Write times that put a frame's write after its arrival (by more than
CLOCK_SLACK_MS) are not on the arrivals' clock (a stub on another host): the stream is judged without them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import median

STREAM_FPR = 1.25  # frames per read at or below this is the noise floor of a streaming path (certified ~1.00)
HOLD_MS = 20.0  # a frame later than this past its write was held (a streaming path adds ~0.1-3 ms)
FIRST_BURST = 3  # without write times, a first arrival of this many frames and singles after it is a hold-back
MIN_FRAMES = 3  # fewer frames than this cannot show a burst
CLOCK_SLACK_MS = 5.0  # one clock: no frame arrives before its write; a write later than this past it is another clock


class Kind(StrEnum):
    TOO_SHORT = "too_short"
    WHOLE = "whole"
    FIRST_HELD = "first_held"
    STREAMS = "streams"
    LATE = "late"
    BURSTS = "bursts"


@dataclass(frozen=True, slots=True)
class Seen:
    kind: Kind
    frames: int = 0
    first_frames: int = 0  # frames in the first arrival
    first_bytes: int | None = None  # their bytes, when known
    burst: int = 0  # the most common frames per arrival

    def label(self) -> str:
        """In two or three words, for narrow tables."""
        if self.kind is Kind.FIRST_HELD:
            held = size(self.first_bytes) if self.first_bytes is not None else f"{self.first_frames} frames"
            return f"holds the first {held}"
        return {
            Kind.TOO_SHORT: "too short",
            Kind.WHOLE: "buffers all",
            Kind.STREAMS: "streams",
            Kind.LATE: "late",
            Kind.BURSTS: f"bursts of {self.burst}",
        }[self.kind]


def size(nbytes: float) -> str:
    """A byte count as people read one: 1080 B, 16 KiB."""
    return f"{nbytes:.0f} B" if nbytes < 10_000 else f"{nbytes / 1024:.0f} KiB"


def holds(frames: Sequence[int], at_ms: Sequence[float], writes_ms: Sequence[float]) -> tuple[float, ...]:
    """Per arrival: how late its oldest frame came (its arrival - that frame's write). () when the writes do not
    cover every frame (a trace that kept fewer, a path that changed the frames)."""
    if len(writes_ms) < sum(frames):
        return ()
    out, first = [], 0
    for n, t in zip(frames, at_ms, strict=True):
        out.append(t - writes_ms[first])
        first += n
    return tuple(out)


def on_clock(frames: Sequence[int], at_ms: Sequence[float], writes_ms: Sequence[float]) -> bool:
    """Whether the writes can be on the arrivals' clock: no arrival came before the write of the last frame it
    completed (beyond CLOCK_SLACK_MS). True when the writes do not cover every frame (holds() reads none of them)."""
    if len(writes_ms) < sum(frames):
        return True
    last = -1
    for n, t in zip(frames, at_ms, strict=True):
        last += n
        if n and writes_ms[last] > t + CLOCK_SLACK_MS:
            return False
    return True


def seen(
    frames: Sequence[int],
    at_ms: Sequence[float],
    writes_ms: Sequence[float] | None = None,
    nbytes: Sequence[int] | None = None,
) -> Seen:
    """The shape of one stream: `frames` completed by each arrival, `at_ms` when each came, `writes_ms` each
    frame's write on the same clock (None: unknown), `nbytes` each arrival's frame bytes (None: unknown)."""
    total = sum(frames)
    first_bytes = nbytes[0] if nbytes else None
    modal = Counter(frames).most_common(1)[0][0] if frames else 0
    kept = Seen(Kind.TOO_SHORT, total, frames[0] if frames else 0, first_bytes, modal)
    if total < MIN_FRAMES or not frames:
        return kept
    if writes_ms and not on_clock(frames, at_ms, writes_ms):
        writes_ms = None  # another clock's times: any hold read from them is the clocks' difference
    late = holds(frames, at_ms, writes_ms) if writes_ms else ()
    rest = frames[1:]
    rest_fpr = sum(rest) / len(rest) if rest else None
    fpr = total / len(frames)
    if writes_ms and late:
        if at_ms[0] >= writes_ms[-1]:
            return _as(kept, Kind.WHOLE)
        later_held = median(late[1:]) >= HOLD_MS
        first_held = late[0] >= HOLD_MS and frames[0] > 1
        if first_held and not later_held and rest_fpr is not None and rest_fpr <= STREAM_FPR:
            return _as(kept, Kind.FIRST_HELD)
        if fpr <= STREAM_FPR and not first_held:
            return _as(kept, Kind.LATE if later_held else Kind.STREAMS)
        return _as(kept, Kind.BURSTS)
    if len(frames) == 1:
        return _as(kept, Kind.WHOLE)
    if frames[0] >= FIRST_BURST and rest_fpr is not None and rest_fpr <= STREAM_FPR:
        return _as(kept, Kind.FIRST_HELD)
    return _as(kept, Kind.STREAMS if fpr <= STREAM_FPR else Kind.BURSTS)


# Which kind a tie between runs goes to: the one that holds most.
SEVERITY = (Kind.WHOLE, Kind.FIRST_HELD, Kind.BURSTS, Kind.LATE, Kind.STREAMS, Kind.TOO_SHORT)


def _as(base: Seen, kind: Kind) -> Seen:
    return Seen(kind, base.frames, base.first_frames, base.first_bytes, base.burst)


def of_arrivals(
    arrivals: Sequence[tuple[float, int]], writes_ms: Sequence[float], frame_bytes: int | None = None
) -> Seen:
    """A matrix run's shape: its (arrival ms, frames) pairs and its writes (ms, the same origin; empty against a
    real endpoint), frames of `frame_bytes` each when the condition padded them to one size."""
    frames = [n for _, n in arrivals]
    nbytes = [n * frame_bytes for n in frames] if frame_bytes else None
    return seen(frames, [t for t, _ in arrivals], writes_ms or None, nbytes)


def typical(shapes: Sequence[Seen]) -> Seen | None:
    """What several runs of one path show together: the most common kind (ties: the one that holds most), with
    the median of its runs' first hold and burst."""
    if not shapes:
        return None
    counts = Counter(s.kind for s in shapes)
    kind = max(counts, key=lambda k: (counts[k], -SEVERITY.index(k)))
    mine = [s for s in shapes if s.kind is kind]
    firsts = [s.first_bytes for s in mine if s.first_bytes is not None]
    return Seen(
        kind,
        round(median(s.frames for s in mine)),
        round(median(s.first_frames for s in mine)),
        round(median(firsts)) if firsts else None,
        round(median(s.burst for s in mine)),
    )
