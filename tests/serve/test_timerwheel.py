"""serve/timerwheel.py: a timer never fires before its deadline and fires within one resolution after it (on an
injected clock, ticked in steps finer than the resolution); cancelling, re-arming from a callback, a long gap, a
failing callback; on a real loop, ticks only while a timer is armed."""

from __future__ import annotations

import asyncio
import random

import pytest

from tokenpath.serve.timerwheel import RESOLUTION_S, LoopWheel, TimerWheel, WheelTimer


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_timer_fires_never_before_its_deadline_and_within_one_resolution_after() -> None:
    clock = FakeClock()
    wheel = TimerWheel(clock)
    rng = random.Random(39)
    deadlines = [clock.now + rng.uniform(0.0, 5.0) for _ in range(500)] + [clock.now + 0.3, clock.now + 1.0]
    fired: dict[int, float] = {}

    def fire(i: int) -> None:
        assert i not in fired  # once
        fired[i] = clock.now

    for i, at in enumerate(deadlines):
        wheel.arm(at, fire, i)
    step = RESOLUTION_S / 7  # ticks finer than the resolution: the bound is the wheel's, not the ticking's
    while clock.now < 1006.0:
        clock.now += step
        wheel.expire(clock.now)
    assert sorted(fired) == list(range(len(deadlines)))
    for i, at in enumerate(deadlines):
        assert at <= fired[i] <= at + RESOLUTION_S + step, (at, fired[i])
    assert wheel.armed == 0
    assert wheel.slots == {}  # nothing held once everything fired


def test_the_resolution_is_the_bound() -> None:
    clock = FakeClock(0.0)
    wheel = TimerWheel(clock, resolution_s=0.25)
    fired: list[float] = []
    wheel.arm(1.01, lambda _: fired.append(clock.now))
    for now in (1.0, 1.05, 1.2, 1.249):
        clock.now = now
        assert wheel.expire(now) == 0  # before the end of its slot (1.25): not yet, though its deadline passed
    clock.now = 1.25
    assert wheel.expire(1.25) == 1
    assert fired == [1.25]  # 0.24 after its deadline: within the resolution


def test_a_cancelled_timer_never_fires_and_is_not_held() -> None:
    clock = FakeClock()
    wheel = TimerWheel(clock)
    fired: list[str] = []
    keep = wheel.arm(clock.now + 0.5, fired.append, "keep")
    drop = wheel.arm(clock.now + 0.5, fired.append, "drop")
    wheel.cancel(drop)
    wheel.cancel(drop)  # twice: no effect
    assert drop.callback is None  # lets go of what it referred to
    assert drop.arg is None
    assert wheel.armed == 1
    wheel.expire(clock.now + 1)
    assert fired == ["keep"]
    wheel.cancel(keep)  # after it fired: no effect
    assert wheel.armed == 0
    alone = wheel.arm(clock.now + 10, fired.append, "alone")
    wheel.cancel(alone)
    assert wheel.slots == {}  # an emptied slot goes at once (a request's total timer, cancelled, costs no memory)


def test_a_callback_may_cancel_a_timer_of_the_same_tick_and_arm_new_ones() -> None:
    clock = FakeClock()
    wheel = TimerWheel(clock)
    fired: list[str] = []
    timers: dict[str, WheelTimer] = {}

    def first(_: object) -> None:
        fired.append("first")
        for name in ("a", "b"):
            if name in timers:
                wheel.cancel(timers[name])
        wheel.arm(clock.now - 5, fired.append, "past")  # a deadline already passed: the next tick, not this one
        wheel.arm(clock.now + 0.35, fired.append, "later")

    timers["first"] = wheel.arm(clock.now + 0.05, first)
    timers["a"] = wheel.arm(clock.now + 0.05, fired.append, "a")
    timers["b"] = wheel.arm(clock.now + 0.05, fired.append, "b")
    clock.now += 0.1
    wheel.expire(clock.now)
    assert fired[-1] == "first"  # whichever of a and b came after it in the slot was cancelled: never fired
    assert "past" not in fired
    clock.now += 0.1
    wheel.expire(clock.now)
    assert "past" in fired
    clock.now += 0.5
    wheel.expire(clock.now)
    assert fired[-1] == "later"
    assert wheel.armed == 0


def test_a_long_gap_fires_everything_due_in_deadline_order() -> None:
    clock = FakeClock()
    wheel = TimerWheel(clock)
    fired: list[float] = []
    for at in (900.0, 5.0, 60.0, 300.0, 15.0):
        wheel.arm(clock.now + at, fired.append, at)
    wheel.arm(clock.now + 5000.0, fired.append, 5000.0)
    clock.now += 1000.0  # a loop blocked (or a suspended VM): the slots held are walked, not 10,000 ticks
    assert wheel.expire(clock.now) == 5
    assert fired == [5.0, 15.0, 60.0, 300.0, 900.0]
    assert wheel.armed == 1


def test_a_failing_callback_does_not_keep_the_others_from_firing(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    wheel = TimerWheel(clock)
    fired: list[int] = []

    def broken(_: object) -> None:
        raise RuntimeError("planted bug")

    wheel.arm(clock.now + 0.01, broken)
    for i in range(5):
        wheel.arm(clock.now + 0.01, fired.append, i)
    assert wheel.expire(clock.now + 1) == 6
    assert sorted(fired) == list(range(5))
    assert "planted bug" in caplog.text


def test_the_first_timer_after_an_idle_spell_is_placed_from_now() -> None:
    clock = FakeClock()
    wheel = TimerWheel(clock)
    clock.now += 3600.0  # an hour with nothing armed and no tick
    fired: list[float] = []
    wheel.arm(clock.now - 1, lambda _: fired.append(clock.now))  # already due
    wheel.arm(clock.now + 0.2, lambda _: fired.append(clock.now))
    clock.now += RESOLUTION_S
    assert wheel.expire(clock.now) == 1
    clock.now += 0.2
    assert wheel.expire(clock.now) == 1


def ticking(wheel: LoopWheel) -> bool:
    return wheel._tick is not None


def test_on_the_loop_it_ticks_only_while_a_timer_is_armed() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        wheel = LoopWheel(loop.time)
        assert not ticking(wheel)
        done = loop.create_future()
        at = loop.time() + 0.25
        wheel.arm(at, lambda _: done.set_result(loop.time()))
        assert ticking(wheel)
        fired_at = await asyncio.wait_for(done, 10)
        assert fired_at >= at  # never early; how late is the loaded host's (the bound is tested on a clock above)
        await asyncio.sleep(RESOLUTION_S * 3)
        assert not ticking(wheel)  # nothing armed: no tick wakes the loop
        other = wheel.arm(loop.time() + 60, lambda _: None)
        assert ticking(wheel)
        wheel.cancel(other)
        await asyncio.sleep(RESOLUTION_S * 3)
        assert not ticking(wheel)
        wheel.stop()

    asyncio.run(scenario())
