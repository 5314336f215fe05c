"""Whether a diagnosis's verdict rests on what the origin does (issue 37 §3), pure: which runs tell, and what they
say, by origins/credit.py's rule (the one the matrix's attribution applies).

Against a tokenpath stub that answers as a real origin does (its health says: `tokenpath stub --preset NAME`, or
--header / --http10-framing), the base run is measured again with the stub answering as a plain origin (its
`tokenpath` member's `plain_origin`: close-delimited to HTTP/1.0, none of the headers a path acts on) and, when the
origin does several such things, with each alone; the rule then says whether the path streams only because of what
the origin does (and what makes a plain origin stream through it), or holds the stream in spite of it. Against any
other origin nothing can be varied: a header a path acts on seen in the answer's head is named as what the verdict
may rest on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpath.diagnose.classify import RunFigures
from tokenpath.origins.credit import Credit, credit, streamed
from tokenpath.stub.presets import OriginBehaviour, relevant_headers

PLAIN = "plain origin"  # the run with the stub answering as a plain origin
# Of Cache-Control's directives, those a path acts on (a cache: no-store; a compressing proxy: no-transform); the
# stub's own SSE answer says no-cache, which no path streams by.
CACHE_DIRECTIVES = ("no-store", "no-transform")


@dataclass(frozen=True, slots=True)
class OriginRun:
    """One run of the base schedule with the stub's origin behaviour changed: `parts` is what it then does."""

    name: str
    parts: frozenset[str]
    member: Mapping[str, Any]  # what the run's `tokenpath` member adds to its pacing


def origin_runs(behaviour: OriginBehaviour) -> list[OriginRun]:
    """The runs that tell what a verdict rests on: a plain origin, and, when the origin does several things a path
    acts on, each alone (so only those that stream the path by themselves are named)."""
    if behaviour.plain:
        return []
    runs = [OriginRun(PLAIN, frozenset(), {"plain_origin": True})]
    if len(behaviour.parts()) < 2:
        return runs
    if behaviour.http10_framing == "chunked":
        alone = OriginBehaviour("chunked")
        runs.append(_alone(alone, {"http10_framing": "chunked"}))
    for name, value in behaviour.headers:
        runs.append(_alone(OriginBehaviour("close", ((name, value),)), {"headers": {name: value}}))
    return runs


def _alone(behaviour: OriginBehaviour, member: Mapping[str, Any]) -> OriginRun:
    (part,) = behaviour.parts()
    return OriginRun(f"only {part}", frozenset({part}), {"plain_origin": True, **member})


@dataclass(frozen=True, slots=True)
class OriginFinding:
    """What the verdict rests on: the origin's behaviour, the rule's credit (None: not the origin's doing), each
    origin run with whether it streamed, and, when the path streams only because of the origin, what makes a plain
    origin stream through it (`fix`)."""

    behaviour: OriginBehaviour
    credit: Credit | None
    runs: tuple[tuple[str, bool], ...] = ()  # (origin run, streamed)
    fix: str | None = None
    plain_streams: bool | None = None  # None: no plain origin was measured (an origin that is not a stub)

    @property
    def words(self) -> str | None:
        c = self.credit
        if c is None:
            if self.plain_streams:
                return f"it streams a plain origin too: the verdict does not rest on the origin's {self._named()}"
            if self.plain_streams is None and not self.behaviour.plain:
                return (
                    f"the origin's answer carries {self._named()}, which a path may act on: the verdict may rest on "
                    "it (to tell, diagnose the path with a tokenpath stub behind it: `tokenpath stub --header`)"
                )
            return None
        if c.streams:
            fix = f": {self.fix}" if self.fix else ""
            return (
                f"this path streams only because the origin sends {c.named}; an origin that does not will be held{fix}"
            )
        return f"this path holds the stream although the origin sends {c.named}: it ignores it"

    def _named(self) -> str:
        return " and ".join(self.behaviour.parts())

    def to_json(self) -> dict[str, Any]:
        return {
            "behaviour": self.behaviour.to_json(),
            "credited": sorted(self.credit.credited) if self.credit else [],
            "streams_because": bool(self.credit and self.credit.streams),
            "plain_streams": self.plain_streams,
            "runs": [{"run": name, "streamed": ok} for name, ok in self.runs],
            "fix": self.fix,
            "words": self.words,
        }


def judge(
    behaviour: OriginBehaviour, base: RunFigures, measured: Sequence[tuple[OriginRun, RunFigures]]
) -> OriginFinding:
    """The verdict under the origin (its base run) against the same run under a plain origin and each behaviour
    alone, by origins/credit.py's rule. A run with no frames per read (nothing arrived) tells nothing."""
    seen = [(run, streamed(f.fpr)) for run, f in measured if f.fpr is not None]
    plain = next((ok for run, ok in seen if not run.parts), None)
    parts = frozenset(behaviour.parts())
    if base.fpr is None or plain is None:
        return OriginFinding(behaviour, None, tuple((r.name, ok) for r, ok in seen))
    found = credit(parts, streamed(base.fpr), plain, [(run.parts, ok) for run, ok in seen])
    return OriginFinding(behaviour, found, tuple((r.name, ok) for r, ok in seen), plain_streams=plain)


def seen_in_heads(heads: Sequence[Sequence[tuple[str, str]]]) -> OriginBehaviour:
    """The headers a path acts on that reached the client (an origin's, passed on): X-Accel-Buffering, and a
    Cache-Control with a directive of CACHE_DIRECTIVES."""
    found = relevant_headers([h for head in heads for h in head])
    kept = tuple(
        (name, value)
        for name, value in found
        if name.lower() != "cache-control" or any(d in value.lower() for d in CACHE_DIRECTIVES)
    )
    return OriginBehaviour("close", kept)
