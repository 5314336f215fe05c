"""One timer wheel per worker for second-scale limits (a request's head timer, a stream's first-byte, idle, total and
keep-alive timers): each deadline is put in a slot of RESOLUTION_S, and one event-loop timer ticks while any is
armed, instead of one loop timer handle per request per limit (arming, cancelling and the loop's heap each time).

The rule: a timer never fires before its deadline (on the wheel's clock), and fires at the first tick at or after
the end of its slot, so within one resolution after it when the loop is not blocked. TimerWheel is the sans-IO core
(clock injected, `expire(now)` fires what is due); LoopWheel ticks it on the running event loop."""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# 100 ms: the shortest limit the gateway takes in seconds (keepalive_interval_s, a head timeout) keeps its meaning
# to within a tenth of a second, and a worker with timers armed wakes 10 times a second for them, none when none is.
RESOLUTION_S = 0.1


class WheelTimer:
    """One armed timer; `callback(arg)` at its slot's tick unless cancelled first."""

    __slots__ = ("arg", "callback", "slot")

    def __init__(self, slot: int, callback: Callable[[Any], None], arg: Any) -> None:
        self.slot = slot
        self.callback: Callable[[Any], None] | None = callback  # None once fired or cancelled
        self.arg = arg


class TimerWheel:
    """Timers bucketed by slot (deadline / resolution, rounded up): arming and cancelling are a set's add and
    discard, and expiring a tick pops the slots it passed. `clock` is in seconds, the deadlines on it."""

    def __init__(self, clock: Callable[[], float], resolution_s: float = RESOLUTION_S) -> None:
        self.clock = clock
        self.resolution_s = resolution_s
        self.slots: dict[int, set[WheelTimer]] = {}
        self.armed = 0  # timers armed and neither fired nor cancelled
        self.done = math.floor(clock() / resolution_s)  # every slot up to this one has been expired

    def arm(self, at: float, callback: Callable[[Any], None], arg: Any = None) -> WheelTimer:
        """`callback(arg)` once the wheel's clock reaches `at` (at the next tick if it already has)."""
        if not self.armed:
            self._wake()
        slot = math.ceil(at / self.resolution_s)
        if slot <= self.done:
            slot = self.done + 1
        timer = WheelTimer(slot, callback, arg)
        bucket = self.slots.get(slot)
        if bucket is None:
            self.slots[slot] = {timer}
        else:
            bucket.add(timer)
        self.armed += 1
        return timer

    def cancel(self, timer: WheelTimer) -> None:
        """Never fires after this; a cancelled or fired timer is left as it is."""
        if timer.callback is None:
            return
        timer.callback = timer.arg = None  # let go of what it refers to now
        self.armed -= 1
        bucket = self.slots.get(timer.slot)
        if bucket is not None:  # else its slot is being expired: the cleared callback keeps it from firing
            bucket.discard(timer)
            if not bucket:
                del self.slots[timer.slot]

    def expire(self, now: float) -> int:
        """Fire every timer whose slot has ended by `now`, in slot order; returns how many fired. A callback may arm
        (into a later slot) and cancel timers; one that raises is logged and the others still fire."""
        last = math.floor(now / self.resolution_s)
        if last <= self.done:
            return 0
        if last - self.done > len(self.slots):  # a long gap (the loop was blocked): walk the slots held instead
            due: list[int] | range = sorted(slot for slot in self.slots if slot <= last)
        else:
            due = range(self.done + 1, last + 1)
        self.done = last
        fired = 0
        for slot in due:
            bucket = self.slots.pop(slot, None)
            if bucket is None:
                continue
            for timer in bucket:
                callback, arg = timer.callback, timer.arg
                if callback is None:  # cancelled by a callback fired before it
                    continue
                timer.callback = timer.arg = None
                self.armed -= 1
                fired += 1
                try:
                    callback(arg)
                except Exception:  # one timer's bug must not keep the others (every request's limits) from firing
                    log.exception("timer callback %r failed", callback)
        return fired

    def _wake(self) -> None:
        """The first timer after none: slots before now are over (nothing was armed in them)."""
        self.done = max(self.done, math.floor(self.clock() / self.resolution_s))


class LoopWheel(TimerWheel):
    """A TimerWheel ticked by the running event loop: one loop timer at each slot's end while a timer is armed,
    none while none is (an idle worker is not woken)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, resolution_s: float = RESOLUTION_S) -> None:
        super().__init__(clock, resolution_s)
        self._tick: asyncio.TimerHandle | None = None

    def _wake(self) -> None:
        super()._wake()
        if self._tick is None:
            self._schedule(asyncio.get_running_loop())

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        # At the end of the next slot on the wheel's clock (the loop's may differ, or fire a little early: a tick
        # that comes before its slot's end finds nothing due and the next one takes it).
        delay = (self.done + 1) * self.resolution_s - self.clock()
        self._tick = loop.call_later(max(delay, 0.0) + self.resolution_s / 100, self._on_tick, loop)

    def _on_tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._tick = None
        self.expire(self.clock())
        if self.armed and self._tick is None:
            self._schedule(loop)

    def stop(self) -> None:
        """No more ticks (the loop is closing); armed timers stay armed."""
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None


_LOOP_WHEELS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWheel] = weakref.WeakKeyDictionary()


def loop_wheel() -> LoopWheel:
    """The running loop's wheel (on the loop's own clock), for the servers that bring none of their own."""
    loop = asyncio.get_running_loop()
    wheel = _LOOP_WHEELS.get(loop)
    if wheel is None:
        wheel = _LOOP_WHEELS[loop] = LoopWheel(loop.time)
    return wheel
