"""load/worker.py run_worker: the collector's young-generation threshold is YOUNG_GC_THRESHOLD while the worker's
loop runs (a pass stops every stream in flight: fewer of them), and is put back after, however the run ends."""

from __future__ import annotations

import gc

import pytest

from tokenpath.load import worker
from tokenpath.load.worker import YOUNG_GC_THRESHOLD, WorkerReport, Workload, run_worker

WORK = Workload("http://127.0.0.1:9", "tokenpath-stub", "hi", 4, 1, 0.0, 0.1)


def test_the_run_has_the_higher_threshold_and_the_caller_gets_its_own_back(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []

    async def closed_loop(work: Workload) -> WorkerReport:
        seen.append(gc.get_threshold())
        return WorkerReport([], 0.0, 0.0, 0.0)

    monkeypatch.setattr(worker, "closed_loop", closed_loop)
    before = gc.get_threshold()
    assert before[0] != YOUNG_GC_THRESHOLD  # the interpreter's own (700): the test tells the two apart
    run_worker(WORK)
    assert seen == [(YOUNG_GC_THRESHOLD, *before[1:])]
    assert gc.get_threshold() == before


def test_a_run_that_fails_puts_the_threshold_back(monkeypatch: pytest.MonkeyPatch) -> None:
    async def closed_loop(work: Workload) -> WorkerReport:
        raise RuntimeError("planted")

    monkeypatch.setattr(worker, "closed_loop", closed_loop)
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="planted"):
        run_worker(WORK)
    assert gc.get_threshold() == before
