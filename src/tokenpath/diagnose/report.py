"""A diagnosis as a result: the verdict, the proxy that answered and its fix, as the --json document and as lines
of text, the verdict first. Pure: built from measured figures and heads, nothing sent.

A diagnosis is a finding, not an error: it ends with its exit code (0 streams, 16 holds, 17 unsure, 19 cut;
errors.py's PathHeld, DiagnosisUnsure and PathCut say so in the README's table) and nothing on stderr but what
went wrong."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tokenpath.diagnose import series
from tokenpath.diagnose.classify import Cause, RunFigures, Verdict, classify
from tokenpath.diagnose.cuts import CutName, name_end
from tokenpath.diagnose.fixes import Fix, Recognised, check_proxy, fix_for, generic_fix, recognise
from tokenpath.diagnose.origin import PLAIN, OriginFinding
from tokenpath.diagnose.shape import Kind, size
from tokenpath.diagnose.upgrade import UpgradeFinding, UpgradeTried, finding
from tokenpath.errors import DiagnosisUnsure, PathCut, PathHeld, UpgradeNotCarried
from tokenpath.hostport import redacted

# 2: first_hold (was first_event_hold), no head_held cause (a note), grown runs, generic_fix; 3: the cut cause, its
# `cut` (limit, value, fix) and each run's `end`; 4: `origin` (what the verdict rests on of the origin's behaviour,
# diagnose/origin.py; null when nothing is known of it); 5: `websocket` (--transport websocket: the upgrade carried
# or not, its fix line, the fallback's cost; null over SSE), each run's `http_version` and `transport` (the trace's);
# 6: the verdict's `intermittent` ({held_runs, runs}: a hold in a clear share of repeats; else null)
SCHEMA_VERSION = 6


@dataclass(frozen=True, slots=True)
class Diagnosis:
    url: str
    paced: bool  # a tokenpath stub behind the path was paced per run
    runs: tuple[RunFigures, ...]
    verdict: Verdict
    recognised: Recognised | None
    fix: Fix | None
    generic: str | None  # what changes the measured rule in any proxy, when no measured line is printed
    notes: tuple[str, ...] = ()  # about the series itself (its client, a run left out, and why)
    cut: CutName | None = None  # CUT: which limit, its value, and the line that lifts it on the proxy recognised
    origin: OriginFinding | None = None  # whether the verdict rests on what the origin does (issue 37)
    upgrade: UpgradeFinding | None = None  # --transport websocket: whether the path carries the upgrade (issue 38)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "url": self.url,
            "paced": self.paced,
            "bound": {"stream_bytes": series.MAX_STREAM_BYTES, "stream_ms": series.MAX_STREAM_MS},
            "verdict": self.verdict.to_json(),
            "proxy": None if self.recognised is None else {"name": self.recognised.proxy, "by": self.recognised.by},
            "fix": None
            if self.fix is None
            else {
                "line": self.fix.line,
                "context": self.fix.context,
                "source": self.fix.source,
                "measured": self.fix.measured,
            },
            "generic_fix": self.generic,
            "cut": None
            if self.cut is None
            else {"limit": self.cut.limit.value, "cut_s": self.cut.cut_s, "fix": self.cut.fix},
            "origin": None if self.origin is None else self.origin.to_json(),
            "websocket": None if self.upgrade is None else self.upgrade.to_json(),
            "notes": list(self.notes),
            "runs": [r.to_json() for r in self.runs],
        }

    @property
    def exit_code(self) -> int:
        """For CI: 21 the WebSocket upgrade not carried (the first thing to fix: the client never gets the stream
        it asked for), 16 held, 17 unsure, 19 cut, 0 streams (errors.py's PathHeld / DiagnosisUnsure / PathCut /
        UpgradeNotCarried)."""
        if self.upgrade is not None and not self.upgrade.carried:
            return UpgradeNotCarried.exit_code
        if self.verdict.cause is Cause.CUT:
            return PathCut.exit_code
        if self.verdict.held:
            return PathHeld.exit_code
        if self.verdict.cause is Cause.UNSURE:
            return DiagnosisUnsure.exit_code
        return 0


def diagnosis(
    url: str,
    paced: bool,
    runs: Sequence[RunFigures],
    verdict: Verdict,
    heads: Sequence[Sequence[tuple[str, str]]],
    proxy: str | None = None,
    notes: Sequence[str] = (),
    origin: OriginFinding | None = None,
    origin_runs: Sequence[RunFigures] = (),
    upgrade: UpgradeTried | None = None,
) -> Diagnosis:
    """Recognise the proxy (--proxy, else the first head that names one) and look up its measured fix; without
    one, what changes the rule in any proxy. `origin`: what the verdict rests on of the origin's behaviour; when the
    path streams only because of it, the plain origin's run (among `origin_runs`) is held, and its fix is named.
    `upgrade`: the WebSocket upgrade tried before the series (--transport websocket), its fix the proxy's line."""
    check_proxy(proxy)
    found = Recognised(proxy, "--proxy") if proxy else next(filter(None, map(recognise, heads)), None)
    fix = fix_for(found.proxy, verdict) if found is not None and verdict.held else None
    generic = generic_fix(verdict) if verdict.held and fix is None else None
    cut = name_end(verdict.end, found.proxy if found else None) if verdict.end is not None else None
    if origin is not None and origin.credit is not None and origin.credit.streams:
        origin = replace(origin, fix=_plain_fix(origin_runs, found))
    carried = finding(upgrade, found.proxy if found else None) if upgrade is not None else None
    return Diagnosis(url, paced, tuple(runs), verdict, found, fix, generic, tuple(notes), cut, origin, carried)


