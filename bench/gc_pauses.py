"""The cyclic garbage collector's passes in a running gateway, side by side: how many per generation, and how long
each paused the worker, under the same closed-loop load of short streams through one gateway per source tree.

A pass stops the worker's event loop: every stream in flight waits through it, so a 5 ms pass is 5 ms on the first
token of every stream whose token was due then (the p99 of added TTFT shows it). Reference counting frees what a
request leaves only if nothing it made is in a reference cycle (tests/gateway/test_no_cycles.py); what is, waits for
a pass, and keeps the young generation full, so passes come often.

    .venv/bin/python bench/gc_pauses.py --src /tmp/base/src --src src [--streams 50] [--tokens 8] [--seconds 6]

Each gateway runs `tokenpath gateway` from its tree (PYTHONPATH) through a wrapper that times every pass with
gc.callbacks and writes them out on SIGUSR1; the passes during the warm-up second are dropped (SIGUSR2)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path

from tokenpath.load.runner import PROMPT
from tokenpath.load.worker import Workload, run_worker
from tokenpath.proxies import base
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

WARMUP_S = 1.0

# Run in the gateway's process (python -c): times each collector pass, in microseconds, by generation.
_TIMED_GATEWAY = """
import gc, json, os, signal, sys, time
out = sys.argv[1]
sys.argv = ["tokenpath", *sys.argv[2:]]
pauses = {0: [], 1: [], 2: []}
started = [0.0]
def timed(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        pauses[info["generation"]].append((time.perf_counter() - started[0]) * 1e6)
gc.callbacks.append(timed)
def write(*_):
    with open(out, "w") as fh:
        json.dump(pauses, fh)
    os._exit(0)
signal.signal(signal.SIGUSR1, write)
signal.signal(signal.SIGUSR2, lambda *_: [p.clear() for p in pauses.values()])
from tokenpath.cli import main
main()
"""


def measure(src: str, stub_url: str, streams: int, tokens: int, seconds: float) -> tuple[dict[str, list[float]], int]:
    """The passes (us, by generation) during `seconds` of load through a gateway run from `src`; streams done."""
    out = base.new_workdir("gc-pauses") / "pauses.json"
    argv = [sys.executable, "-c", _TIMED_GATEWAY, str(out), "gateway", "--listen", f"127.0.0.1:{base.free_port()}",
            "--no-auth", "--log-level", "warning", "--upstream", stub_url]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    proc = ServiceProcess(argv, f"gateway ({src})", env=env)
    url = proc.start()
    assert proc.pid is not None
    try:
        run_worker(Workload(url, "tokenpath-stub", PROMPT, tokens, streams, 0.0, WARMUP_S))
        os.kill(proc.pid, signal.SIGUSR2)  # the warm-up's passes (imports, first connections) dropped
        report = run_worker(Workload(url, "tokenpath-stub", PROMPT, tokens, streams, 0.0, seconds))
        os.kill(proc.pid, signal.SIGUSR1)
        for _ in range(100):
            if out.exists() and out.stat().st_size:
                break
            time.sleep(0.05)
        pauses: dict[str, list[float]] = json.loads(out.read_text())
    finally:
        proc.stop()
        shutil.rmtree(out.parent, ignore_errors=True)  # the passes are read: no directory left per run
    return pauses, sum(1 for r in report.results if r.error is None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", required=True, help="a tokenpath source tree's src/ (repeat)")
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=8, help="tokens per stream (short: the request's objects weigh)")
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    if args.streams < 1 or args.tokens < 1 or args.seconds <= 0:
        ap.error("--streams and --tokens take at least 1, --seconds more than 0")
    stub = ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub")
    stub_url = stub.start().rstrip("/")
    try:
        print(f"collector passes in {args.seconds:g} s, {args.streams} streams x {args.tokens} tokens:")
        for src in args.src:
            pauses, streams = measure(src, stub_url, args.streams, args.tokens, args.seconds)
            parts = []
            for generation in ("0", "1", "2"):
                times = pauses.get(generation, [])
                if times:
                    parts.append(f"gen {generation}: {len(times)} passes, median {statistics.median(times):.0f} us, "
                                 f"max {max(times):.0f} us, {sum(times) / 1e3:.1f} ms in all")  # fmt: skip
                else:
                    parts.append(f"gen {generation}: none")
            print(f"  {src} ({streams} streams): " + "; ".join(parts))
    finally:
        stub.stop()


if __name__ == "__main__":
    main()
