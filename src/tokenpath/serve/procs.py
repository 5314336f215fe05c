"""Child processes that serve something: started, awaited until they say where they listen, always stopped."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import psutil

from tokenpath.errors import ServiceError

_LISTENING = re.compile(r"listening on (\S+)")
# Set by ServiceProcess for its child: the pid of the process that started it, which the child follows (follow_parent)
PARENT_PID_ENV = "TOKENPATH_PARENT_PID"


def follow_parent() -> None:
    """A service tokenpath started ends with the process that started it, however that one ended: SIGKILL or the
    OOM killer left a load run's stub serving on. A thread waits on a pidfd of the parent (readable once it has
    exited, no polling) and then SIGTERMs this process, which stops as on any SIGTERM. Not PR_SET_PDEATHSIG: that
    fires when the parent's *thread* that started it ends (a service started from a thread pool died with the pool).
    Exits at once if the parent is gone already. Called by the CLI at start (cli/__init__.py)."""
    expected = os.environ.pop(PARENT_PID_ENV, None)  # not for the processes it starts in turn
    if not expected or not expected.isdigit():
        return
    try:
        parent = os.pidfd_open(int(expected))
    except (OSError, AttributeError):  # gone already, or no pidfd here (not Linux 5.3+): nothing to follow by
        parent = None
    if str(os.getppid()) != expected:  # it died before we looked
        os._exit(1)
    if parent is None:
        return

    def wait() -> None:
        select.select([parent], [], [])  # readable once the parent process has exited
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="follow-parent", daemon=True).start()


def tokenpath_argv(*args: str) -> list[str]:
    """Runs this same installation of tokenpath, whatever the PATH says."""
    return [sys.executable, "-m", "tokenpath", *args]


class ServiceProcess:
    """Output goes to a log file (never a pipe that could fill and stall the child); readiness is the first
    'listening on URL' line in it. stop() removes the log, unless the process had exited on its own with an error
    (its log is what says why: kept at `log_path`). Every load run and matrix starts one: left behind, they
    piled up in the temp dir by the thousand."""

    def __init__(self, argv: list[str], name: str, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.name = name
        self.env = env
        self.url: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "service"  # a name may hold a path
        fd, path = tempfile.mkstemp(prefix=f"tokenpath-{slug}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(path)

    def start(self, timeout_s: float = 20.0) -> str:
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(self.env or {}), PARENT_PID_ENV: str(os.getpid())},  # it follows us
                start_new_session=True,  # our Ctrl-C is handled by us, and stop() reaches the whole group
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = _LISTENING.search(self.log_path.read_text(errors="replace"))
            if m:
                self.url = m.group(1)
                return self.url
            if self._proc.poll() is not None:
                raise ServiceError(f"{self.name} exited with code {self._proc.returncode}:\n{self.log_tail()}")
            time.sleep(0.02)
        tail = self.log_tail()  # before stop() removes the log
        self.stop()
        raise ServiceError(f"{self.name} did not report 'listening on' within {timeout_s:.0f} s:\n{tail}")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stops the service and every process it started (workers, multiprocessing's resource tracker), and
        removes its log unless it had failed on its own."""
        failed = self._proc is not None and self._proc.poll() not in (None, 0)
        if self._proc is not None:
            stop_process_group(self._proc, timeout_s)
        if not failed:
            self.log_path.unlink(missing_ok=True)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def __enter__(self) -> ServiceProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def stop_process_group(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """For a process started in its own session: SIGTERM to its group and a wait, then SIGKILL to whatever is left
    of the group and of its descendants (some leave the group: squid's pinger did; multiprocessing's resource
    tracker ignores SIGTERM). Returns when every one of them has exited, so a stopped target leaves nothing running.
    """
    pgid = process.pid  # start_new_session: its pid is its process group
    below = descendants(process.pid)
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout_s)
    for proc in below:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _wait_gone(below, timeout_s)


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below `pid` (none when it is gone): those that left its group included."""
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> None:
    """Until each process has exited (a zombie has: only its parent's wait is left); a kill is asynchronous."""
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        while time.monotonic() < deadline:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:  # gone, or reaped
                break
            time.sleep(0.005)
