"""Long work on the stub's event loop done in slices, so it never holds up the streams the loop is pacing.

The loop is the instrument: a frame due while a callback runs is written late by as long as the callback runs, and
the audit fails a write 2 ms late (tokenpath/audit.py tolerance_ns). So work that grows with what a client asks
for (every audit log answered at once, one log of 300,000 writes: stub/auditslices.py; a response of 100,000 frames
rendered, framed and scheduled: stub/app.py's sliced build) yields between items once it has held the loop for
SLICE_NS. Work written once for both ways is a generator of `Steps` (stub/frames.py renders, pacing.py, plan.py):
`finish` runs it in one go (a short response, no turn of the loop), `shared` runs it with a turn between steps. A
thread would not help: the work is Python (and json's C encoder) holding the GIL, which the loop would then wait for
on every wake, up to the interpreter's 5 ms switch interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import ParamSpec, TypeAlias, TypeVar

from tokenpath.clock import Clock, monotonic_ns

T = TypeVar("T")
P = ParamSpec("P")
# A job that yields between its steps (each a fraction of SLICE_NS) and returns its result.
Steps: TypeAlias = Generator[None, None, T]

SLICE_NS = 1_000_000  # the longest one slice holds the loop: half the audit's 2 ms tolerance


class LoopShare:
    """`await share.turn()` between items of a long job: a turn for the rest of the loop once the job has run
    SLICE_NS since its last one. One clock read per item: for items of microseconds and up, not per frame."""

    def __init__(self, clock: Clock = monotonic_ns, slice_ns: int = SLICE_NS) -> None:
        self._clock = clock
        self._slice_ns = slice_ns
        self._since = clock()
        self.turns = 0  # how many times the job gave the loop a turn

    async def turn(self) -> None:
        if self._clock() - self._since >= self._slice_ns:
            await asyncio.sleep(0)
            self.turns += 1
            self._since = self._clock()


def finish(steps: Steps[T]) -> T:
    """The job run in one go, as a plain call: no turn of the loop between its steps."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def in_one_go(job: Callable[P, Steps[T]]) -> Callable[P, T]:
    """`job`'s plain-call form (its steps run by `finish`), with its own parameters: a function written once, in
    steps, for the callers that want its result at once."""

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return finish(job(*args, **kwargs))

    run.__name__ = run.__qualname__ = job.__name__.removesuffix("_steps")
    run.__doc__ = f"`{job.__name__}` run in one go (stub/loopshare.py in_one_go)."
    return run


async def shared(steps: Steps[T], share: LoopShare) -> T:
    """The job run with `share.turn()` between its steps."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await share.turn()
