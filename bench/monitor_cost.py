"""The monitor's own cost: CPU and RSS of `tokenpath monitor` probing N targets every INTERVAL seconds for DURATION,
for each N given, side by side in one run (the targets are distinct names on one `tokenpath stub`, each stream
32 tokens 14 ms apart after a 90 ms TTFT, so a probe lasts ~0.5 s as against a real model's few seconds). CPU is the
monitor process's own user + system time over the window; RSS is sampled every 0.5 s (psutil).

    .venv/bin/python bench/monitor_cost.py [--targets 1,10] [--interval 5] [--duration 600] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from tokenpath.load.sampler import SAMPLE_S
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv


def run_monitor(stub_url: str, targets: int, interval: float, duration: float) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="tokenpath-monbench-"))
    config = folder / "monitor.toml"
    lines = [f'[monitor]\ninterval_s = {interval}\nmetrics_listen = "127.0.0.1:0"\nmax_concurrency = 4\n']
    lines += [f'[[target]]\nname = "t{i}"\nurl = "{stub_url}"\n' for i in range(targets)]
    config.write_text("\n".join(lines))
    monitor = ServiceProcess(tokenpath_argv("monitor", str(config), "--log-level", "warning"), f"monitor-{targets}")
    metrics_url = monitor.start()
    assert monitor.pid is not None
    proc = psutil.Process(monitor.pid)
    rss: list[float] = []
    try:
        t0 = time.monotonic()
        cpu0 = sum(proc.cpu_times()[:2])
        while time.monotonic() - t0 < duration:
            rss.append(proc.memory_info().rss / 2**20)
            time.sleep(SAMPLE_S)
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        wall = time.monotonic() - t0
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode()
        fds = proc.num_fds()
        threads = proc.num_threads()
    finally:
        monitor.stop()
    ok = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.startswith("tokenpath_monitor_probes_total{") and 'outcome="ok"' in line)  # fmt: skip
    failed = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("tokenpath_monitor_probes_total{") and 'outcome="ok"' not in line)  # fmt: skip
    minute = int(60 / SAMPLE_S)
    return {
        "targets": targets, "interval_s": interval, "seconds": round(wall, 1), "probes_ok": ok, "probes_failed": failed,
        "cpu_cores": round(cpu / wall, 5), "cpu_ms_per_probe": round(cpu * 1000 / max(ok + failed, 1), 2),
        "rss_mb_start": round(rss[0], 1), "rss_mb_end": round(rss[-1], 1),
        "rss_mb_per_minute_peak": [round(max(rss[i : i + minute]), 1) for i in range(0, len(rss), minute)],
        "fds_end": fds, "threads_end": threads,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="1,10")
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    stub = ServiceProcess(tokenpath_argv("stub", "--port", "0", "--tokens", "32"), "stub")
    stub_url = stub.start()
    try:
        runs = [run_monitor(stub_url, int(n), args.interval, args.duration) for n in args.targets.split(",")]
    finally:
        stub.stop()
    if args.json:
        print(json.dumps(runs, indent=1))
        return
    print(
        "| targets | probes ok / failed | CPU (cores) | CPU ms per probe | RSS MB start -> end | RSS per-minute peaks |"
    )
    print("|---:|---|---:|---:|---|---|")
    for r in runs:
        print(f"| {r['targets']} | {r['probes_ok']:.0f} / {r['probes_failed']:.0f} | {r['cpu_cores']:.4f} | "
              f"{r['cpu_ms_per_probe']} | {r['rss_mb_start']} -> {r['rss_mb_end']} | "
              f"{', '.join(map(str, r['rss_mb_per_minute_peak']))} |")  # fmt: skip


if __name__ == "__main__":
    main()
