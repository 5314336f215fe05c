"""The gateway's event-loop blocks: the CPU each callback of a stream takes in a live gateway, filed by what it did.

A first token waits in the gateway for whatever callback its event loop is running when it arrives, so the tail of
the added TTFT (issue 39's p99 goal) is made of the longest of these blocks, not of the relay's per-frame cost.
bench/gateway_cpu.py says what a request and a frame cost in all; this says how that cost is cut into blocks:

    request  a client read (a request's head and body: parse, admit, route, the exchange, the upstream request)
    head     the upstream read that brought the response head (and the frames sent with it: the role delta)
    first    the read that brought the first token (the first-token scan, its metrics)
    later    every other body read (the relay's per-frame path)
    end      the read that ended the response (the last bytes, the log line, metrics, the connection released)
    log      a flush of the access log's batch on the timer wheel (its lines' one write: jsonlog.BatchedHandler)

    .venv/bin/python bench/gateway_blocks.py [--src src] [--streams 50] [--tokens 128] [--seconds 6] [--json]

The same stub and closed-loop paced load as bench/gateway_cpu.py (its Workload); the gateway as `tokenpath gateway`
runs it (one worker, no auth, the access log on unless `--log-level warning`), started from this file (`--serve`)
with its two read entry points wrapped: the client connection's and the upstream link's `data_received`. Each call
is timed by the thread's CPU clock (time.thread_time_ns: time the process was preempted is not counted) and filed
by kind; the first second is not counted. The wrapper's clock reads cost ~1 us per read, so compare kinds, and
trees in one run; the absolute figures are a little above the gateway's. HTTP/1.1 both sides, the upstream in
clear text (another link's reads are filed under `other`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

KINDS = ("request", "head", "first", "later", "end", "log", "other")


def serve(out: Path, gateway_args: list[str]) -> None:
    """The child: `tokenpath gateway` with its read entry points timed. SIGUSR1 clears what was counted (the
    warm-up is over); SIGUSR2 writes the counts to `out` as JSON."""
    from tokenpath.cli import main
    from tokenpath.gateway.link import UpstreamLink
    from tokenpath.gateway.server import GatewayServer
    from tokenpath.serve.http import HTTPConnection

    try:
        from tokenpath.jsonlog import BatchedHandler
    except ImportError:  # a tree from before the access log's batches (--src): every line written in its block
        BatchedHandler = None  # type: ignore[assignment,misc]

    blocks: dict[str, list[int]] = {kind: [] for kind in KINDS}
    clock = time.thread_time_ns
    upstream_read = UpstreamLink.data_received
    client_read = HTTPConnection.data_received
    log_flush = BatchedHandler.flush if BatchedHandler is not None else None
    start = GatewayServer.start

    cleared = [time.monotonic()]

    def clear() -> None:
        cleared[0] = time.monotonic()
        for values in blocks.values():
            values.clear()

    def write() -> None:
        level = logging.getLevelName(logging.getLogger("tokenpath").getEffectiveLevel()).lower()
        counted_s = time.monotonic() - cleared[0]  # the window the blocks were counted in, on the gateway's clock
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"blocks": blocks, "log_level": level, "counted_s": counted_s}))
        tmp.replace(out)  # whole or absent: the parent polls for it

    async def start_with_signals(self: GatewayServer) -> int:
        """The signals through the loop (add_signal_handler), so they are handled even while it is idle; set before
        the gateway accepts, so none comes before its handler."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, clear)
        loop.add_signal_handler(signal.SIGUSR2, write)
        return await start(self)

    def timed_log_flush(self: BatchedHandler) -> None:
        assert log_flush is not None
        t = clock()
        log_flush(self)
        blocks["log"].append(clock() - t)

    def timed_client_read(self: HTTPConnection, data: bytes) -> None:
        t = clock()
        client_read(self, data)
        blocks["request"].append(clock() - t)

    def timed_upstream_read(self: UpstreamLink, data: bytes) -> None:
        sink = getattr(self.speaker, "sink", None)
        relay = getattr(sink, "relay", None)
        had_token = relay is not None and relay.first_token
        t = clock()
        upstream_read(self, data)
        spent = clock() - t
        if sink is None or not hasattr(sink, "relay"):
            kind = "other"  # an HTTP/2 or TLS link's speaker, or bytes no response was waiting for
        elif relay is None:
            kind = "head"
        elif getattr(self.speaker, "sink", None) is not sink:
            kind = "end"
        elif not had_token and relay.first_token:
            kind = "first"
        else:
            kind = "later"
        blocks[kind].append(spent)

    UpstreamLink.data_received = timed_upstream_read  # type: ignore[method-assign]
    HTTPConnection.data_received = timed_client_read  # type: ignore[method-assign]
    if BatchedHandler is not None:
        BatchedHandler.flush = timed_log_flush  # type: ignore[method-assign]
    GatewayServer.start = start_with_signals  # type: ignore[method-assign]
    sys.argv = ["tokenpath", "gateway", *gateway_args]
    main()


