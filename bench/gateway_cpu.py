"""Gateway CPU per relayed frame, two source trees side by side: the same stub, one gateway per tree started from
that tree (PYTHONPATH), the same closed-loop load through each in turn, interleaved over rounds. CPU is the gateway
process's own user+system time over the measured window (psutil), divided by the frames its clients received.

    .venv/bin/python bench/gateway_cpu.py --src /tmp/base/src --src src [--streams 50] [--seconds 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from tokenpath.load.runner import PROMPT
from tokenpath.load.worker import Workload, run_worker
from tokenpath.proxies.base import free_port
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv


def gateway(src: str, upstream: str) -> ServiceProcess:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    argv = [sys.executable, "-m", "tokenpath", "gateway", "--listen", f"127.0.0.1:{port}", "--upstream", upstream,
            "--no-auth", "--log-level", "warning"]  # fmt: skip
    return ServiceProcess(argv, f"gateway ({src})", env=env)


def measure(url: str, pid: int, streams: int, seconds: float) -> tuple[float, int]:
    proc = psutil.Process(pid)
    work = Workload(url, "tokenpath-stub", PROMPT, 128, streams, 1.0, seconds)
    marks: dict[str, float] = {}

    def mark_after_warmup() -> None:
        time.sleep(1.0)
        t = proc.cpu_times()
        marks["start"] = t.user + t.system

    timer = threading.Thread(target=mark_after_warmup)
    timer.start()
    report = run_worker(work)
    t = proc.cpu_times()
    timer.join()
    frames = sum(r.frames for r in report.results if r.error is None)
    return t.user + t.system - marks["start"], frames


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", required=True, help="a tokenpath source tree's src/ (repeat)")
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    stub = ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub")
    stub_url = stub.start()
    up = urlsplit(stub_url)
    gateways = [gateway(src, f"http://{up.hostname}:{up.port}") for src in args.src]
    try:
        urls = [g.start() for g in gateways]
        results: dict[str, list[float]] = {src: [] for src in args.src}
        for _ in range(args.rounds):
            for src, g, url in zip(args.src, gateways, urls, strict=True):
                assert g.pid is not None
                cpu_s, frames = measure(url, g.pid, args.streams, args.seconds)
                results[src].append(cpu_s / frames * 1e6 if frames else float("nan"))
        print(f"gateway CPU per relayed frame (us), {args.streams} streams x 128 tokens every 14 ms, "
              f"{args.seconds:g} s per measurement, {args.rounds} rounds interleaved:")  # fmt: skip
        for src, values in results.items():
            print(f"  {src}: " + " / ".join(f"{v:.1f}" for v in values))
    finally:
        for g in gateways:
            g.stop()
        stub.stop()


if __name__ == "__main__":
    main()
