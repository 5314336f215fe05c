"""HTTP/2 against HTTP/1.1 keep-alive from the gateway to its upstream, side by side in one run.

One upstream that speaks both (hypercorn serving tests/gateway/peers/asgi_sse.py; h1 and h2c prior knowledge on one
port, or h1 and h2 by ALPN with --tls), two gateways in front of it that differ only in the pool's `protocol`, and
the direct path. For each concurrency level and run, the targets take turns (rotated per run) under the same
closed-loop load: `streams` virtual users, each opening a connection, sending one streamed chat request (first
token after `interval_ms`, then `tokens - 1` more) and timing the first content frame. Added TTFT = a target's
TTFT percentile minus the direct path's in the same run. Gateway CPU from psutil over each window.

    .venv/bin/python bench/h2_upstream.py [--streams 50,200] [--runs 5] [--seconds 4] [--tls] [--nginx] [--json]

With --nginx, Debian's nginx joins as a target: HTTP/1.1 keep-alive to the same upstream (an upstream block with
`keepalive 64`), `proxy_buffering off`, and with --tls `proxy_pass https://` verifying the upstream's certificate
(`proxy_ssl_verify on`, `proxy_ssl_session_reuse on`, the default): the reference for the TLS upstream path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tokenpath.proxies.base import free_port
from tokenpath.serve.loops import new_event_loop
from tokenpath.serve.procs import ServiceProcess, stop_process_group, tokenpath_argv
from tokenpath.serve.tlscert import self_signed
from tokenpath.stats import percentile

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Run:
    ttft_ms: list[float] = field(default_factory=list)
    errors: int = 0  # no first content frame, or the stream did not end cleanly
    cpu_cores: float | None = None


def start_hypercorn(port: int, tls: tuple[str, str] | None, folder: Path) -> subprocess.Popen[bytes]:
    # hypercorn sends GOAWAY after 1,000 requests on a connection and then, being on h2 itself, cannot send the
    # rest of the streams in flight (they end mid-response; the gateway reports them so). Not what is measured.
    config = folder / "hypercorn.toml"
    config.write_text("keep_alive_max_requests = 100000000\n")
    argv = [sys.executable, "-m", "hypercorn", "tests.gateway.peers.asgi_sse:app", "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "--log-level", "warning", "--config", str(config)]  # fmt: skip
    if tls:
        argv += ["--certfile", tls[0], "--keyfile", tls[1]]
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("hypercorn did not start")


def start_nginx(upstream_port: int, tls: tuple[str, str] | None, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    work = folder / "nginx"
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    scheme = "https" if tls else "http"
    # nginx checks the upstream's name as a DNS name (an IP SAN does not match "127.0.0.1"): the cert's DNS name
    ssl_lines = (f"proxy_ssl_verify on;\n      proxy_ssl_trusted_certificate {tls[0]};\n      "
                 "proxy_ssl_name localhost;\n      proxy_ssl_server_name on;") if tls else ""  # fmt: skip
    config = work / "nginx.conf"
    config.write_text(f"""daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {work}/tmp/body;
  proxy_temp_path {work}/tmp/proxy;
  fastcgi_temp_path {work}/tmp/fastcgi;
  uwsgi_temp_path {work}/tmp/uwsgi;
  scgi_temp_path {work}/tmp/scgi;
  upstream backend {{ server 127.0.0.1:{upstream_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass {scheme}://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      {ssl_lines}
    }}
  }}
}}
""")
    proc = subprocess.Popen(["nginx", "-c", str(config), "-p", str(work), "-e", str(work / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"nginx did not start: {(work / 'error.log').read_text()}")


def start_gateway(upstream: str, protocol: str, ca_file: str | None, folder: Path) -> ServiceProcess:
    config = folder / f"gw-{protocol}.toml"
    ca = f'ca_file = "{ca_file}"\n' if ca_file else ""
    config.write_text(f'listen = "127.0.0.1:0"\n[auth]\nmode = "none"\n[[pool]]\nname = "p"\nprotocol = "{protocol}"\n'
                      f'{ca}[[pool.member]]\nurl = "{upstream}"\n')  # fmt: skip
    proc = ServiceProcess(tokenpath_argv("gateway", "--config", str(config), "--log-level", "warning"), protocol)
    proc.start()
    return proc


async def one_stream(host: str, port: int, body: bytes, ctx: ssl.SSLContext | None) -> float | None:
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
    try:
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))  # fmt: skip
        seen = b""
        while True:
            data = await reader.read(65536)
            if not data:
                return None
            seen = seen[-64:] + data
            if b'"content"' in seen:
                ttft = (time.perf_counter() - t0) * 1000
                while data := await reader.read(65536):  # read the rest: the stream runs its course
                    seen = seen[-64:] + data
                return ttft if seen.endswith(b"0\r\n\r\n") else None  # cut short (an error event, a reset)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def closed_loop(host: str, port: int, streams: int, seconds: float, body: bytes,
                      ctx: ssl.SSLContext | None) -> Run:  # fmt: skip
    run = Run()
    stop = time.monotonic() + seconds

    async def user() -> None:
        while time.monotonic() < stop:
            try:
                ttft = await asyncio.wait_for(one_stream(host, port, body, ctx), 30)
            except (OSError, TimeoutError):
                ttft = None
            if ttft is None:
                run.errors += 1
            else:
                run.ttft_ms.append(ttft)

    await asyncio.gather(*(user() for _ in range(streams)))
    return run


def measure(url: str, pid: int | None, streams: int, seconds: float, body: bytes, ctx: ssl.SSLContext | None) -> Run:
    host, port = url.removeprefix("https://").removeprefix("http://").rsplit(":", 1)
    proc = psutil.Process(pid) if pid else None
    before = _tree_cpu(proc) if proc else None
    t0 = time.monotonic()
    loop = new_event_loop("uvloop")
    try:
        run: Run = loop.run_until_complete(closed_loop(host, int(port), streams, seconds, body, ctx))
    finally:
        loop.close()
    if proc is not None and before is not None:
        run.cpu_cores = (_tree_cpu(proc) - before) / (time.monotonic() - t0)
    return run


def _tree_cpu(proc: psutil.Process) -> float:
    """User + system seconds of a process and its children (nginx's worker does the work, not its master)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="50,200")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--tls", action="store_true", help="TLS from the gateways to the upstream (h2 by ALPN)")
    ap.add_argument("--nginx", action="store_true", help="add nginx (keep-alive, proxy_buffering off) as a target")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tokenpath-h2bench-"))
    tls = None
    if args.tls:
        files = self_signed(folder / "tls", ["127.0.0.1"])
        tls = (str(files.cert), str(files.key))
    port = free_port()
    upstream = start_hypercorn(port, tls, folder)
    scheme = "https" if tls else "http"
    gateways = {p: start_gateway(f"{scheme}://127.0.0.1:{port}", p, tls[0] if tls else None, folder)
                for p in ("http1", "h2")}  # fmt: skip
    direct_ctx = None
    if tls:
        direct_ctx = ssl.create_default_context(cafile=tls[0])
        direct_ctx.set_alpn_protocols(["http/1.1"])
    targets: list[tuple[str, str, int | None, ssl.SSLContext | None]] = [
        ("direct (h1)", f"{scheme}://127.0.0.1:{port}", None, direct_ctx),
        ("gateway, h1 upstream", gateways["http1"].url or "", gateways["http1"].pid, None),
        ("gateway, h2 upstream", gateways["h2"].url or "", gateways["h2"].pid, None),
    ]
    nginx = None
    if args.nginx:
        nginx, nginx_url = start_nginx(port, tls, folder)
        targets.append(("nginx, h1 keep-alive upstream", nginx_url, nginx.pid, None))
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True,
                       "tokenpath": {"tokens": args.tokens, "interval_ms": args.interval_ms}}).encode()  # fmt: skip
    results: dict[str, Any] = {"tls": bool(tls), "levels": {}}
    try:
        for streams in [int(s) for s in args.streams.split(",")]:
            for _name, url, pid, ctx in targets:  # warm-up: connections, pools, caches
                measure(url, pid, streams, 1.0, body, ctx)
            per: dict[str, list[Run]] = {name: [] for name, *_ in targets}
            for r in range(args.runs):
                order = targets[r % len(targets) :] + targets[: r % len(targets)]
                for name, url, pid, ctx in order:
                    per[name].append(measure(url, pid, streams, args.seconds, body, ctx))
            results["levels"][streams] = summarize(per)
    finally:
        for g in gateways.values():
            g.stop()
        if nginx is not None:
            stop_process_group(nginx, 5)
        stop_process_group(upstream, 5)  # hypercorn's worker is a child process
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print_table(results)