def summary(blocks: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Per kind: how many, their CPU in us (p50, p90, p99, max: nearest rank), and the kind's share of all of it."""
    from tokenpath.stats import percentile

    total = sum(sum(values) for values in blocks.values()) or 1
    rows: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        values = sorted(blocks.get(kind, []))
        if not values:
            continue
        rows[kind] = {
            "count": len(values),
            "p50_us": percentile(values, 50) / 1000,
            "p90_us": percentile(values, 90) / 1000,
            "p99_us": percentile(values, 99) / 1000,
            "max_us": values[-1] / 1000,
            "mean_us": statistics.fmean(values) / 1000,
            "share": sum(values) / total,
        }
    return rows


def measure(src: str, streams: int, tokens: int, seconds: float, log_level: str = "info") -> dict[str, Any]:
    from gateway_cpu import closed_loop  # beside this file, as bench/loop_iterations.py takes it

    from tokenpath.proxies import base
    from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

    stub = ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub")
    up = urlsplit(stub.start())
    out = base.new_workdir("gateway-blocks") / "blocks.json"
    port = base.free_port()
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve", str(out), "--",
            "--listen", f"127.0.0.1:{port}", "--no-auth", "--upstream", f"http://{up.hostname}:{up.port}",
            "--log-level", log_level]  # fmt: skip
    gateway = ServiceProcess(
        argv, f"gateway ({src}), timed", env={**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    )
    try:
        url = gateway.start()
        pid = gateway.pid
        assert pid is not None
        report = closed_loop(url, streams, tokens, seconds, lambda: os.kill(pid, signal.SIGUSR1))
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while not out.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"the timed gateway wrote no counts; its log:\n{gateway.log_tail()}")
            time.sleep(0.05)
        counted = json.loads(out.read_text())
    finally:
        gateway.stop()
        stub.stop()
        shutil.rmtree(out.parent, ignore_errors=True)  # the counts are read: no directory left per run
    done = [r for r in report.results if r.error is None]
    return {
        "src": src,
        "streams": streams,
        "tokens": tokens,
        "seconds": seconds,
        "log_level": counted["log_level"],  # the gateway's own, read back from it
        "counted_s": round(counted["counted_s"], 3),
        "completed": len(done),
        "failed": len(report.results) - len(done),
        "blocks": summary(counted["blocks"]),
    }


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":  # the child (see serve)
        if sys.argv[3] != "--":
            sys.exit("usage: gateway_blocks.py --serve OUT -- GATEWAY_ARGS...")
        serve(Path(sys.argv[2]), sys.argv[4:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default="src", help="the tokenpath source tree's src/ the gateway runs from")
    ap.add_argument("--streams", type=int, default=50, help="streams open at once (closed loop)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per stream (one frame each, 14 ms apart)")
    ap.add_argument("--seconds", type=float, default=6.0, help="the load's length, its first second not counted")
    ap.add_argument("--log-level", choices=["info", "warning"], default="info",
                    help="the gateway's: info (its default) logs a line per request; warning, as `tokenpath load "
                         "--proxy gateway` runs it, does not")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="the result as JSON on stdout")
    args = ap.parse_args()
    if args.streams < 1 or args.tokens < 1:
        ap.error("--streams and --tokens take a count of at least 1")
    if args.seconds <= 1.0:
        ap.error("--seconds must be more than the 1 s warm-up that is not counted")
    if not Path(args.src, "tokenpath").is_dir():
        ap.error(f"--src {args.src}: no tokenpath package there")
    result = measure(args.src, args.streams, args.tokens, args.seconds, args.log_level)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    done = f"{result['completed']} streams completed, {result['failed']} failed"
    print(f"gateway ({args.src}, log level {result['log_level']}), {args.streams} streams x {args.tokens} tokens, "
          f"{args.seconds:g} s (1 s uncounted): {done}")  # fmt: skip
    print("CPU per event-loop block (us, thread CPU time):")
    print(f"  {'kind':<8} {'count':>7} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>8} {'share':>6}")
    for kind, row in result["blocks"].items():
        print(f"  {kind:<8} {row['count']:>7} {row['p50_us']:>7.1f} {row['p90_us']:>7.1f} {row['p99_us']:>7.1f} "
              f"{row['max_us']:>8.1f} {row['share']:>6.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
