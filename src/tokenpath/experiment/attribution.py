"""Whether a path streams because of the path or because the origin asked it to (issue 37 §3), pure.

Every origin behaviour a path can act on is a condition (stub/presets.py: the HTTP/1.0 framing, the headers), so a
matrix that measured one path under several origins can say, for each row, what made the verdict: the same path
and the same client-side axes with a plain origin (the stub: close-delimited to HTTP/1.0, no header a path acts on)
is the baseline. A row that streams where its baseline is held streams because of what its origin did; of the
behaviours it did, those that streamed the path alone in another row are named (the smallest such sets), else all.
A row held in spite of its origin's behaviours says so (the path ignores them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from tokenpath.axes import PRESET_PREFIX, STUB, Condition, origin_words, replay_file
from tokenpath.results.model import MatrixRow
from tokenpath.stub.presets import PRESETS, OriginBehaviour, relevant_headers
from tokenpath.stub.replay import load_cached as load_recording

Seen = list[tuple[frozenset[str], bool]]  # per origin measured: its behaviours, and whether the path streamed
# Streamed or held by frames per read alone: a verdict on the stream's shape, not on its milliseconds (a path that
# streams may still add a millisecond over the floor; one held brings 2 frames or more per read).
HELD_FPR = 2.0


def behaviour(cond: Condition) -> OriginBehaviour:
    """What the origin of `cond` did that a path acts on: a recording's, a preset's (with the condition's declared
    headers over it), or the plain stub's own framing and declared headers."""
    replay = replay_file(cond)
    if replay is not None:
        own = load_recording(replay).behaviour
    elif cond.origin.startswith(PRESET_PREFIX):
        own = PRESETS[cond.origin.removeprefix(PRESET_PREFIX)]
    else:
        own = OriginBehaviour(cond.http10_framing)
    declared = {k.lower() for k, _ in cond.stub_headers}
    headers = [(k, v) for k, v in own.headers if k.lower() not in declared] + list(cond.stub_headers)
    return OriginBehaviour(own.http10_framing, relevant_headers(headers))


def origin_effects(rows: Sequence[MatrixRow]) -> list[tuple[MatrixRow, str]]:
    """Each row whose verdict its origin made (or could not change), with the words that say so."""
    seen: dict[tuple[str, str, Condition], Seen] = {}
    for row in _judged(rows):
        parts = frozenset(behaviour(row.condition).parts())
        seen.setdefault(_key(row), []).append((parts, _streams(row)))
    out = []
    for row in _judged(rows):
        effect = _effect(frozenset(behaviour(row.condition).parts()), _streams(row), seen[_key(row)])
        if effect:
            out.append((row, effect))
    return out


def describe(row: MatrixRow, effect: str) -> str:
    path = row.proxy if row.variant == "stock" else f"{row.proxy}:{row.variant}"
    cond = row.condition
    origin = origin_words(cond.origin) if cond.origin != STUB else f"stub: {behaviour(cond).describe()}"
    return f"{path} ({origin}): {effect}"


def _judged(rows: Iterable[MatrixRow]) -> list[MatrixRow]:
    return [r for r in rows if r.fpr_median is not None and r.proxy != "direct"]


def _streams(row: MatrixRow) -> bool:
    return row.fpr_median is not None and row.fpr_median < HELD_FPR


def _key(row: MatrixRow) -> tuple[str, str, Condition]:
    """The rows of one path under different origins share it: the condition with its origin made plain (a replay's
    pacing is its recording's, so the stub's interval and frame size are set aside too)."""
    plain = replace(row.condition, origin=STUB, http10_framing="close", stub_headers=())
    return row.proxy, row.variant, replace(plain, interval_ms=0.0, frame_bytes=0)


def _effect(parts: frozenset[str], streamed: bool, seen: Seen) -> str | None:
    baseline = [ok for p, ok in seen if not p]
    if not parts or not baseline:
        return None
    if baseline[0]:
        return None  # it streams a plain origin too: the path's doing, whatever the origin sends
    if not streamed:
        return f"held although the origin sends {_words(parts)}: the path ignores it"
    causes = [p for p, ok in seen if ok and p and p <= parts]
    smallest = [p for p in causes if not any(q < p for q in causes)]
    named = frozenset(set().union(*smallest)) if smallest else parts
    return f"streams because the origin sends {_words(named)} (held with a plain origin)"


def _words(parts: frozenset[str]) -> str:
    return " and ".join(sorted(parts))
