"""Writes on a fixed schedule: start + offset_i on the monotonic clock, never `sleep(interval)` in a loop.

One `Pacer` per event loop holds every pending write of every stream in a heap and fires them in deadline order.
That costs one timer per loop instead of one task wake-up per frame (measured: per-stream `asyncio.sleep` gave a
p99 drift of ~4 ms at 1,000 streams on uvloop before any write was made).

Why the last stretch is slept with `time.sleep`: libuv (uvloop) timers are millisecond-granular and measured from
the loop's cached time, so they fire up to ~1 ms early or late (and a timer under 1 ms fires at once, which would
make a re-arming pacer spin); the default asyncio loop rounds its epoll timeout up to the next millisecond. So the
pacer never arms a timer shorter than MIN_TIMER_NS, aims it FINE_WAIT_NS before the deadline, and sleeps the rest
with clock_nanosleep (tens of microseconds of error) in slices of at most SLEEP_SLICE_NS, returning to the loop
between slices so that I/O is never held up longer than one slice.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import time
from collections.abc import Callable, Collection

from tokenpath.clock import NS_PER_MS, Clock, monotonic_ns
from tokenpath.stub.config import Jitter
from tokenpath.stub.loopshare import Steps, in_one_go

STEP_TICKS = 4096  # frames scheduled between two steps of schedule_steps: ~0.2 us each, ~1 ms
MIN_TIMER_NS = 1_000_000  # libuv's timer resolution: a shorter timer fires at once
FINE_WAIT_NS = 2_500_000  # timers are trusted only this far: MIN_TIMER_NS plus libuv's ~1 ms error, plus margin
SLEEP_SLICE_NS = 500_000  # longest single block of the loop by a precise wait


def schedule_steps(
    n_frames: int,
    *,
    lead_frames: int,
    ttft_ms: float,
    interval_ms: float,
    jitter: Jitter | None = None,
    rng: random.Random | None = None,
    with_next: Collection[int] = (),
) -> Steps[list[int]]:
    """Offset of each frame from the response start, in ns, yielding every STEP_TICKS frames (stub/loopshare.py).

    The first `lead_frames` (the role delta of a chat stream) go out at once with the headers, as model servers
    send them; after them each frame takes the next tick, due at ttft + tick x interval, except a frame in
    `with_next`, which shares the tick of the frame after it. Jitter moves a tick but never before the one before
    it.
    """
    offsets: list[int] = []
    prev = 0
    rng = rng or random.Random()
    blocks = [range(i, min(i + STEP_TICKS, n_frames)) for i in range(0, n_frames, STEP_TICKS)]
    if not with_next:  # every frame its own tick: the loop every stream without reasoning runs, kept as lean
        for block in blocks:
            for j in block:
                if j < lead_frames:
                    offsets.append(0)
                    continue
                at_ms = ttft_ms + (j - lead_frames) * interval_ms
                if jitter is not None:
                    at_ms += jitter.sample_ms(rng)
                prev = max(prev, round(at_ms * NS_PER_MS))
                offsets.append(prev)
            yield
        return offsets
    tick, at_ms = 0, 0.0
    timed = -1  # the tick at_ms was computed for: frames sharing a tick share its (jittered) deadline
    for block in blocks:
        for j in block:
            if j < lead_frames:
                offsets.append(0)
                continue
            if tick != timed:
                at_ms = ttft_ms + tick * interval_ms
                if jitter is not None:
                    at_ms += jitter.sample_ms(rng)
                timed = tick
            prev = max(prev, round(at_ms * NS_PER_MS))
            offsets.append(prev)
            if j not in with_next:
                tick += 1
        yield
    return offsets


schedule_offsets_ns = in_one_go(schedule_steps)  # at once: short streams, and every caller but the builds


class Pacer:
    """Calls each callback at (never before) its absolute deadline on `clock`, in deadline order."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        clock: Clock = monotonic_ns,
        fine_wait_ns: int = FINE_WAIT_NS,
        slice_ns: int = SLEEP_SLICE_NS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._loop = loop
        self._clock = clock
        self._fine_wait_ns = fine_wait_ns
        self._slice_ns = slice_ns
        self._sleep = sleep
        self._heap: list[tuple[int, int, Callable[[int], None]]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None  # the one live wake-up, if any
        self._armed_for: int | None = None
        self._running = False  # callbacks schedule their next write from inside _run; it arms once at the end

    def __len__(self) -> int:
        return len(self._heap)

    def call_at(self, deadline_ns: int, callback: Callable[[int], None]) -> int:
        """Schedule `callback(deadline_ns)`; returns a token for `cancel`."""
        token = next(self._seq)
        heapq.heappush(self._heap, (deadline_ns, token, callback))
        if not self._running and (self._armed_for is None or deadline_ns < self._armed_for):
            self._arm()
        return token

    def cancel(self, token: int) -> None:
        """Drop a pending callback now (a client left), so nothing it references outlives the stream."""
        for i, entry in enumerate(self._heap):
            if entry[1] == token:
                self._heap[i] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._heap:
            self._armed_for = None
            return
        deadline = self._heap[0][0]
        self._armed_for = deadline
        early_ns = deadline - self._clock() - self._fine_wait_ns
        if early_ns > 0:
            self._timer = self._loop.call_later(max(early_ns, MIN_TIMER_NS) / 1e9, self._run)
        else:
            self._timer = self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._timer = None
        self._armed_for = None
        heap, clock = self._heap, self._clock
        self._running = True
        try:
            now = clock()
            while heap and heap[0][0] <= now:
                deadline, _, callback = heapq.heappop(heap)
                callback(deadline)
                now = clock()
        finally:
            self._running = False
        if heap:
            rest = heap[0][0] - now
            if 0 < rest <= self._fine_wait_ns:
                self._sleep(min(rest, self._slice_ns) / 1e9)
                self._armed_for = heap[0][0]
                self._timer = self._loop.call_soon(self._run)  # let I/O in before the next write
                return
        self._arm()
