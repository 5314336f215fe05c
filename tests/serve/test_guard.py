"""serve/guard.py: the third-party process groups a run starts end with it, even when it is SIGKILLed; groups it
stopped itself (forgotten) are never touched, and a guard ends with the run that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psutil
import pytest

from tokenpath.serve.guard import stop_groups

# A run: starts its "third-party" groups (each a sleep in its own session), tells the guard as the catalogue does,
# prints their pids and its guard's, and waits to be killed. argv: how many groups, and how many of them to forget.
RUN = """
import subprocess, sys, time
from tokenpath.serve import guard
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # a clean run's output ends with it
groups = [subprocess.Popen(["sleep", "300"], start_new_session=True, **quiet) for _ in range(int(sys.argv[1]))]
for g in groups:
    guard.watch(g.pid)
for g in groups[: int(sys.argv[2])]:
    guard.forget(g.pid)
print(*[g.pid for g in groups], guard._WATCHER._guard.pid, flush=True)
time.sleep(120)
"""


@contextmanager
def run(groups: int = 0, forgotten: int = 0, code: str = RUN) -> Iterator[tuple[subprocess.Popen[str], list[int], int]]:
    """A run (RUN, or `code` printing the same line), with its groups' pids and its guard's pid; whatever is left
    is killed afterwards."""
    argv = [sys.executable, "-c", code, str(groups), str(forgotten)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        *pids, guard = (int(p) for p in proc.stdout.readline().split())
        yield proc, pids, guard
    finally:
        proc.kill()
        proc.wait(10)
        for pid in pids:
            with suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        if proc.stdout is not None:
            proc.stdout.close()


def gone(pid: int, within_s: float) -> bool:
    """Whether `pid` has exited within `within_s`: a zombie has (only its reaper's wait is left, and a reparented
    one waits on this container's init)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def test_the_groups_a_killed_run_started_are_stopped_and_its_guard_ends() -> None:
    with run(3) as (proc, pids, guard):
        assert all(psutil.pid_exists(p) for p in pids)
        proc.kill()  # SIGKILL: the run stops nothing itself
        proc.wait(10)
        for pid in pids:
            assert gone(pid, 10), f"group {pid} outlived the killed run"
        assert gone(guard, 10)


def test_a_group_the_run_stopped_itself_is_never_touched() -> None:
    """`forget` is sent once a group is stopped: its number may be a new group's by the time the run ends."""
    with run(2, forgotten=1) as (proc, pids, guard):
        kept, watched = pids
        proc.kill()
        proc.wait(10)
        assert gone(watched, 10)
        assert gone(guard, 10)
        assert not gone(kept, 0.5)  # still running, never signalled


def test_a_run_that_ends_cleanly_takes_its_guard_with_it() -> None:
    done = subprocess.run([sys.executable, "-c", RUN.replace("time.sleep(120)", ""), "1", "1"], capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    group, guard = (int(p) for p in done.stdout.split())
    try:
        assert gone(guard, 10)
        assert not gone(group, 0.2)  # forgotten before the end: left as it was
    finally:
        os.killpg(group, signal.SIGKILL)


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"], start_new_session=True)
    time.sleep(0.2)  # the trap is set
    try:
        started = time.monotonic()
        stop_groups({stubborn.pid}, grace_s=0.5)
        assert stubborn.wait(10) == -signal.SIGKILL
        assert time.monotonic() - started >= 0.5  # SIGTERM had its grace first
    finally:
        stubborn.kill()
        stubborn.wait(10)


@pytest.mark.parametrize("line", [b"+0\n", b"+1\n", b"-x\n", b"+\n", b"garbage\n"])
def test_lines_that_name_no_group_of_ours_are_ignored(line: bytes) -> None:
    from tokenpath.serve.guard import _apply

    groups: set[int] = set()
    assert _apply(groups, line + b"+4242\n-4242\n+77") == b"+77"  # an unfinished line waits for its end
    assert groups == set()


def test_a_guard_that_cannot_start_costs_a_warning_not_the_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The group is running already when it is watched: an error here would leave it with no one to stop it."""
    from tokenpath.serve import guard

    watcher = guard._Watcher()
    monkeypatch.setattr("tokenpath.serve.guard.sys.executable", "/nonexistent/python")
    watcher.watch(4242)
    watcher.forget(4242)
    assert "a group this run started may outlive it" in caplog.text
    monkeypatch.undo()
    watcher.watch(4242)  # the next group tries again, and a guard starts
    assert watcher._guard is not None
    watcher.forget(4242)
    assert watcher._guard.stdin is not None
    watcher._guard.stdin.close()  # the pipe's end: the guard ends, with nothing left on its list
    assert watcher._guard.wait(10) == 0


def test_a_guard_killed_by_hand_is_replaced_by_one_told_every_group_still_running() -> None:
    run_code = """
import os, signal, subprocess, sys, time
from tokenpath.serve import guard
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
first = subprocess.Popen(["sleep", "300"], start_new_session=True, **quiet)
guard.watch(first.pid)
old = guard._WATCHER._guard
old.kill()
old.wait()
second = subprocess.Popen(["sleep", "300"], start_new_session=True, **quiet)
guard.watch(second.pid)
print(first.pid, second.pid, guard._WATCHER._guard.pid, flush=True)
time.sleep(120)
"""
    with run(code=run_code) as (proc, pids, new_guard):
        proc.kill()
        proc.wait(10)
        for pid in pids:  # the first too: watched before its guard died, told to the new one
            assert gone(pid, 10), f"group {pid} outlived the killed run"
        assert gone(new_guard, 10)


def test_a_descendant_that_left_its_group_is_stopped_with_it() -> None:
    """squid's pinger left its group: a signal to the group never reached it (procs.stop_process_group kills such
    descendants by pid; the guard does the same)."""
    leader = subprocess.Popen(["sh", "-c", "setsid sleep 300 & wait"], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    stray: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 10
        while not stray and time.monotonic() < deadline:
            stray = psutil.Process(leader.pid).children(recursive=True)
            time.sleep(0.02)
        assert stray, "the leader's child did not start"
        assert os.getpgid(stray[0].pid) != leader.pid  # it left the group
        stop_groups({leader.pid}, grace_s=0.5)
        leader.wait(10)
        assert gone(stray[0].pid, 10)
    finally:
        leader.kill()
        leader.wait(10)
        for proc in stray:
            with suppress(psutil.Error):
                proc.kill()


def test_without_pidfds_the_pipe_s_end_is_the_run_s_end() -> None:
    """No os.pidfd_open (not Linux 5.3+): the guard reads its groups until the pipe closes, which the run's exit does,
    then stops them, rather than failing at its start."""
    code = "import os, sys\ndel os.pidfd_open\nfrom tokenpath.serve.guard import follow\nfollow(os.getppid())\n"
    group = subprocess.Popen(["sleep", "300"], start_new_session=True)
    guard = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert guard.stdin is not None
        guard.stdin.write(f"+{group.pid}\n".encode())
        guard.stdin.close()  # the run's end, as its exit closes the pipe
        assert guard.wait(10) == 0, guard.stderr.read() if guard.stderr else ""
        assert group.wait(10) == -signal.SIGTERM
    finally:
        group.kill()
        group.wait(10)
        guard.kill()
        guard.wait(10)
        if guard.stderr is not None:
            guard.stderr.close()


def test_a_group_left_with_zombies_only_is_not_waited_on_for_the_grace() -> None:
    """A killed run's group leader is reaped by init, when init gets to it: until then the group's signal succeeds,
    and the guard waited the whole grace for processes that had ended."""
    group = subprocess.Popen(["true"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(group.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        stop_groups({group.pid}, grace_s=30)
        assert time.monotonic() - started < 10  # not the 30 s grace (a bound far from any timing of the host's)
    finally:
        group.wait(10)
