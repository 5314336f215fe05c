"""Gateway CPU per relayed frame, side by side: the same stub, one gateway per source tree started from that tree
(PYTHONPATH), optionally nginx (`proxy_buffering off`, one worker) as the yardstick, the same closed-loop load
through each in turn, interleaved over rounds. CPU is the target's process tree's own user+system time over the
measured window (psutil; nginx's master and worker), divided by the frames its clients received.

    .venv/bin/python bench/gateway_cpu.py --src /tmp/base/src --src src [--streams 50] [--seconds 8] [--rounds 3]
    .venv/bin/python bench/gateway_cpu.py --src src --against nginx --streams 200   # prints gateway/nginx per round
    .venv/bin/python bench/gateway_cpu.py --src src --profile /tmp/gw.txt            # py-spy on the last gateway
    .venv/bin/python bench/gateway_cpu.py --src src --workers 1,2 --against nginx    # --workers 1 and 2 side by side
    .venv/bin/python bench/gateway_cpu.py --src src --against nginx --tls            # TLS upstream: nginx proxy_ssl
    .venv/bin/python bench/gateway_cpu.py --src src --against nginx --floor          # + two uvloop byte pipes
    .venv/bin/python bench/gateway_cpu.py --src src --floor --tokens 32              # short streams: per request
    .venv/bin/python bench/gateway_cpu.py --src src --against nginx --tokens 8,128   # CPU per request and per frame

--floor adds three byte pipes on uvloop, no HTTP parsing: bench/uvloop_pipe.py (one Protocol callback and one write
per read, nothing else: the floor of any relay in Python on uvloop), the same compiled (bench/cython_pipe.py: what is
left without the interpreter's frames; skipped, said in one line, without Cython or a C compiler) and `tokenpath
relay --mode pass` (the control relay: the same plus its policy layer and protocol sniffing); and
bench/lean_proxy.py, an HTTP proxy on the gateway's own cores (its server connection and its upstream keep-alive
pool) with none of its layers: between it and the pipe is what the cores cost, between it and the gateway what the
layers do.

Each line also splits the CPU per frame into user and system time: in clear text every target here makes the same
system calls per frame (one read, one write; `strace -c` in bench/RESULTS.md), so the system time is the kernel's
share and the user time is each relay's own.

With --tls the targets reach the stub over TLS: a TLS front (a second nginx, `listen ssl`, self-signed certificate,
not measured) before the stub; the gateway's pool verifies it (ca_file), nginx `proxy_pass https://` verifies it
(`proxy_ssl_verify on`, sessions reused, its default), both over HTTP/1.1 (nginx's default proxy_http_version 1.0).

With two token counts (`--tokens 8,128`) each round measures every target at both, and each target's CPU is split
into a cost per request and a cost per frame: two measurements, C = requests x q + frames x f, solved for q and f
per round (the streams and frames each measurement completed are counted, not assumed). The request's cost is
everything a stream costs once whatever its length (accept, parse, route, the upstream exchange, the head, timers,
the log line, metrics); the frame's is the relay's per read. With --floor and/or --against, each target's cost per
request is also given over the bare pipe's and over nginx's, round by round: the per-request goal as a ratio
measured side by side, which the host's speed of the hour does not move (bench/RESULTS.md, issue 39's ninth part).

`--profile` needs py-spy (the dev extra installs it; `pip install py-spy` elsewhere): it records the last
--src gateway during its last measurement (`py-spy record --native --format raw`, collapsed stacks); the summary of
the hottest own-time frames is printed, and the file can be read by speedscope or flamegraph.pl.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from tokenpath.load.runner import PROMPT
from tokenpath.load.worker import WorkerReport, Workload, run_worker
from tokenpath.proxies import base
from tokenpath.proxies.nginx import Nginx
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.serve.tlscert import TLSFiles, self_signed

WARMUP_S = 1.0  # the first second of each measurement is not counted: connections open, caches fill


class Target:
    def __init__(self, name: str, url: str, pid: int, stop: Callable[[], None]) -> None:
        self.name, self.url, self.pid, self.stop = name, url, pid, stop

    def cpu_s(self) -> tuple[float, float]:
        """The process tree's user and system seconds (nginx's work is in its worker, a child of the master)."""
        user = system = 0.0
        proc = psutil.Process(self.pid)
        for p in [proc, *proc.children(recursive=True)]:
            t = p.cpu_times()
            user += t.user
            system += t.system
        return user, system


def gateway(src: str, upstream: str, workers: int, ca_file: Path | None = None) -> Target:
    port = base.free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    argv = [sys.executable, "-m", "tokenpath", "gateway", "--listen", f"127.0.0.1:{port}", "--no-auth",
            "--log-level", "warning"]  # fmt: skip
    if ca_file is None:
        argv += ["--upstream", upstream]
    else:  # a private CA is a pool setting: a config file with one pool
        config = base.new_workdir("gateway-cpu") / "gateway.toml"
        config.write_text(f'[[pool]]\nname = "tls"\nca_file = "{ca_file}"\n[[pool.member]]\nurl = "{upstream}"\n')
        argv += ["--config", str(config)]
    if workers != 1:
        argv += ["--workers", str(workers)]
    proc = ServiceProcess(argv, f"gateway ({src})", env=env)
    url = proc.start()
    assert proc.pid is not None
    return Target(f"gateway {src}" + (f" x{workers}" if workers != 1 else ""), url, proc.pid, proc.stop)


def nginx(upstream: str, ca_file: Path | None = None, serve_tls: TLSFiles | None = None) -> Target:
    """nginx proxy_buffering off to `upstream` (https: verified against ca_file); with serve_tls it listens TLS."""
    up = urlsplit(upstream)
    assert up.hostname is not None
    assert up.port is not None
    proxy = Nginx()
    # The certificate's name is checked: nginx matches DNS names only (X509_check_host), the front's is localhost.
    upstream_tls = base.UpstreamTLS("localhost", ca_file) if up.scheme == "https" else None
    site = base.Site(base.Endpoint("127.0.0.1", base.free_port()), base.Endpoint(up.hostname, up.port),
                     base.new_workdir("nginx"), proxy.variant("proxy_buffering_off"), tls=serve_tls,
                     upstream_tls=upstream_tls)  # fmt: skip
    running = base.start(proxy, site)
    assert running.process is not None
    name = "nginx proxy_buffering off" + (", proxy_ssl" if upstream_tls else "")
    return Target(name, running.url, running.process.pid, running.stop)


def byte_pipe(upstream: str) -> Target:
    up = urlsplit(upstream)
    proc = ServiceProcess(tokenpath_argv("relay", "--mode", "pass", "--upstream", up.netloc), "relay pass")
    url = proc.start()
    assert proc.pid is not None
    return Target("tokenpath relay --mode pass", url, proc.pid, proc.stop)


def bench_script(script: str, name: str, upstream: str) -> Target:
    """One of the floors beside this file (uvloop_pipe.py, cython_pipe.py, lean_proxy.py), in front of `upstream`."""
    up = urlsplit(upstream)
    assert up.hostname is not None
    path = Path(__file__).with_name(script)
    proc = ServiceProcess([sys.executable, str(path), up.hostname, str(up.port)], name)
    url = proc.start()
    assert proc.pid is not None
    return Target(f"{name} (bench/{script})", url, proc.pid, proc.stop)


def compiled_pipe(upstream: str) -> list[Target]:
    """bench/cython_pipe.py in front of `upstream` (built first, cached), or none when it cannot be built here."""
    script = Path(__file__).with_name("cython_pipe.py")
    built = subprocess.run([sys.executable, str(script), "--build"], capture_output=True, text=True)
    if built.returncode != 0:
        print(f"  (the compiled pipe is skipped: {built.stderr.strip()})", flush=True)
        return []
    return [bench_script("cython_pipe.py", "compiled uvloop pipe", upstream)]


def closed_loop(
    url: str, streams: int, tokens: int, duration_s: float, after_warmup: Callable[[], None]
) -> WorkerReport:
    """The benches' load through `url`: `streams` closed-loop users of the stub's `tokens`-frame streams (one frame
    every 14 ms) for `duration_s`; `after_warmup` runs on a thread once WARMUP_S of it has passed (a CPU mark, a
    tracer attached, the counts cleared)."""
    work = Workload(url, "tokenpath-stub", PROMPT, tokens, streams, WARMUP_S, duration_s)

    def later() -> None:
        time.sleep(WARMUP_S)
        after_warmup()

    timer = threading.Thread(target=later)
    timer.start()
    try:
        return run_worker(work)
    finally:
        timer.join()


def measure(
    target: Target, streams: int, seconds: float, profile: Path | None = None, tokens: int = 128
) -> tuple[tuple[float, float], int, int]:
    """User and system CPU seconds, frames relayed and streams completed, after the warm-up."""
    marks: dict[str, tuple[float, float]] = {}
    spy: list[subprocess.Popen[bytes]] = []

    def mark() -> None:
        marks["start"] = target.cpu_s()
        if profile is not None:
            spy.append(py_spy(target.pid, profile, seconds - WARMUP_S))

    report = closed_loop(target.url, streams, tokens, seconds, mark)
    end = target.cpu_s()
    for p in spy:
        p.wait(timeout=seconds + 30)
    done = [r for r in report.results if r.error is None]
    return (end[0] - marks["start"][0], end[1] - marks["start"][1]), sum(r.frames for r in done), len(done)


def per_request_and_frame(short: tuple[float, int, int], long: tuple[float, int, int]) -> tuple[float, float]:
    """CPU per request and per frame (us) from two measurements (cpu_s, frames, requests) of different stream
    lengths: cpu = requests x q + frames x f, solved for q and f."""
    (c1, f1, r1), (c2, f2, r2) = short, long
    det = r1 * f2 - r2 * f1
    if det == 0:
        return float("nan"), float("nan")
    return 1e6 * (c1 * f2 - c2 * f1) / det, 1e6 * (r1 * c2 - r2 * c1) / det


def request_ratios(costs: dict[str, list[tuple[float, float]]], reference: str) -> dict[str, list[float]]:
    """Each other target's CPU per request over `reference`'s, round by round (a ratio measured side by side: the
    issue's per-request goal in a form the host's speed does not move)."""
    ref = [q for q, _ in costs[reference]]
    return {
        name: [q / r if r > 0 else float("nan") for (q, _), r in zip(pairs, ref, strict=True)]
        for name, pairs in costs.items()
        if name != reference
    }


def py_spy(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    binary = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    argv = [binary, "record", "--native", "--pid", str(pid), "--duration", str(max(1, int(seconds))),
            "--rate", "200", "--format", "raw", "--output", str(out)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def own_time(raw: Path, top: int = 25) -> list[tuple[float, str]]:
    """The leaf frames (where the samples were taken) of a py-spy raw file, as shares of all samples."""
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        leaves[stack.rsplit(";", 1)[-1]] += int(count)
        total += int(count)
    return [(n / total, frame) for frame, n in leaves.most_common(top)] if total else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", required=True, help="a tokenpath source tree's src/ (repeat)")
    ap.add_argument("--against", choices=["nginx"], help="also measure nginx proxy_buffering off; print the ratio")
    ap.add_argument("--workers", default="1", help="the gateways' --workers; a list (1,2) starts one gateway per count")
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument(
        "--tokens",
        default="128",
        help="tokens per stream: few weigh the per-request work; two (8,128) split CPU per request and per frame",
    )
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", type=Path, help="py-spy raw output for the last gateway's last measurement")
    ap.add_argument("--tls", action="store_true", help="the targets reach the stub over TLS (through a TLS front)")
    ap.add_argument("--floor", action="store_true", help="also measure three byte pipes and the lean proxy (above)")
    args = ap.parse_args()
    try:
        lengths = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        ap.error(f"--tokens takes one count or two, comma-separated: {args.tokens!r}")
    if len(lengths) not in (1, 2) or min(lengths) < 1 or len(set(lengths)) != len(lengths):
        ap.error("--tokens takes one count or two different ones, each at least 1")
    if len(lengths) == 2 and args.profile is not None:
        ap.error("--profile records one measurement: give one --tokens count with it")
    if args.floor and args.tls:
        ap.error("--floor's pipes and lean proxy speak clear text: they cannot stand in front of a TLS upstream")
    stub = ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub")
    stub_url = stub.start()
    up = urlsplit(stub_url)
    upstream = f"http://{up.hostname}:{up.port}"
    targets: list[Target] = []
    front: Target | None = None
    ca_file: Path | None = None
    try:
        if args.tls:
            files = self_signed(base.new_workdir("gateway-cpu-tls"), ["127.0.0.1"])
            front = nginx(upstream, serve_tls=files)
            upstream, ca_file = front.url.rstrip("/"), files.cert
        counts = [int(w) for w in args.workers.split(",")]
        targets += [gateway(src, upstream, workers, ca_file) for src in args.src for workers in counts]
        last_gateway = targets[-1]
        pipe = yardstick = None  # the per-request ratios' references
        if args.floor:
            pipe = bench_script("uvloop_pipe.py", "minimal uvloop pipe", upstream)
            targets += [pipe, *compiled_pipe(upstream)]
            targets += [
                byte_pipe(upstream),
                bench_script("lean_proxy.py", "lean proxy on the gateway's cores", upstream),
            ]
        if args.against == "nginx":
            yardstick = nginx(upstream, ca_file)
            targets.append(yardstick)
        results: dict[str, list[float]] = {t.name: [] for t in targets}
        split: dict[str, list[tuple[float, float]]] = {t.name: [] for t in targets}  # user, system per frame
        costs: dict[str, list[tuple[float, float]]] = {t.name: [] for t in targets}  # per request, per frame
        for r in range(args.rounds):
            for t in targets:
                spy = args.profile if t is last_gateway and r == args.rounds - 1 else None
                runs = []
                for tokens in lengths:
                    (user_s, system_s), frames, requests = measure(t, args.streams, args.seconds, spy, tokens)
                    runs.append((user_s + system_s, frames, requests))
                per_frame = 1e6 / frames if frames else float("nan")  # the last length's figures
                results[t.name].append((user_s + system_s) * per_frame)
                split[t.name].append((user_s * per_frame, system_s * per_frame))
                if len(runs) == 2:
                    costs[t.name].append(per_request_and_frame(runs[0], runs[1]))
        tls = ", TLS upstream" if args.tls else ""
        print(f"CPU per relayed frame (us){tls}, {args.streams} streams x {lengths[-1]} tokens "
              f"every 14 ms, {args.seconds:g} s "
              f"per measurement ({WARMUP_S:g} s uncounted), {args.rounds} rounds interleaved:")  # fmt: skip
        for name, values in results.items():
            median = statistics.median(values)
            user = statistics.median(u for u, _ in split[name])
            system = statistics.median(s for _, s in split[name])
            print(f"  {name}: " + " / ".join(f"{v:.1f}" for v in values) + f"  (median {median:.1f}; "
                  f"user {user:.1f}, system {system:.1f})")  # fmt: skip
        if args.against:
            ref = results[targets[-1].name]
            for t in targets[:-1]:
                ratios = [g / n for g, n in zip(results[t.name], ref, strict=True)]
                print(f"  ratio {t.name} / {args.against}, per round: " + " / ".join(f"{x:.2f}" for x in ratios)
                      + f"  (median {statistics.median(ratios):.2f})")  # fmt: skip
        if len(lengths) == 2:
            print(f"CPU per request and per frame (us), from {lengths[0]}- and {lengths[1]}-token streams, per round:")
            for name, pairs in costs.items():
                request_costs = " / ".join(f"{q:.0f}" for q, _ in pairs)
                frame_costs = " / ".join(f"{f:.1f}" for _, f in pairs)
                q_median = statistics.median(q for q, _ in pairs)
                f_median = statistics.median(f for _, f in pairs)
                per_request = f"per request {request_costs} (median {q_median:.0f})"
                print(f"  {name}: {per_request}; per frame {frame_costs} (median {f_median:.1f})")
            for reference in [t.name for t in (pipe, yardstick) if t is not None]:
                print(f"CPU per request over {reference}'s, per round:")
                for name, ratios in request_ratios(costs, reference).items():
                    shown = " / ".join(f"{x:.2f}" for x in ratios)
                    finite = [x for x in ratios if math.isfinite(x)]  # nan: a noisy round solved its cost to <= 0
                    middle = f"{statistics.median(finite):.2f}" if finite else "n/a"
                    print(f"  {name}: {shown}  (median {middle})")
        if args.profile is not None and args.profile.exists():
            print(f"py-spy own time, {last_gateway.name} (the last round), {args.profile}:")
            for share, frame in own_time(args.profile):
                print(f"  {share * 100:5.1f} %  {frame}")
    finally:
        for t in [*targets, *([front] if front else [])]:
            t.stop()
        stub.stop()


if __name__ == "__main__":
    main()
