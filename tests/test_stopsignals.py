"""StopSignals (stopsignals.py) in-process: the handler is called directly, no signal is sent to the test process
(tests/e2e/test_matrix_faults.py, tests/e2e/test_origin_stop.py and tests/load/test_stop_*.py send real ones to
real commands)."""

from __future__ import annotations

import signal
import threading

import pytest

from tokenpath.stopsignals import STOP_SIGNALS, StopSignals


def test_the_first_stop_interrupts_and_later_ones_are_ignored() -> None:
    signals = StopSignals()
    with pytest.raises(KeyboardInterrupt):
        signals._on_signal(signal.SIGTERM, None)
    assert signals.fired
    signals._on_signal(signal.SIGTERM, None)  # cleanup is never cut short
    signals._on_signal(signal.SIGINT, None)


def test_a_stop_inside_held_waits_for_the_block_to_end() -> None:
    signals = StopSignals()
    reached = []

    def spawn_and_register() -> None:
        with signals.held():
            signals._on_signal(signal.SIGTERM, None)  # deferred: the spawned child's stop is not registered yet
            reached.append("registered")

    with pytest.raises(KeyboardInterrupt):
        spawn_and_register()
    assert reached == ["registered"]


def test_a_stop_inside_held_wins_over_the_blocks_own_error() -> None:
    signals = StopSignals()

    def failed_spawn() -> None:
        with signals.held():
            signals._on_signal(signal.SIGINT, None)
            raise OSError("spawn failed")

    with pytest.raises(KeyboardInterrupt):
        failed_spawn()


def test_held_until_lets_a_stop_land_once_the_child_can_be_stopped() -> None:
    signals = StopSignals()
    started: list[int] = []
    reached = []

    def slow_start() -> None:
        with signals.held(until=lambda: bool(started)):
            started.append(1234)  # the child's pid known: its stop reaches it
            signals._on_signal(signal.SIGTERM, None)  # raised at once: a slow start is not waited for
            reached.append("the rest of the start")

    with pytest.raises(KeyboardInterrupt):
        slow_start()
    assert reached == []


def test_a_block_without_a_stop_ends_quietly_and_a_later_stop_lands_at_once() -> None:
    signals = StopSignals()
    with signals.held():
        pass
    with pytest.raises(KeyboardInterrupt):
        signals._on_signal(signal.SIGTERM, None)


def test_the_handlers_are_installed_for_the_block_and_restored_after() -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    with StopSignals() as signals:
        for sig in STOP_SIGNALS:
            assert signal.getsignal(sig) == signals._on_signal
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before


def test_off_the_main_thread_nothing_is_installed() -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    seen: list[object] = []

    def enter() -> None:
        with StopSignals():
            seen.extend(signal.getsignal(sig) for sig in STOP_SIGNALS)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert seen == list(before.values())
