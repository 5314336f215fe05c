"""Client scaling: frames per second the load client takes in, against --client-workers, direct to a stub.

Each point: STREAMS closed-loop streams of TOKENS frames every INTERVAL_MS, split over N client processes, for
DURATION_S. Reports frames received per second, client CPU per frame, frames per CPU-second of the client (the
figure issue 11 sets a goal for: >= 100,000 per client process), and loop lag. On a machine with more cores the
curve shows how far `--client-workers` takes the 3,000-stream level of the first article.

--floor adds, per point, the same streams read by a client that only counts (bench/client_floor.py: no HTTP parsing,
no recorder): the frames per CPU-second of any Python client on uvloop on this machine, in the same run.

    .venv/bin/python bench/client_scaling.py [--workers 1,2] [--streams 300] [--interval-ms 5] [--floor] [--json]
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context

from tokenpath.load.runner import PROMPT
from tokenpath.load.worker import WorkerReport, Workload, run_worker
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv


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


def floor_point(url: str, workers: int, streams: int, tokens: int, duration: float) -> float:
    """Frames per CPU-second of the counting client, split over `workers` processes as the point is."""
    from client_floor import floor  # only with --floor: the bench still runs beside trees from before it

    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        runs = list(pool.map(floor, [url] * workers, [streams // workers] * workers, [tokens] * workers,
                             [duration] * workers))  # fmt: skip
    return sum(frames for frames, _ in runs) / max(sum(cpu for _, cpu in runs), 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--streams", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--floor", action="store_true", help="also the counting client's figure (bench/client_floor.py)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args()
    stub_args = ["stub", "--port", "0", "--workers", "2", "--tokens", str(a.tokens), "--interval-ms",
                 str(a.interval_ms), "--ttft-ms", "10"]  # fmt: skip
    with ServiceProcess(tokenpath_argv(*stub_args), "stub") as stub:
        assert stub.url is not None
        points = []
        if not a.json:
            print(f"# {a.streams} streams x {a.tokens} frames every {a.interval_ms:g} ms, direct to a 2-worker stub")
            print("\n| client workers | frames/s received | client CPU per frame (µs) | frames per CPU-second | "
                  "loop lag p99 ms |" + (" floor: frames per CPU-second |" if a.floor else ""))  # fmt: skip
            print("|---:|---:|---:|---:|---:|" + ("---:|" if a.floor else ""))
        for workers in map(int, a.workers.split(",")):
            rate, cpu_us, lag = point(stub.url, workers, a.streams, a.tokens, a.duration)
            per_cpu_s = 1e6 / cpu_us if cpu_us else 0.0
            points.append({"client_workers": workers, "frames_per_s": round(rate), "cpu_us_per_frame": round(cpu_us, 2),
                           "frames_per_cpu_s": round(per_cpu_s), "loop_lag_p99_ms": round(lag, 2)})  # fmt: skip
            if a.floor:
                points[-1]["floor_frames_per_cpu_s"] = round(floor_point(stub.url, workers, a.streams, a.tokens,
                                                                         a.duration))  # fmt: skip
            if not a.json:
                extra = f" {points[-1]['floor_frames_per_cpu_s']:,} |" if a.floor else ""
                print(f"| {workers} | {rate:,.0f} | {cpu_us:.1f} | {per_cpu_s:,.0f} | {lag:.1f} |{extra}", flush=True)
        if a.json:
            print(json.dumps({"streams": a.streams, "tokens": a.tokens, "interval_ms": a.interval_ms,
                              "duration_s": a.duration, "points": points}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
