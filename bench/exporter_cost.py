"""The exporter's own cost per probe: CPU (user + system) of the `tokenpath monitor --exporter` process over N
`/probe` requests against one `tokenpath stub` (direct, each stream 32 tokens 14 ms apart after a 90 ms TTFT, as
bench/monitor_cost.py's), sent `--concurrency` at a time, for each metric naming; and its RSS before and after.
The first WARMUP probes (imports, first connections) are not counted.

    .venv/bin/python bench/exporter_cost.py [--probes 100] [--concurrency 1,4] [--names tokenpath,otel] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil

from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

WARMUP = 5
STUB = ("stub", "--port", "0", "--api", "openai", "--tokens", "32", "--interval-ms", "14", "--ttft-ms", "90")


def one_probe(url: str) -> bool:
    request = urllib.request.Request(url, headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"})
    with urllib.request.urlopen(request, timeout=15) as response:
        return b"probe_success 1.0" in response.read()


def run(stub_url: str, probes: int, concurrency: int, names: str) -> dict[str, Any]:
    argv = tokenpath_argv("monitor", "--exporter", "--metrics-listen", "127.0.0.1:0", "--allow", "http://127.0.0.1:*",
                          "--metric-names", names, "--max-concurrency", str(max(concurrency, 1)),
                          "--log-level", "warning")  # fmt: skip
    exporter = ServiceProcess(argv, f"exporter-{names}-{concurrency}")
    base = exporter.start()
    assert exporter.pid is not None
    proc = psutil.Process(exporter.pid)
    url = f"{base}/probe?" + urllib.parse.urlencode({"target": f"{stub_url}/v1"})
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            assert all(pool.map(one_probe, [url] * WARMUP))
            rss0 = proc.memory_info().rss / 2**20
            cpu0 = sum(proc.cpu_times()[:2])
            t0 = time.monotonic()
            ok = sum(pool.map(one_probe, [url] * probes))
            wall = time.monotonic() - t0
            cpu = sum(proc.cpu_times()[:2]) - cpu0
            rss1 = proc.memory_info().rss / 2**20
    finally:
        exporter.stop()
    return {
        "names": names, "concurrency": concurrency, "probes": probes, "ok": ok, "seconds": round(wall, 2),
        "cpu_ms_per_probe": round(cpu * 1000 / probes, 2), "rss_mb_start": round(rss0, 1),
        "rss_mb_end": round(rss1, 1),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probes", type=int, default=100)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--names", default="tokenpath,otel")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    stub = ServiceProcess(tokenpath_argv(*STUB), "stub")
    stub_url = stub.start()
    try:
        runs = [run(stub_url, args.probes, int(c), n) for n in args.names.split(",")
                for c in args.concurrency.split(",")]  # fmt: skip
    finally:
        stub.stop()
    if args.json:
        print(json.dumps(runs, indent=1))
        return
    print("| names | concurrency | probes ok | seconds | CPU ms per probe | RSS MB start -> end |")
    print("|---|---:|---:|---:|---:|---|")
    for r in runs:
        print(f"| {r['names']} | {r['concurrency']} | {r['ok']} / {r['probes']} | {r['seconds']} | "
              f"{r['cpu_ms_per_probe']} | {r['rss_mb_start']} -> {r['rss_mb_end']} |")  # fmt: skip


if __name__ == "__main__":
    main()
