"""CPU (cores used) and RSS of a process and all its children, sampled in a thread while a level runs."""

from __future__ import annotations

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

    def _procs(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self._pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _run(self) -> None:
        procs = self._procs()
        for p in procs:
            p.cpu_percent(None)  # the first call only starts the measurement
        while not self._stop.wait(SAMPLE_S):
            fresh = {p.pid: p for p in self._procs()}
            for pid, p in fresh.items():
                if pid not in {q.pid for q in procs}:
                    p.cpu_percent(None)
            procs = list(fresh.values())
            cpu = rss = 0.0
            for p in procs:
                try:
                    cpu += p.cpu_percent(None)
                    rss += p.memory_info().rss
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
