from __future__ import annotations

from collections.abc import Callable

import pytest

from tokenpath.controls.policies import BufferLimitExceeded, BufferPolicy, CorkPolicy, PassPolicy


class FakeTimers:
    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None], FakeTimers.Handle]] = []

    class Handle:
        def __init__(self) -> None:
            self.cancelled = False

        def cancel(self) -> None:
            self.cancelled = True

    def call_later(self, delay: float, fn: Callable[[], None]) -> FakeTimers.Handle:
        handle = FakeTimers.Handle()
        self.pending.append((delay, fn, handle))
        return handle

    def fire_all(self) -> None:
        pending, self.pending = self.pending, []
        for _, fn, handle in pending:
            if not handle.cancelled:
                fn()


def test_pass_writes_every_read_at_once() -> None:
    out: list[list[bytes]] = []
    policy = PassPolicy(out.append)
    policy.feed(b"a")
    policy.feed(b"b")
    assert out == [[b"a"], [b"b"]]


def test_buffer_writes_everything_once_at_eof() -> None:
    out: list[list[bytes]] = []
    policy = BufferPolicy(out.append)
    for part in (b"a", b"b", b"c"):
        policy.feed(part)
    assert out == []
    policy.finish()
    assert out == [[b"abc"]]


def test_buffer_has_a_limit() -> None:
    policy = BufferPolicy(lambda b: None, limit=4)
    policy.feed(b"abcd")
    with pytest.raises(BufferLimitExceeded):
        policy.feed(b"e")


def test_cork_flushes_on_size() -> None:
    out: list[list[bytes]] = []
    timers = FakeTimers()
    policy = CorkPolicy(out.append, timers.call_later, cork_bytes=10, cork_ms=200)
    policy.feed(b"12345")
    assert out == []
    policy.feed(b"67890x")
    assert out == [[b"12345", b"67890x"]]  # released together, each piece as it came
    assert timers.pending[0][2].cancelled


def test_cork_flushes_on_timer_started_by_the_first_held_byte() -> None:
    out: list[list[bytes]] = []
    timers = FakeTimers()
    policy = CorkPolicy(out.append, timers.call_later, cork_bytes=1000, cork_ms=200)
    policy.feed(b"a")
    policy.feed(b"b")
    assert [d for d, _, _ in timers.pending] == [0.2]  # one timer, from the first byte, not re-armed
    timers.fire_all()
    assert out == [[b"a", b"b"]]
    policy.feed(b"c")
    assert len(timers.pending) == 1
    policy.finish()
    assert out == [[b"a", b"b"], [b"c"]]
