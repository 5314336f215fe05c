"""Gateway soak: STREAMS closed-loop streams through `tokenpath gateway` for DURATION_S; the gateway's RSS sampled
every half second (psutil, the whole process tree) and reported per minute, with the slope of a least-squares line
over the second half (after warm-up) and every stream's outcome. Memory that grows per stream shows as a slope.

    .venv/bin/python bench/gateway_soak.py [--streams 200] [--duration 600] [--variant stock|jwt]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

from tokenpath.load.runner import PROMPT
from tokenpath.load.sampler import SAMPLE_S, ResourceSampler
from tokenpath.load.worker import Workload, run_worker
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.proxies.catalogue import lookup
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv


def slope_mb_per_min(samples: list[float]) -> float:
    n = len(samples)
    xs = [i * SAMPLE_S / 60 for i in range(n)]
    mx, my = sum(xs) / n, sum(samples) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, samples, strict=True)) / var if var else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--variant", default="stock")
    ap.add_argument("--out", default="bench/out/gateway-soak.json")
    args = ap.parse_args()

    stub = ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub")
    url = stub.start()
    up = urlsplit(url)
    assert up.hostname is not None
    assert up.port is not None
    proxy = lookup("gateway")
    site = Site(Endpoint("127.0.0.1", free_port()), Endpoint(up.hostname, up.port), new_workdir("gateway"),
                proxy.variant(args.variant))  # fmt: skip
    running = start(proxy, site)
    assert running.process is not None  # started here, not attached
    try:
        work = Workload(running.url, "tokenpath-stub", PROMPT, 128, args.streams, 5.0, args.duration,
                        api_key=proxy.api_key(site))  # fmt: skip
        t0 = time.monotonic()
        with ResourceSampler(running.process.pid) as sampler:
            report = run_worker(work)
        wall = time.monotonic() - t0
    finally:
        running.stop()
        stub.stop()
    rss = sampler.rss_mb
    per_minute = [round(max(rss[i : i + int(60 / SAMPLE_S)]), 1) for i in range(0, len(rss), int(60 / SAMPLE_S))]
    second_half = rss[len(rss) // 2 :]
    streams = len(report.results)
    errors = sum(1 for r in report.results if r.error)
    lost = sum(r.lost for r in report.results)
    result = {
        "streams_concurrent": args.streams, "duration_s": args.duration, "wall_s": round(wall, 1),
        "streams_completed": streams, "errors": errors, "frames_lost": lost, "variant": args.variant,
        "rss_mb_first": round(rss[0], 1) if rss else None, "rss_mb_max": round(max(rss), 1) if rss else None,
        "rss_mb_per_minute_peak": per_minute,
        "rss_slope_mb_per_min_second_half": round(slope_mb_per_min(second_half), 3) if len(second_half) > 2 else None,
        "cpu_cores_mean": round(sum(sampler.cores) / len(sampler.cores), 3) if sampler.cores else None,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
