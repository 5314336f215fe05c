"""Third-party processes a run starts (proxies, real origins) end with it, however it ends.

tokenpath's own services follow their parent themselves (procs.follow_parent); nginx, Envoy or llama.cpp's server
cannot be told to. A run stops each one's process group when it ends, on Ctrl-C and SIGTERM too, but SIGKILL or the
OOM killer ends the run with no chance to: they served on, holding their ports, for ever. So the first time a process
starts one, it also starts a guard (`python -m tokenpath.serve.guard PID`, its own session, so a terminal's Ctrl-C
stays the run's to handle) and tells it each group it starts and stops, one line each on a pipe (`+PGID`, `-PGID`).
The guard waits on a pidfd of the run; once the run has exited (or closed the pipe), it SIGTERMs every group still
on its list, and SIGKILLs what is left of them after GRACE_S.

A guard that cannot start costs a warning, never the run (the group is running already).
Left open: a SIGKILL between a group's start and its `+` line (microseconds) leaves that group running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import IO

import psutil

from tokenpath.serve.procs import descendants

log = logging.getLogger(__name__)

GRACE_S = 5.0  # from SIGTERM to SIGKILL, as procs.stop_process_group gives a group


class _Watcher:
    """The run's side: starts its guard on first use (and again in a forked child, or when the guard died)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._guard: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started the guard: a forked child starts its own
        self._groups: set[int] = set()  # watched and not forgotten: what a new guard is told first

    def watch(self, pgid: int) -> None:
        """`pgid` (a process group this process started) is stopped by the guard if this process ends first."""
        with self._lock:
            self._forked()
            self._groups.add(pgid)
            self._send(f"+{pgid}\n", start=True)

    def forget(self, pgid: int) -> None:
        """`pgid` was stopped: the guard no longer touches it (its number may be reused)."""
        with self._lock:
            self._forked()
            self._groups.discard(pgid)
            self._send(f"-{pgid}\n", start=bool(self._groups))  # a dead guard is replaced only for groups left

    def _forked(self) -> None:
        """In a forked child, the parent's guard and groups are not this process's."""
        if self._owner and self._owner != os.getpid():
            self._guard, self._owner = None, 0
            self._groups.clear()

    def _send(self, line: str, start: bool) -> None:
        for attempt in range(2):  # a guard found dead (killed by hand) is replaced once, told every group
            try:
                pipe = self._pipe(start)
                if pipe is not None:
                    pipe.write(line.encode())
                    pipe.flush()
                return
            except OSError as exc:
                self._guard = None
                if attempt:
                    log.warning("guard: %s; a group this run started may outlive it if it is killed", exc)

    def _pipe(self, start: bool) -> IO[bytes] | None:
        guard = self._guard
        if guard is not None and guard.poll() is None:
            return guard.stdin
        if not start:
            return None
        self._guard = subprocess.Popen(
            [sys.executable, "-m", "tokenpath.serve.guard", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._owner = os.getpid()
        assert self._guard.stdin is not None
        # A guard started after another died (killed by hand) is told every group still running, not only new ones.
        self._guard.stdin.write("".join(f"+{pgid}\n" for pgid in sorted(self._groups)).encode())
        return self._guard.stdin


_WATCHER = _Watcher()
watch = _WATCHER.watch
forget = _WATCHER.forget


def _alive(pgid: int) -> bool:
    """A member of the group still runs: a zombie has ended (its reaper, init once the run is gone, may take a while
    to wait for it, and the group's signal succeeds until then)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed its user: still there
        return True
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(OSError):
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
    return False


def _signal(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop_groups(groups: set[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM to each group, then SIGKILL to those with a member left after `grace_s`, and to every descendant of a
    group's leader that had left its group (squid's pinger did; procs.stop_process_group does the same)."""
    strays = [p for pgid in groups for p in descendants(pgid) if _group_of(p) != pgid]  # leader's pid: pgid
    for pgid in groups:
        _signal(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = {g for g in groups if _alive(g)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {g for g in left if _alive(g)}
    for pgid in left:
        _signal(pgid, signal.SIGKILL)
    for proc in strays:
        with contextlib.suppress(psutil.Error):
            proc.kill()  # psutil checks it is still the process it was (its start time), not a reused pid


def _group_of(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None


def _apply(groups: set[int], data: bytes) -> bytes:
    """Applies each whole `+PGID` / `-PGID` line of `data` to `groups`; returns the unfinished last line."""
    *lines, rest = data.split(b"\n")
    for line in lines:
        sign, number = line[:1], line[1:]
        if number.isdigit() and int(number) > 1:  # never 0 or 1: killpg(0) is our own group, 1 is init's
            if sign == b"+":
                groups.add(int(number))
            elif sign == b"-":
                groups.discard(int(number))
    return rest


def follow(parent: int, commands: int = 0) -> None:
    """The guard's loop: groups from `commands` (a file descriptor) until `parent` has exited or the pipe closed,
    then those groups stopped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups: set[int] = set()
    try:
        watched = os.pidfd_open(parent)
    except (OSError, AttributeError):  # gone already, or no pidfds here (not Linux 5.3+): the pipe's end is the word
        watched = None
    if os.getppid() != parent:  # it died before the pidfd was open: the pipe holds what it had said
        watched = None
    pending = b""
    readers = [commands] if watched is None else [commands, watched]
    while True:
        ready, _, _ = select.select(readers, [], [])
        if watched is not None and watched in ready:
            break
        data = os.read(commands, 4096)
        if not data:
            break
        pending = _apply(groups, pending + data)
    # Lines the run wrote just before it exited are still in the pipe: read them, never blocking.
    os.set_blocking(commands, False)
    with contextlib.suppress(OSError):
        while data := os.read(commands, 4096):
            pending = _apply(groups, pending + data)
    stop_groups(groups)


if __name__ == "__main__":
    follow(int(sys.argv[1]))
