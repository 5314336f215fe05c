"""CPU (cores used) and RSS of a process and all its children, sampled in a thread while a level runs."""

from __future__ import annotations

import contextlib
import threading

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
