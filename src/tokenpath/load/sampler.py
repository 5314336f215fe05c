"""CPU (cores used) and RSS of a process and all its children, sampled in a thread while a level runs."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import psutil

from tokenpath.stats import median

SAMPLE_S = 0.5


class ResourceSampler:
    def __init__(self, pid: int | None) -> None:
        self._pid = pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.cores: list[float] = []
        self.rss_mb: list[float] = []

    def __enter__(self) -> ResourceSampler:
        if self._pid is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def _tree(self, known: dict[int, psutil.Process]) -> list[psutil.Process]:
        """The process and its children, reusing the Process objects already seen: psutil measures CPU between
        two calls on the same object, and a new object's first reading is always 0."""
        if self._pid is None:
            return []
        try:
            root = known.get(self._pid) or psutil.Process(self._pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        current = []
        for proc in tree:
            if proc.pid not in known:
                known[proc.pid] = proc
                with contextlib.suppress(psutil.Error):
                    proc.cpu_percent(None)  # starts its measurement
            current.append(known[proc.pid])
        return current

    def _run(self) -> None:
        known: dict[int, psutil.Process] = {}
        self._tree(known)
        while not self._stop.wait(SAMPLE_S):
            cpu = rss = 0.0
            for proc in self._tree(known):
                try:
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
                except psutil.Error:
                    continue
            self.cores.append(cpu / 100)
            self.rss_mb.append(rss / 2**20)

    @property
    def mean_cores(self) -> float | None:
        return sum(self.cores) / len(self.cores) if self.cores else None

    @property
    def median_rss_mb(self) -> float | None:
        return median(self.rss_mb) if self.rss_mb else None


LOADAVG = "/proc/loadavg"  # its 4th field is "runnable/total" tasks right now


class HostSampler:
    """The whole host while a level runs: the share of CPU time the hypervisor took (steal) and the mean number of
    runnable tasks (the run queue, this sampler's own thread not counted), to set beside the cores there are."""

    def __init__(self, interval_s: float = SAMPLE_S, loadavg: str = LOADAVG) -> None:
        self._interval_s = interval_s
        self._loadavg = loadavg
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._before: Any = None
        self._after: Any = None
        self.runnable: list[float] = []

    def __enter__(self) -> HostSampler:
        self._before = psutil.cpu_times()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._after = psutil.cpu_times()
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                with open(self._loadavg) as f:
                    running = int(f.read().split()[3].split("/")[0])
            except (OSError, ValueError, IndexError):
                return  # not Linux: no run queue
            self.runnable.append(max(0, running - 1))  # the reader itself is running

    @property
    def steal_share(self) -> float | None:
        if self._before is None or self._after is None or not hasattr(self._after, "steal"):
            return None
        counted = [f for f in self._after._fields if f not in ("guest", "guest_nice")]  # already in user/nice
        total = sum(getattr(self._after, f) - getattr(self._before, f) for f in counted)
        return (self._after.steal - self._before.steal) / total if total > 0 else None

    @property
    def run_queue(self) -> float | None:
        return sum(self.runnable) / len(self.runnable) if self.runnable else None


def listening_pid(port: int) -> int | None:
    """The process listening on this TCP port, when this user may see it (a stub the user started: --stub-url)."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return int(conn.pid)
    except (psutil.Error, OSError):
        return None
    return None
