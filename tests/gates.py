"""What the stop tests share around tests/load/gated_load.py (a command run with one spawn held at the worst moment):
waiting for the gate, the processes a run started, and which of them are still running."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import psutil

GATED = Path(__file__).parent / "load" / "gated_load.py"  # any command, with one spawn held (its docstring)


def default_sigint() -> None:
    """A child's preexec_fn: SIGINT as a terminal's shell leaves it (a test runner may have it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_gate(gate: Path, proc: subprocess.Popen[str], timeout_s: float) -> psutil.Process:
    """The held child, once gated_load.py has written its pid into `gate`/gated (the command still running)."""
    deadline = time.monotonic() + timeout_s
    while not (gate / "gated").exists():
        assert proc.poll() is None, f"the command ended before the gate:\n{proc.communicate()[0]}"
        assert time.monotonic() < deadline, f"no gate within {timeout_s:.0f} s"
        time.sleep(0.05)
    return psutil.Process(int((gate / "gated").read_text()))


def tree(pid: int, gated: psutil.Process | None = None) -> list[psutil.Process]:
    """Every process a command started: its descendants, and the gated child's (a session of its own, its child)."""
    procs = {p.pid: p for p in psutil.Process(pid).children(recursive=True)}
    for p in [gated, *gated.children(recursive=True)] if gated is not None else []:
        procs.setdefault(p.pid, p)
    return list(procs.values())


def running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running (a zombie has ended: its parent has not reaped it yet)."""
    alive = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
    return alive


def kill_left(procs: list[psutil.Process]) -> None:
    """Kill what a broken run left: never left behind by the test either."""
    for p in running(procs):
        with contextlib.suppress(psutil.Error):
            p.kill()
