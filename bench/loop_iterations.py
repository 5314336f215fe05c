"""Event-loop iterations per read, by COUNTS (not timings: valid on a loaded machine). The same stub and closed-loop
load as bench/gateway_cpu.py; `strace -c -f` attached to each target for the measured window counts its
`epoll_pwait` calls (one per event-loop iteration on uvloop) and its reads and writes. Printed per target:

    iterations per read  = epoll_pwait / (read + recvfrom)       (every socket's reads: upstream and client)
    iterations per frame = epoll_pwait / frames the clients got   (the stub sends one frame per write)

The bare uvloop pipe (bench/uvloop_pipe.py: one callback and one write per read) is the floor to compare with: a
read that costs an extra iteration (a task woken, a future resolved, call_soon) shows as a higher ratio than the
pipe's. Counts depend a little on how many reads the loop batches per iteration, so compare targets measured in
the same run, side by side.

    .venv/bin/python bench/loop_iterations.py --src src [--streams 50] [--seconds 3] [--tokens 128] [--tls]
    .venv/bin/python bench/loop_iterations.py --src /tmp/base/src --src src    # before / after, side by side

Python calls per upstream read and per short request, and the callbacks a read hands the event loop (cProfile and
a counting loop: deterministic, exact on a loaded machine): `--calls` runs tests/gateway/loopcounts.py's harness in
process (asyncio, no strace, no load, one stream) and prints them; tests/gateway/test_loop_counts.py bounds them.

    PYTHONPATH=src .venv/bin/python bench/loop_iterations.py --calls

The load client's Python calls per read and per frame (HTTP/1.1, against an in-process stub: tests/load/
clientcounts.py's harness; tests/load/test_client_counts.py bounds them):

    PYTHONPATH=src .venv/bin/python bench/loop_iterations.py --client-calls
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from gateway_cpu import WARMUP_S, Target, bench_script, closed_loop, gateway, nginx

from tokenpath.proxies import base
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.serve.tlscert import self_signed

SYSCALLS = "epoll_pwait,epoll_wait,read,recvfrom,write,writev,sendto"
_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def strace_counts(text: str) -> dict[str, int]:
    """The `calls` column of `strace -c`'s table, by syscall name."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            counts[m.group(2)] = int(m.group(1))
    return counts


def count(target: Target, streams: int, seconds: float, tokens: int) -> tuple[dict[str, int], int]:
    """strace's counts for the window after the warm-up, and the frames the clients got (the whole run's, scaled to
    the window by the measured share of time)."""
    out = base.new_workdir("loop-iterations") / "strace.txt"
    tracer: list[subprocess.Popen[bytes]] = []

    def attach() -> None:
        argv = ["strace", "-c", "-f", "-e", f"trace={SYSCALLS}", "-o", str(out), "-p", str(target.pid)]
        tracer.append(subprocess.Popen(argv, stderr=subprocess.DEVNULL))

    try:
        report = closed_loop(target.url, streams, tokens, seconds + WARMUP_S, attach)
        tracer[0].send_signal(2)  # SIGINT: strace detaches and writes its table
        tracer[0].wait(timeout=30)
        frames = sum(r.frames for r in report.results if r.error is None)
        return strace_counts(out.read_text()), frames
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)  # the table is read: no directory left per target


def print_calls() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: tests/ holds the harness
    from tests.gateway.loopcounts import SDK_HEADERS, calls_per_request, count

    plain, logged = calls_per_request(20), calls_per_request(20, logged=True)
    sdk = calls_per_request(20, logged=True, headers=SDK_HEADERS)
    print("HTTP/1.1 client, HTTP/1.1 member, asyncio, one stream:")
    for tls in (False, True):
        reads = count(50, tls)
        print(
            f"  per steady-state upstream read, {'TLS' if tls else 'clear text'}: {reads.scheduled_per_read:g} "
            f"callbacks handed to the loop, {reads.calls_per_read:g} Python calls"
        )
    print(
        f"  per short request (3 frames, keep-alive both sides): {plain.own:g} calls in tokenpath, {plain.every:g} in"
        f" all; {logged.every:g} in all with the access log on (as `tokenpath gateway` runs); event-loop timers"
        f" armed {plain.loop_timers:g}"
    )
    print(f"  the same with the OpenAI SDK's 17 request headers, the access log on: {sdk.every:g} calls in all")


def print_client_calls() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: tests/ holds the harness
    from tests.load.clientcounts import count

    c = count()
    print(
        f"load client, HTTP/1.1, in-process stub: {c.streams} streams, {c.reads} reads, {c.frames} frames;"
        f" {c.calls_per_read:.2f} Python calls per read (data_received on), {c.check_calls / c.frames:.2f} per"
        f" frame in the end-of-stream check; {c.calls_per_frame:.2f} per frame in all"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", default=[], help="a tokenpath source tree's src/ (repeat)")
    ap.add_argument("--calls", action="store_true", help="the in-process counts (PYTHONPATH's tree), then stop")
    ap.add_argument("--client-calls", action="store_true", help="the load client's in-process counts, then stop")
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--tls", action="store_true", help="the gateway reaches the stub over TLS (a TLS nginx front)")
    ap.add_argument("--no-pipe", action="store_true", help="skip the bare uvloop pipe (the floor)")
    args = ap.parse_args()
    if args.calls or args.client_calls:
        print_calls() if args.calls else print_client_calls()
        return
    if not args.src:
        ap.error("--src is needed (or --calls)")
    stub = ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub")
    up = urlsplit(stub.start())
    upstream = f"http://{up.hostname}:{up.port}"
    targets: list[Target] = []
    front: Target | None = None
    ca_file: Path | None = None
    certs = base.new_workdir("loop-iterations-tls")
    try:
        if args.tls:
            files = self_signed(certs, ["127.0.0.1"])
            front = nginx(upstream, serve_tls=files)
            upstream, ca_file = front.url.rstrip("/"), files.cert
        targets += [gateway(src, upstream, 1, ca_file) for src in args.src]
        if not args.no_pipe and not args.tls:
            targets.append(bench_script("uvloop_pipe.py", "minimal uvloop pipe", upstream))
        print(f"{args.streams} streams x {args.tokens} tokens, {args.seconds:g} s under strace -c -f:")
        for t in targets:
            calls, frames = count(t, args.streams, args.seconds, args.tokens)
            polls = calls.get("epoll_pwait", 0) + calls.get("epoll_wait", 0)
            reads = calls.get("read", 0) + calls.get("recvfrom", 0)
            writes = calls.get("write", 0) + calls.get("writev", 0) + calls.get("sendto", 0)
            per_read = polls / reads if reads else float("nan")
            line = f"epoll {polls}, reads {reads}, writes {writes}, frames (whole run) {frames}"
            print(f"  {t.name}: {line}; iterations per read {per_read:.2f}")
    finally:
        for t in [*targets, *([front] if front else [])]:
            t.stop()
        stub.stop()
        shutil.rmtree(certs, ignore_errors=True)


if __name__ == "__main__":
    main()