def _plain_fix(runs: Sequence[RunFigures], found: Recognised | None) -> str | None:
    """What makes a plain origin's stream (the held one) stream through the path: the recognised proxy's measured
    line for the cause its run shows, else what changes that rule in any proxy."""
    plain = next((r for r in runs if r.name == PLAIN), None)
    if plain is None:
        return None
    held = classify([replace(plain, name=series.BASE)])
    if not held.held and plain.seen().kind is Kind.WHOLE:  # one short run: classify would grow the series first
        held = Verdict(Cause.WHOLE_RESPONSE, "holds the whole response")
    if not held.held:
        return None
    fix = fix_for(found.proxy, held) if found is not None else None
    return f"add {fix.line}" if fix is not None else generic_fix(held)


def lines(d: Diagnosis) -> list[str]:
    """The text report: the verdict first, then the fix, then the evidence."""
    v = d.verdict
    out = [f"{redacted(d.url)}: {v.summary}"]  # its credentials and query masked, as its errors show it
    if d.recognised is not None:
        out.append(f"proxy: {d.recognised.proxy} (from {d.recognised.by})")
    if d.upgrade is not None:
        out += d.upgrade.lines()
    if d.cut is not None:
        survived = f", {d.cut.survived_s:g} s survived" if d.cut.survived_s is not None else ""
        out.append(f"cut: {d.cut.limit.value} limit at {d.cut.cut_s:g} s{survived}")
        out.append(f"fix: {d.cut.fix}")
    if d.fix is not None:
        out.append(f"fix: {d.fix.line}" + (f"  ({d.fix.context})" if d.fix.context else ""))
        out.append(f"     source: {d.fix.source}")
        out.append(f"     measured: {d.fix.measured}")
    elif v.held:
        if d.recognised is not None:
            out.append(f"fix: none measured in the catalogue for this on {d.recognised.proxy}")
        else:
            out.append("proxy: not named by its headers; --proxy NAME prints a catalogue proxy's measured line")
        if d.generic:
            out.append(f"in any proxy: {d.generic}")
    said = d.origin.words if d.origin is not None else None
    if said:
        out.append(f"origin: {said}")
    out += [f"note: {n}" for n in (*v.notes, *d.notes)]
    bound = f"grown to at most {size(series.MAX_STREAM_BYTES)} or {series.MAX_STREAM_MS / 1000:g} s a stream"
    out.append(
        f"runs ({bound}):" if d.paced else "runs (no tokenpath stub behind the path: only the client's side varied):"
    )
    out += [f"  {e}" for e in v.evidence]
    return out


def dumps(d: Diagnosis) -> str:
    return json.dumps(d.to_json(), indent=2)
