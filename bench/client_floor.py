"""The floor of any load client in Python on uvloop, for bench/client_scaling.py --floor: the same closed-loop streams
(a connection each, the load client's own request bytes) read by a Protocol that only counts, no HTTP parsing, no
recorder, no result: one time stamp and one count per read, as every real client takes. What is left between it and
the load client is the client's own Python; what it costs itself is the event loop's and the kernel's.

Written by hand because it is the measurement: no library is this small."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import cast

from tokenpath.load.runner import PROMPT
from tokenpath.load.worker import Workload, _probe_config
from tokenpath.probe.client import new_stream_id, request_bytes
from tokenpath.serve.loops import new_event_loop

WARMUP_S = 1.0  # as client_scaling's points: streams that start in it are not counted, its CPU is


class _Counter(asyncio.Protocol):
    def __init__(self, request: bytes, done: asyncio.Future[int]) -> None:
        self._request, self._done, self._frames = request, done, 0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is none of asyncio's classes
        self._transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        time.monotonic_ns()  # the arrival stamp every client takes per read
        self._frames += data.count(b"\n\n")
        if data.endswith(b"0\r\n\r\n") and not self._done.done():  # the stub's chunked body ended
            self._done.set_result(self._frames)
            assert self._transport is not None
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(self._frames)
        self._transport = None


async def _closed_loop(url: str, streams: int, tokens: int, duration: float) -> tuple[int, float]:
    cfg = _probe_config(Workload(url, "tokenpath-stub", PROMPT, tokens, streams, WARMUP_S, duration))
    target = cfg.target
    host, port = target.host, target.port
    # The load client's request, its stream id swapped per stream (as probe/client.py StreamRequests does; built
    # here so that the floor runs beside trees from before it, with any tree's src on PYTHONPATH).
    placeholder = new_stream_id()
    template = request_bytes(cfg, target, placeholder)
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from, stop_at = start + WARMUP_S, start + WARMUP_S + duration
    frames = 0

    async def user(k: int) -> None:
        nonlocal frames
        await asyncio.sleep(k * WARMUP_S / streams)
        while loop.time() < stop_at:
            counted = loop.time() >= measure_from
            done: asyncio.Future[int] = loop.create_future()
            request = template.replace(placeholder.encode(), new_stream_id().encode())
            await loop.create_connection(functools.partial(_Counter, request, done), host, port)
            got = await done
            if counted:
                frames += got

    cpu = time.process_time()
    await asyncio.gather(*(user(k) for k in range(streams)))
    return frames, time.process_time() - cpu


def floor(url: str, streams: int, tokens: int, duration: float) -> tuple[int, float]:
    """Frames counted and the process's CPU seconds (warm-up included, as run_worker counts it) for `streams`
    closed-loop streams of `tokens` frames over `duration` s after a WARMUP_S second: a client process's whole job."""
    loop = new_event_loop("uvloop")
    try:
        return loop.run_until_complete(_closed_loop(url, streams, tokens, duration))
    finally:
        loop.close()
