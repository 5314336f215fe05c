"""A load stream's timeout follows the stub's pacing (worker.stream_timeout_s): a target that accepts and never
answers held every stream, and so each level, for STREAM_TIMEOUT_S (120 s) whatever --duration said, and its row read
0/0, as if clean. Now each such stream fails at three times the stream's length plus a margin, counted."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from tokenpath.load.runner import Cell, LoadConfig, LoadRunner
from tokenpath.load.worker import STREAM_MARGIN_S, STREAM_TIMEOUT_S, Workload, closed_loop, stream_timeout_s
from tokenpath.serve.loops import new_event_loop
from tokenpath.stub.config import Pacing


def test_the_timeout_is_three_stream_lengths_and_a_margin_at_most_the_old_bound() -> None:
    assert stream_timeout_s(1000.0) == STREAM_MARGIN_S + 3.0
    assert stream_timeout_s(0.0) == STREAM_MARGIN_S
    assert stream_timeout_s(3_600_000.0) == STREAM_TIMEOUT_S  # an hour-long stream: the bound it always had


def test_a_level_against_a_target_that_never_answers_ends_near_its_bound_with_every_stream_counted() -> None:
    held: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, read nothing, answered nothing

    async def scenario() -> tuple[float, list[str | None]]:
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        work = Workload(f"http://127.0.0.1:{port}", "tokenpath-stub", "hi", 8, 2, 0.0, 0.5, stream_timeout_s=1.0)
        started = time.monotonic()
        try:
            report = await closed_loop(work)
        finally:
            server.close()
            for writer in held:
                writer.close()
        return time.monotonic() - started, [r.error for r in report.results]

    loop = new_event_loop("uvloop")
    try:
        took, errors = loop.run_until_complete(asyncio.wait_for(scenario(), 60))
    finally:
        loop.close()
    assert took < 30  # the level: its 0.5 s and one stream's 1 s timeout, not STREAM_TIMEOUT_S (120 s)
    assert errors  # every stream is a failure the row counts
    assert all(error is not None for error in errors), errors


def test_the_runner_gives_each_workload_the_timeout_of_its_stubs_pacing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Workload] = []

    class Captured(Exception):
        pass

    def clients(self: LoadRunner, work: Workload, cell: Cell, stub_url: str) -> list[object]:
        seen.append(work)
        raise Captured

    pacing = replace(Pacing(), tokens=40, ttft_ms=100.0, interval_ms=50.0)  # a 2.1 s stream
    cfg = LoadConfig(targets=("direct",), levels=(2,), pacing=pacing, client_workers=1)
    runner = LoadRunner(cfg, tmp_path, Console(quiet=True))
    monkeypatch.setattr(LoadRunner, "_clients", clients)
    with pytest.raises(Captured):
        runner._measure(Cell("direct", 2.0), "http://127.0.0.1:9/v1", None, "http://127.0.0.1:9", None)
    assert [w.stream_timeout_s for w in seen] == [stream_timeout_s(pacing.stream_ms)]
    assert seen[0].stream_timeout_s == pytest.approx(STREAM_MARGIN_S + 3 * 2.1)
