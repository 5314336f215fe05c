"""A diagnosis as a result: the verdict, the proxy that answered and its fix, as the --json document and as lines
of text. Pure: built from measured figures and heads, nothing sent."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokenpath.diagnose.classify import Cause, RunFigures, Verdict, classify
from tokenpath.diagnose.fixes import PROXIES, Fix, Recognised, fix_for, likely_proxy, recognise
from tokenpath.errors import DiagnosisUnsure, PathHeld, UsageError

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Diagnosis:
    url: str
    paced: bool  # a tokenpath stub behind the path was paced per run
    runs: tuple[RunFigures, ...]
    verdict: Verdict
    recognised: Recognised | None
    fix: Fix | None
    hint: str | None  # a likely proxy when none was recognised
    notes: tuple[str, ...] = ()  # about the series itself (a run left out, and why)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "url": self.url,
            "paced": self.paced,
            "verdict": self.verdict.to_json(),
            "proxy": None if self.recognised is None else {"name": self.recognised.proxy, "by": self.recognised.by},
            "fix": None if self.fix is None else {"line": self.fix.line, "source": self.fix.source},
            "hint": self.hint,
            "notes": list(self.notes),
            "runs": [r.to_json() for r in self.runs],
        }

    def outcome(self) -> PathHeld | DiagnosisUnsure | None:
        """The error that carries the exit code for CI: held (16), unsure (17), or None when it streams."""
        if self.verdict.held:
            return PathHeld(f"the path holds the stream: {self.verdict.summary}")
        if self.verdict.cause is Cause.UNSURE:
            return DiagnosisUnsure(self.verdict.summary)
        return None


def check_proxy(name: str | None) -> None:
    if name is not None and name not in PROXIES:
        raise UsageError(f"`proxy` {name!r}: diagnose knows the fixes of {', '.join(PROXIES)}")


def diagnosis(
    url: str,
    paced: bool,
    runs: Sequence[RunFigures],
    heads: Sequence[Sequence[tuple[str, str]]],
    proxy: str | None = None,
    notes: Sequence[str] = (),
) -> Diagnosis:
    """Classify the runs, recognise the proxy (--proxy, else the first head that names one) and look up its fix."""
    check_proxy(proxy)
    verdict = classify(runs)
    found = Recognised(proxy, "--proxy") if proxy else next(filter(None, map(recognise, heads)), None)
    fix = fix_for(found.proxy, verdict.cause) if found is not None and verdict.held else None
    hint = likely_proxy(verdict.cause, verdict.period_ms) if found is None and verdict.held else None
    return Diagnosis(url, paced, tuple(runs), verdict, found, fix, hint, tuple(notes))


def lines(d: Diagnosis) -> list[str]:
    """The text report: the verdict first, then the fix, then the evidence."""
    v = d.verdict
    out = [f"{d.url}: {v.summary}"]
    if d.recognised is not None:
        out.append(f"proxy: {d.recognised.proxy} (from {d.recognised.by})")
    if d.fix is not None:
        out.append(f"fix: {d.fix.line}")
        out.append(f"     source: {d.fix.source}")
    elif v.held and d.recognised is not None:
        out.append(f"fix: none in the catalogue for {v.cause.value} on {d.recognised.proxy}")
    elif v.held:
        out.append("proxy: not recognised (no Server or Via header names one); --proxy NAME prints its fix")
    if d.hint:
        out.append(f"hint: {d.hint}")
    out += [f"note: {n}" for n in (*v.notes, *d.notes)]
    out.append("runs:" if d.paced else "runs (no tokenpath stub behind the path: only the client's side varied):")
    out += [f"  {e}" for e in v.evidence]
    return out


def dumps(d: Diagnosis) -> str:
    return json.dumps(d.to_json(), indent=2)
