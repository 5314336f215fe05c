"""Client scaling: frames per second the load client takes in, against --client-workers, direct to a stub.

Each point: STREAMS closed-loop streams of TOKENS frames every INTERVAL_MS, split over N client processes, for
DURATION_S. Reports frames received per second, client CPU per frame, and loop lag. On a machine with more cores
the curve shows how far `--client-workers` takes the 3,000-stream level of the first article.

    .venv/bin/python bench/client_scaling.py [--workers 1,2] [--streams 300] [--interval-ms 5]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context

from tokenpath.load.runner import PROMPT
from tokenpath.load.worker import WorkerReport, Workload, run_worker
from tokenpath.procs import ServiceProcess, tokenpath_argv


def point(url: str, workers: int, streams: int, tokens: int, duration: float) -> tuple[float, float, float]:
    base = Workload(url, "tokenpath-stub", PROMPT, tokens, streams // workers, 1.0, duration)
    jobs = [replace(base, seed=i) for i in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        reports: list[WorkerReport] = list(pool.map(run_worker, jobs))
    frames = sum(r.frames for rep in reports for r in rep.results if r.error is None)
    cpu = sum(rep.cpu_s for rep in reports)
    lag = max(rep.lag_p99_ms for rep in reports)
    wall = max(rep.wall_s for rep in reports) - 1.0  # the warm-up second is not counted in frames either
    return frames / max(wall, 1e-9), cpu / max(frames, 1) * 1e6, lag


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--streams", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=8.0)
    a = ap.parse_args()
    stub_args = ["stub", "--port", "0", "--workers", "2", "--tokens", str(a.tokens), "--interval-ms",
                 str(a.interval_ms), "--ttft-ms", "10"]  # fmt: skip
    with ServiceProcess(tokenpath_argv(*stub_args), "stub") as stub:
        assert stub.url is not None
        print(f"# {a.streams} streams x {a.tokens} frames every {a.interval_ms:g} ms, direct to a 2-worker stub")
        print("\n| client workers | frames/s received | client CPU per frame (µs) | loop lag p99 ms |")
        print("|---:|---:|---:|---:|")
        for workers in map(int, a.workers.split(",")):
            rate, cpu_us, lag = point(stub.url, workers, a.streams, a.tokens, a.duration)
            print(f"| {workers} | {rate:,.0f} | {cpu_us:.1f} | {lag:.1f} |", flush=True)


if __name__ == "__main__":
    main()
