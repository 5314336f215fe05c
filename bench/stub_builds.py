"""Short streams' pacing while the stub builds large ones: the drift the stub's own audit records for SHORT streams of
50 frames every 10 ms, started over 2 s, while BIG requests of 100,000 tokens (of every format in turn, their shapes
not cached: each a fresh stub) arrive at once; half of the big ones are dropped by their client within 1.5 s, the
rest read for 200 KB. A big stream's shape is built before its head (stub/app.py: in slices, one build at a time);
the short streams' writes must keep their deadlines meanwhile.

Each `--src` is a tree whose `src` runs the stub (PYTHONPATH), so trees are compared in one run, alternated:

    .venv/bin/python bench/stub_builds.py --src /tmp/before/src --src src [--big 16] [--short 40] [--workers 2]

Per run: the short streams' audits passed, and the median and worst of their largest drift (ms). A stub that does
not read requests while it builds keeps its short streams on time by starting them late (their TTFB, not the
audit, holds the wait): the table shows the short streams' time to their head (TTFB p50 / max) beside the drift.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.wire.apis import Api

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.helpers import post  # the tests' request builder: one request shape for every format
from tests.stub.test_formats import BODIES, PATHS

BIG_TOKENS = 100_000
SHORT_TOKENS, SHORT_INTERVAL_MS = 50, 10


async def big(host: str, port: int, api: Api, sid: str, rng: random.Random) -> None:
    body = {**BODIES[api], "tokenpath": {"tokens": BIG_TOKENS, "ttft_ms": 1, "interval_ms": 20}}
    if api is Api.ANTHROPIC:
        body["max_tokens"] = BIG_TOKENS
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(post(PATHS[api], body, extra=f"X-Tokenpath-Stream: {sid}\r\n"))
    await asyncio.sleep(rng.random() * 1.5)
    if rng.random() < 0.5:
        writer.transport.abort()  # the client leaves: mid-build, or mid-stream
        return
    got = 0
    while got < 200_000 and (data := await asyncio.wait_for(reader.read(1 << 20), 60)):
        got += len(data)
    writer.close()


async def short(host: str, port: int, sid: str, start_s: float) -> float:
    """The stream's time to its head (s)."""
    await asyncio.sleep(start_s)
    body = {**BODIES[Api.OPENAI], "user": sid, "tokenpath": {"tokens": SHORT_TOKENS, "ttft_ms": 5, "interval_ms": 10}}
    reader, writer = await asyncio.open_connection(host, port)
    sent = time.monotonic()
    writer.write(post(PATHS[Api.OPENAI], body))
    head = await reader.read(65536)
    headed = time.monotonic()
    while head and await reader.read(65536):
        pass
    writer.close()
    return headed - sent


def one_run(src: str, n_big: int, n_short: int, workers: int, seed: int) -> dict[str, float]:
    env = {"PYTHONPATH": os.path.abspath(src)}
    stub = ServiceProcess(tokenpath_argv("stub", "--port", "0", "--workers", str(workers)), "stub", env=env)
    url = stub.start()
    try:
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        rng = random.Random(seed)
        apis = list(PATHS)
        starts = [rng.random() * 2 for _ in range(n_short)]

        async def main() -> list[float]:
            bigs = [big(host, int(port), apis[i % len(apis)], f"big{i}", rng) for i in range(n_big)]
            shorts = [short(host, int(port), f"short{i}", starts[i]) for i in range(n_short)]
            results = await asyncio.gather(*bigs, *shorts)
            return [r for r in results if isinstance(r, float)]

        ttfb = asyncio.run(main())
        time.sleep(0.5)
        ids = ",".join(f"short{i}" for i in range(n_short))
        with urllib.request.urlopen(f"{url}/_tokenpath/audit?ids={ids}&log=0", timeout=60) as answer:
            verdicts = [s["verdict"] for s in json.load(answer)["streams"]]
    finally:
        stub.stop()
    worst = sorted(v["drift_ms"]["max"] for v in verdicts)
    return {
        "passed": sum(1 for v in verdicts if v["passed"]),
        "audited": len(verdicts),
        "drift_max_p50": statistics.median(worst),
        "drift_max_worst": worst[-1],
        "ttfb_p50": statistics.median(ttfb) * 1e3,
        "ttfb_max": max(ttfb) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", action="append", required=True, help="a tree's src directory (repeat to compare)")
    ap.add_argument("--big", type=int, default=16)
    ap.add_argument("--short", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print("| tree | run | short audits passed | drift max, median / worst (ms) | TTFB p50 / max (ms) |")
    print("|---|---|---|---|---|")
    for run in range(args.runs):
        for src in args.src:
            r = one_run(src, args.big, args.short, args.workers, seed=run)
            print(
                f"| {src} | {run + 1} | {r['passed']:.0f} of {r['audited']:.0f} | {r['drift_max_p50']:.1f} / "
                f"{r['drift_max_worst']:.1f} | {r['ttfb_p50']:.0f} / {r['ttfb_max']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
