"""Stub pacing drift at 100 / 500 / 1,000 concurrent streams of 14 ms frames, 1 and 2 workers.

Each level: a fresh `tokenpath stub`, RUNS rounds of N streams (40 tokens each; starts spread over one interval,
or all in the same millisecond with --lockstep), audited by the stub itself. Drift = actual - scheduled write
time over every write of every stream. Prints a Markdown table for bench/RESULTS.md.

    .venv/bin/python bench/stub_drift.py [--runs 5] [--levels 100,500,1000] [--workers 1,2] [--priority auto]
    .venv/bin/python bench/stub_drift.py --priority-ab 500 --runs 15
"""

from __future__ import annotations

import argparse
import asyncio
import platform
from typing import Any

from tokenpath.probe.aio import drain_once
from tokenpath.probe.client import ProbeConfig, new_stream_id, request_bytes
from tokenpath.serve.loops import new_event_loop
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stats import percentile
from tokenpath.stub.control import fetch_audit

TOKENS, INTERVAL_MS = 40, 14.0


def one_round(url: str, n: int, spread_s: float) -> list[str]:
    cfg = ProbeConfig(url=url)
    target = cfg.target

    async def one(k: int) -> str:
        await asyncio.sleep(k * spread_s / n)
        sid = new_stream_id()
        await drain_once(target.host, target.port, request_bytes(cfg, target, sid), timeout_s=120)
        return sid

    async def main() -> list[str]:
        return list(await asyncio.gather(*(one(k) for k in range(n))))

    loop = new_event_loop("uvloop")
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def measure(n: int, workers: int, runs: int, lockstep: bool, priority: str) -> dict[str, Any]:
    args = ["stub", "--port", "0", "--tokens", str(TOKENS), "--interval-ms", str(INTERVAL_MS)]
    args += ["--workers", str(workers), "--priority", priority]
    drifts: list[float] = []
    passed = streams = clean_runs = 0
    with ServiceProcess(tokenpath_argv(*args), "stub") as stub:
        assert stub.url is not None
        line = stub.log_tail(1)
        for _ in range(runs):
            ids = one_round(stub.url, n, 0.0 if lockstep else INTERVAL_MS / 1000)
            audit = fetch_audit(stub.url, ids)
            ok = 0
            for entry in audit.streams:
                ok += entry.verdict.passed
                if entry.log is not None:
                    drifts.extend(w.drift_ns / 1e6 for w in entry.log.writes)
            passed += ok
            streams += len(ids)
            clean_runs += ok == len(ids)
    drifts.sort()
    return {
        "n": n, "workers": workers, "p50": percentile(drifts, 50), "p99": percentile(drifts, 99),
        "p999": percentile(drifts, 99.9), "max": drifts[-1], "pass": passed / streams, "clean": clean_runs,
        "runs": runs, "priority": line.rsplit("priority ", 1)[-1].rstrip(")"),
    }  # fmt: skip


def priority_ab(n: int, runs: int) -> None:
    """Normal vs realtime stub, both running, rounds alternated so that machine noise hits both alike."""
    base = ["stub", "--port", "0", "--tokens", str(TOKENS), "--interval-ms", str(INTERVAL_MS)]
    results: dict[str, list[int]] = {"normal": [], "auto": []}
    stubs = {p: ServiceProcess(tokenpath_argv(*base, "--priority", p), f"stub-{p}") for p in results}
    try:
        for stub in stubs.values():
            stub.start()
        for _ in range(runs):
            for name, stub in stubs.items():
                assert stub.url is not None
                ids = one_round(stub.url, n, INTERVAL_MS / 1000)
                results[name].append(fetch_audit(stub.url, ids, with_log=False).failed)
    finally:
        for stub in stubs.values():
            stub.stop()
    print(f"# priority A/B at {n} streams, {runs} alternating rounds each: streams failing the audit per round")
    for name, failed in results.items():
        label = stubs[name].log_tail(1).rsplit("priority ", 1)[-1].rstrip(")")
        clean = sum(1 for f in failed if f == 0)
        print(f"- {label}: {failed} (clean rounds {clean}/{runs}, {sum(failed)} of {n * runs} streams failed)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--levels", default="100,500,1000")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--lockstep", action="store_true", help="start every stream in the same millisecond")
    ap.add_argument("--priority", default="auto")
    ap.add_argument("--priority-ab", type=int, metavar="N", help="only the normal vs realtime A/B at N streams")
    a = ap.parse_args()
    if a.priority_ab:
        priority_ab(a.priority_ab, a.runs)
        return
    print(f"# stub drift: {TOKENS} tokens x {INTERVAL_MS:g} ms, {'lock-step' if a.lockstep else 'spread'} starts, "
          f"{a.runs} runs per row; python {platform.python_version()}, {platform.machine()}")  # fmt: skip
    print(
        "\n| streams | workers | priority | drift p50 ms | p99 ms | p99.9 ms | max ms | streams passing | clean runs |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for workers in map(int, a.workers.split(",")):
        for n in map(int, a.levels.split(",")):
            r = measure(n, workers, a.runs, a.lockstep, a.priority)
            print(f"| {n} | {workers} | {r['priority']} | {r['p50']:.3f} | {r['p99']:.3f} | {r['p999']:.3f} | "
                  f"{r['max']:.1f} | {100 * r['pass']:.1f} % | {r['clean']}/{r['runs']} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
