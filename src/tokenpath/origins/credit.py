"""Which origin behaviour a path's verdict rests on (issue 37 §3), pure: the one rule the matrix's attribution
(experiment/attribution.py) and diagnose (diagnose/origin.py) both apply.

An origin's behaviours a path can act on are its parts (stub/presets.py OriginBehaviour.parts: "HTTP/1.0: chunked",
"X-Accel-Buffering: no"). A verdict is judged against the same path with a plain origin (none of them): a path that
streams a plain origin streams by its own doing, whatever the origin sends; one held with a plain origin and
streaming this one streams because of what this origin did, and of its behaviours those that streamed the path alone
(the smallest such sets, seen in other measurements) are named, else all; one held in spite of them ignores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Streamed or held by frames per read alone: a verdict on the stream's shape, not on its milliseconds (a path that
# streams may still add a millisecond over the floor; one held brings 2 frames or more per read).
HELD_FPR = 2.0

Seen = Sequence[tuple[frozenset[str], bool]]  # per origin measured through the path: its parts, and whether it streamed


def streamed(fpr_median: float) -> bool:
    """A stream's shape as the rule reads it: under HELD_FPR frames per read, streamed."""
    return fpr_median < HELD_FPR


@dataclass(frozen=True, slots=True)
class Credit:
    """What a verdict rests on: `streams` because of `credited`, or held although the origin sends them."""

    streams: bool
    credited: frozenset[str]

    @property
    def named(self) -> str:
        return " and ".join(sorted(self.credited))

    @property
    def words(self) -> str:
        if self.streams:
            return f"streams because the origin sends {self.named} (held with a plain origin)"
        return f"held although the origin sends {self.named}: the path ignores it"


def credit(parts: frozenset[str], streams: bool, plain_streams: bool, seen: Seen = ()) -> Credit | None:
    """The credit of a verdict (`streams`) under an origin doing `parts`, against the same path with a plain origin
    (`plain_streams`); `seen`: the path under other origins, to name only the behaviours that streamed it alone.
    None: the origin did nothing a path acts on, or the path streams a plain origin too (its own doing)."""
    if not parts or plain_streams:
        return None
    if not streams:
        return Credit(False, parts)
    causes = [p for p, ok in seen if ok and p and p <= parts]
    smallest = [p for p in causes if not any(q < p for q in causes)]
    return Credit(True, frozenset(set().union(*smallest)) if smallest else parts)
