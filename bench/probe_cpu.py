"""Client CPU per 10,000 frames: the blocking probe (one stream) and the asyncio client (many streams), both on
the same TraceRecorder. The stub sends plain 60-byte frames every 0.1 ms so that the client is the bottleneck.

    .venv/bin/python bench/probe_cpu.py [--frames 10000] [--streams 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from tokenpath.probe.aio import stream_once
from tokenpath.probe.client import ProbeConfig, new_stream_id, request_bytes
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.serve.loops import new_event_loop
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stats import median


def blocking_probe(url: str) -> tuple[float, int, int]:
    cpu = time.process_time()
    metrics = run_metrics(probe_stream(ProbeConfig(url=url)))
    return time.process_time() - cpu, metrics.frames, metrics.arrivals


def asyncio_client(url: str, streams: int) -> tuple[float, int, float]:
    cfg = ProbeConfig(url=url)
    target = cfg.target

    async def main() -> int:
        jobs = []
        for _ in range(streams):
            sid = new_stream_id()
            jobs.append(stream_once(target.host, target.port, request_bytes(cfg, target, sid), sid, timeout_s=120))
        traces = await asyncio.gather(*jobs)
        return sum(len(t.frames) for t in traces)

    loop = new_event_loop("uvloop")
    cpu, wall = time.process_time(), time.monotonic()
    try:
        frames = loop.run_until_complete(main())
    finally:
        loop.close()
    return time.process_time() - cpu, frames, time.monotonic() - wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=10_000)
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    args = ["stub", "--port", "0", "--format", "plain", "--frame-bytes", "60", "--ttft-ms", "0"]
    with ServiceProcess(tokenpath_argv(*args, "--tokens", str(a.frames), "--interval-ms", "0.1"), "stub") as stub:
        assert stub.url is not None
        runs = [blocking_probe(stub.url) for _ in range(a.repeat)]
    per10k = [cpu / frames * 10_000 * 1000 for cpu, frames, _ in runs]
    print(f"blocking probe, 1 stream of {a.frames} x 60 B frames every 0.1 ms, {a.repeat} runs:")
    print(f"  CPU per 10k frames: median {median(per10k):.1f} ms (runs: {', '.join(f'{x:.1f}' for x in per10k)}); "
          f"arrivals per run: {[r[2] for r in runs]}")  # fmt: skip
    per_stream = a.frames // a.streams
    with ServiceProcess(tokenpath_argv(*args, "--tokens", str(per_stream), "--interval-ms", "1"), "stub") as stub:
        assert stub.url is not None
        aruns = [asyncio_client(stub.url, a.streams) for _ in range(a.repeat)]
    per10k = [cpu / frames * 10_000 * 1000 for cpu, frames, _ in aruns]
    rate = [frames / cpu for cpu, frames, _ in aruns]
    print(f"asyncio client, {a.streams} streams x {per_stream} frames every 1 ms, {a.repeat} runs:")
    print(f"  CPU per 10k frames: median {median(per10k):.1f} ms; frames per CPU-second: median {median(rate):,.0f}")


if __name__ == "__main__":
    main()
