"""A test-only harness that COUNTS the load client's Python calls per read and per frame (counts, not timings: exact
enough on a loaded machine). One in-process stub, the closed-loop client (load/worker.py) on the same loop; cProfile
is enabled only while the client's own code runs for a stream:

- `read_calls`: inside the HTTP/1.1 protocol's data_received (probe/aio.py): the per-read path (clock, the
  recorder's llhttp feed, first-content detection until found, the body's marks);
- `check_calls`: inside the end-of-stream integrity check (load/integrity.py check_body), which reads every frame
  once: the client's per-frame work that is not per read.

bench/loop_iterations.py --client-calls prints them; tests/load/test_client_counts.py holds them to bounds."""

from __future__ import annotations

import asyncio
import cProfile
import pstats
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenpath.load import worker
from tokenpath.load.integrity import check_body
from tokenpath.load.runner import PROMPT
from tokenpath.load.worker import Workload, closed_loop
from tokenpath.probe import aio
from tokenpath.stub.config import StubConfig
from tokenpath.stub.server import StubServer


@dataclass
class ClientCounts:
    reads: int = 0
    frames: int = 0
    streams: int = 0
    read_calls: int = 0
    check_calls: int = 0

    @property
    def calls_per_read(self) -> float:
        return self.read_calls / self.reads

    @property
    def calls_per_frame(self) -> float:
        """Everything the client's per-stream path does per frame it received: its reads' and its check's."""
        return (self.read_calls + self.check_calls) / self.frames


def _calls(profile: cProfile.Profile) -> int:
    return sum(entry[1] for entry in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]


async def _run(tokens: int, streams: int, seconds: float, counts: ClientCounts) -> None:
    stub = StubServer(StubConfig(port=0, tokens=tokens, ttft_ms=5, interval_ms=5))  # mostly a frame per read
    await stub.start()
    reads, checks = cProfile.Profile(), cProfile.Profile()
    received = aio._StreamProtocol.data_received

    def measured_read(self: aio._StreamProtocol[Any], data: bytes) -> None:
        counts.reads += 1
        reads.enable()
        try:
            received(self, data)
        finally:
            reads.disable()

    def measured_check(*args: Any, **kwargs: Any) -> Any:
        checks.enable()
        try:
            return check_body(*args, **kwargs)
        finally:
            checks.disable()

    patched: list[tuple[Any, str, Callable[..., Any], Callable[..., Any]]] = [
        (aio._StreamProtocol, "data_received", measured_read, received),
        (worker, "check_body", measured_check, check_body),  # as load/worker.py imported it
    ]
    for owner, name, replacement, _ in patched:
        setattr(owner, name, replacement)
    try:
        work = Workload(stub.url, "tokenpath-stub", PROMPT, tokens, streams, 0.0, seconds)
        report = await closed_loop(work)
    finally:
        for owner, name, _, original in patched:
            setattr(owner, name, original)
        await stub.close()
    done = [r for r in report.results if r.error is None]
    assert done, [r.error for r in report.results]
    counts.streams = len(done)
    counts.frames = sum(r.frames for r in report.results)
    counts.read_calls, counts.check_calls = _calls(reads), _calls(checks)


def count(tokens: int = 64, streams: int = 4, seconds: float = 1.0) -> ClientCounts:
    """Counts for the client's HTTP/1.1 streams of `tokens` tokens from an in-process stub (reads of every stream,
    those begun before the measured window's start too: the window here is the whole run)."""
    asyncio.run(_run(tokens, streams, 0.2, ClientCounts()))  # imports and first-time caches out of the way
    counts = ClientCounts()
    asyncio.run(_run(tokens, streams, seconds, counts))
    return counts