def summarize(per: dict[str, list[Run]]) -> dict[str, Any]:
    direct = per["direct (h1)"]
    out: dict[str, Any] = {}
    for name, runs in per.items():
        p50 = [percentile(sorted(r.ttft_ms), 50) for r in runs]
        p99 = [percentile(sorted(r.ttft_ms), 99) for r in runs]
        added50 = [a - percentile(sorted(d.ttft_ms), 50) for a, d in zip(p50, direct, strict=True)]
        added99 = [a - percentile(sorted(d.ttft_ms), 99) for a, d in zip(p99, direct, strict=True)]
        cpu = [r.cpu_cores for r in runs if r.cpu_cores is not None]
        out[name] = {
            "streams_measured": sum(len(r.ttft_ms) for r in runs), "errors": sum(r.errors for r in runs),
            "p50_ms_per_run": [round(x, 2) for x in p50], "p99_ms_per_run": [round(x, 2) for x in p99],
            "added_p50_ms_per_run": [round(x, 2) for x in added50],
            "added_p99_ms_per_run": [round(x, 2) for x in added99],
            "cpu_cores_median": round(statistics.median(cpu), 3) if cpu else None,
        }  # fmt: skip
    return out


def print_table(results: dict[str, Any]) -> None:
    print("| streams | target | added p50 ms per run | added p99 ms per run | TTFT p50 ms (median) | CPU cores | "
          "streams | errors |")  # fmt: skip
    print("|---:|---|---|---|---:|---:|---:|---:|")
    for streams, level in results["levels"].items():
        for name, row in level.items():
            fmt = " / ".join
            cpu = "-" if row["cpu_cores_median"] is None else f"{row['cpu_cores_median']:.2f}"
            print(f"| {streams} | {name} | {fmt(f'{x:.1f}' for x in row['added_p50_ms_per_run'])} | "
                  f"{fmt(f'{x:.1f}' for x in row['added_p99_ms_per_run'])} | "
                  f"{statistics.median(row['p50_ms_per_run']):.1f} | {cpu} | {row['streams_measured']} | "
                  f"{row['errors']} |")  # fmt: skip


if __name__ == "__main__":
    main()
