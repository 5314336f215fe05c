"""The load client's streams leave no reference cycle behind (nor does the stub serving them): once a stream's
result is taken and its connection is gone, reference counting frees its protocol, its recorder, the client core
and its parser. A cycle is freed only by the cyclic collector, whose passes stall the client's loop (a loop lag
every stream's timestamps would carry) and cost it CPU per frame (bench/RESULTS.md).

The stub and the closed-loop client share one uvloop loop in process, with the collector off and DEBUG_SAVEALL: after
the streams, one collection lists everything that only a cycle kept."""

from __future__ import annotations

import asyncio
import gc

import uvloop

from tests.helpers import garbage_kept, left_in_cycles
from tokenpath.load.runner import PROMPT
from tokenpath.load.worker import Workload, closed_loop
from tokenpath.stub.config import StubConfig
from tokenpath.stub.server import StubServer


async def _streams_then_collect() -> None:
    stub = StubServer(StubConfig(port=0, tokens=8, ttft_ms=5, interval_ms=5))
    await stub.start()
    try:
        await closed_loop(Workload(stub.url, "tokenpath-stub", PROMPT, 8, 4, 0.0, 0.2))  # first-time caches
        gc.collect()
        gc.garbage.clear()
        report = await closed_loop(Workload(stub.url, "tokenpath-stub", PROMPT, 8, 4, 0.0, 0.5))
        assert len(report.results) >= 4  # each user one stream at least (more on an idle host)
        assert all(r.error is None for r in report.results), report.results[:3]
        for _ in range(5):  # the last connections' connection_lost run in later iterations
            await asyncio.sleep(0.01)
        gc.collect()
        left = left_in_cycles(gc.garbage)
        assert not left, f"left in reference cycles after {len(report.results)} streams: {left}"
    finally:
        await stub.close()


def test_the_load_clients_streams_leave_no_reference_cycle() -> None:
    with garbage_kept():
        uvloop.run(_streams_then_collect())
