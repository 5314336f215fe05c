from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from tokenpath.clock import monotonic_ns
from tokenpath.stub.config import Jitter
from tokenpath.stub.pacing import Pacer, schedule_offsets_ns

MS = 1_000_000


def test_offsets_are_fixed_deadlines_from_the_start() -> None:
    offsets = schedule_offsets_ns(5, lead_frames=1, ttft_ms=90, interval_ms=14)
    assert offsets == [0, 90 * MS, 104 * MS, 118 * MS, 132 * MS]


def test_jitter_never_moves_a_write_before_the_previous_one() -> None:
    offsets = schedule_offsets_ns(
        500, lead_frames=0, ttft_ms=0, interval_ms=1, jitter=Jitter("normal", 5), rng=random.Random(1)
    )
    assert offsets == sorted(offsets)
    assert offsets != schedule_offsets_ns(500, lead_frames=0, ttft_ms=0, interval_ms=1)


def test_pacer_fires_in_deadline_order_and_never_early() -> None:
    async def main() -> list[tuple[int, int]]:
        pacer = Pacer(asyncio.get_running_loop())
        fired: list[tuple[int, int]] = []
        done = asyncio.Event()
        start = monotonic_ns() + 5 * MS
        deadlines = [start + d * MS for d in (7, 1, 4, 4, 0, 12)]

        def fire(deadline: int) -> None:
            fired.append((deadline, monotonic_ns()))
            if len(fired) == len(deadlines):
                done.set()

        for d in deadlines:
            pacer.call_at(d, fire)
        await asyncio.wait_for(done.wait(), 2)
        return fired

    fired = asyncio.run(main())
    assert [d for d, _ in fired] == sorted(d for d, _ in fired)
    assert all(actual >= deadline for deadline, actual in fired)


def test_cancel_removes_the_entry_at_once() -> None:
    async def main() -> tuple[int, list[int]]:
        pacer = Pacer(asyncio.get_running_loop())
        fired: list[int] = []
        now = monotonic_ns()
        keep = pacer.call_at(now + 20 * MS, fired.append)
        drop = pacer.call_at(now + 10 * MS, fired.append)
        pacer.cancel(drop)
        remaining = len(pacer)
        await asyncio.sleep(0.05)
        assert keep is not None
        return remaining, fired

    remaining, fired = asyncio.run(main())
    assert remaining == 1
    assert len(fired) == 1


class FakeLoop:
    """Just enough of an event loop to drive the pacer by hand, counting live wake-ups."""

    class Handle:
        def __init__(self, loop: FakeLoop, at: int, fn: Callable[[], None]) -> None:
            self.loop, self.at, self.fn, self.cancelled = loop, at, fn, False

        def cancel(self) -> None:
            self.cancelled = True

    def __init__(self) -> None:
        self.now = 0
        self.handles: list[FakeLoop.Handle] = []
        self.slept: list[float] = []

    def clock(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += round(seconds * 1e9)

    def call_later(self, delay: float, fn: Callable[[], None]) -> FakeLoop.Handle:
        # libuv-like: whole milliseconds, and up to 1 ms early
        handle = FakeLoop.Handle(self, self.now + max(0, round(delay * 1000) - 1) * MS, fn)
        self.handles.append(handle)
        return handle

    def call_soon(self, fn: Callable[[], None]) -> FakeLoop.Handle:
        return self.call_later(0, fn)

    def live(self) -> list[FakeLoop.Handle]:
        return [h for h in self.handles if not h.cancelled]

    def step(self) -> bool:
        live = self.live()
        if not live:
            return False
        handle = min(live, key=lambda h: h.at)
        self.handles.remove(handle)
        self.now = max(self.now, handle.at)
        handle.fn()
        return True


def test_pacer_keeps_one_wakeup_never_fires_early_and_blocks_at_most_a_slice() -> None:
    loop = FakeLoop()
    pacer = Pacer(loop, clock=loop.clock, sleep=loop.sleep)  # type: ignore[arg-type]
    fired: list[tuple[int, int]] = []

    def stream(start: int) -> Callable[[int], None]:
        def fire(deadline: int) -> None:
            fired.append((deadline, loop.now))
            if deadline < start + 20 * 14 * MS:
                pacer.call_at(deadline + 14 * MS, fire)  # re-scheduling from inside the pacer's run

        return fire

    for k in range(50):
        pacer.call_at(k * 300_000, stream(k * 300_000))
    steps = 0
    while loop.step():
        steps += 1
        assert len(loop.live()) <= 1, "more than one pending wake-up: the pacer would run itself in parallel"
        assert steps < 100_000
    assert len(fired) == 50 * 21
    assert all(actual >= deadline for deadline, actual in fired)
    assert max(loop.slept) <= 0.0005
