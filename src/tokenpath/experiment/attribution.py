"""Whether a path streams because of the path or because the origin asked it to (issue 37 §3), pure.

Every origin behaviour a path can act on is a condition (stub/presets.py: the HTTP/1.0 framing, the headers), so a
matrix that measured one path under several origins can say, for each row, what made the verdict: the same path
and the same client-side axes with a plain origin (the stub: close-delimited to HTTP/1.0, no header a path acts on)
is the baseline, and origins/credit.py's rule (diagnose applies the same) names the behaviours. The rows carry it
(MatrixRow.attribution: the credit in words, and the plain row it was judged against), so every rendering reads it
from the results.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from tokenpath.axes import PRESET_PREFIX, STUB, Condition, origin_words, replay_file
from tokenpath.origins.credit import Credit, credit, streamed
from tokenpath.results.model import Attribution, MatrixRow
from tokenpath.stub.presets import PRESETS, OriginBehaviour, relevant_headers
from tokenpath.stub.replay import load_cached as load_recording


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


def attribute(rows: Sequence[MatrixRow]) -> list[MatrixRow]:
    """The rows, each whose verdict its origin made (or could not change) with its `attribution` set (the others
    unchanged, an attribution they carried cleared: it is decided here, over these rows)."""
    by_key: dict[tuple[str, str, Condition], list[tuple[MatrixRow, frozenset[str]]]] = {}
    for row in _judged(rows):
        by_key.setdefault(_key(row), []).append((row, frozenset(behaviour(row.condition).parts())))
    out = []
    for row in rows:
        found = _credit(row, by_key.get(_key(row), [])) if _is_judged(row) else None
        out.append(replace(row, attribution=found))
    return out


def origin_effects(rows: Sequence[MatrixRow]) -> list[tuple[MatrixRow, str]]:
    """Each row whose verdict its origin made (or could not change), with the words that say so."""
    return [(row, got.attribution.words) for row, got in zip(rows, attribute(rows), strict=True) if got.attribution]


def describe(row: MatrixRow, effect: str) -> str:
    return f"{_path(row)} ({_origin(row.condition)}): {effect}"


def _credit(row: MatrixRow, measured: list[tuple[MatrixRow, frozenset[str]]]) -> Attribution | None:
    plain = [r for r, parts in measured if not parts]
    if not plain:
        return None  # no plain origin through this path: nothing to judge against
    seen = [(parts, _streams(r)) for r, parts in measured]
    parts = frozenset(behaviour(row.condition).parts())
    found: Credit | None = credit(parts, _streams(row), _streams(plain[0]), seen)
    if found is None:
        return None
    baseline = f"{_path(plain[0])} ({plain[0].condition.label})"
    return Attribution(found.streams, tuple(sorted(found.credited)), baseline, found.words, _origin(row.condition))


def _path(row: MatrixRow) -> str:
    return row.proxy if row.variant == "stock" else f"{row.proxy}:{row.variant}"


def _origin(cond: Condition) -> str:
    return origin_words(cond.origin) if cond.origin != STUB else f"stub: {behaviour(cond).describe()}"


def _judged(rows: Iterable[MatrixRow]) -> list[MatrixRow]:
    return [r for r in rows if _is_judged(r)]


def _is_judged(row: MatrixRow) -> bool:
    return row.fpr_median is not None and row.proxy != "direct"


def _streams(row: MatrixRow) -> bool:
    return row.fpr_median is not None and streamed(row.fpr_median)


def _key(row: MatrixRow) -> tuple[str, str, Condition]:
    """The rows of one path under different origins share it: the condition with its origin made plain (a replay's
    pacing is its recording's, so the stub's interval and frame size are set aside too)."""
    plain = replace(row.condition, origin=STUB, http10_framing="close", stub_headers=())
    return row.proxy, row.variant, replace(plain, interval_ms=0.0, frame_bytes=0)
