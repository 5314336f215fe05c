"""HTTP/2 against HTTP/1.1 from the client to the gateway (issue 25 §4), side by side in one run.

One stub, one gateway in front of it (no auth, one worker), the same offered load through either protocol:
`streams` virtual users for `seconds`, each sending one streamed chat request after another (closed loop). HTTP/1.1:
one keep-alive connection per user. HTTP/2 (h2c with prior knowledge): the users' streams multiplexed over
ceil(streams / per_conn) connections (default 100 streams per connection, under the gateway's limit of 128), client
windows of 16 MiB so flow control never holds a stream (a stated condition, not a library default). The protocols
take turns within each run (order rotated per run).

- TTFT after the stub's write, per stream: the client's arrival time of the first content frame minus the stub's
  write time of that frame (its audit log; one host, both CLOCK_MONOTONIC). The same client also reads the stub
  directly, in the same protocol, in the same run (the stub serves h2c too): what the client and the stub's own
  write path cost in that protocol. Added TTFT = through the gateway minus direct, percentile by percentile.
- gateway CPU per frame: the gateway process's CPU time over the window / SSE frames relayed.
- gateway's own time: its `tokenpath_gateway_added_ttft_seconds` (first upstream byte read -> written to the
  client's socket), mean over the window: the gateway's work alone, without the time the host's scheduler kept it
  (or the client) waiting; on a busy host the client-seen figures are mostly that waiting.
- client CPU: the load generator's own share of a core over the window (one process: past ~80 % it is the
  bottleneck and the TTFT figures are its queueing, not the gateway's).

    .venv/bin/python bench/gateway_h2.py [--streams 50,200] [--runs 3] [--seconds 4] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import secrets
import statistics
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import psutil

from tokenpath.proxies.base import free_port
from tokenpath.serve.loops import new_event_loop
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stats import percentile
from tokenpath.stub.control import fetch_audit

MARK = b'"content":" '  # the first content frame (the role delta's content is empty)
TOKENS = 40
CLIENT_WINDOW = 16 << 20


@dataclass
class Run:
    arrivals: dict[str, int] = field(default_factory=dict)  # stream id -> arrival of its first content frame (ns)
    completed: int = 0
    errors: int = 0
    cpu_s: float = 0.0
    client_cpu: float = 0.0  # cores
    own_ms: float = float("nan")  # the gateway's own added time (its metric), mean
    added_ms: list[float] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return self.completed * (TOKENS + 3)  # role delta, tokens, finish, [DONE]


def body_for(stream_id: str) -> bytes:
    return json.dumps(
        {"model": "m", "stream": True, "user": stream_id, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()


# HTTP/1.1 ----------------------------------------------------------------------------------------------------


class H1User(asyncio.Protocol):
    """One keep-alive connection; one streamed request at a time."""

    def __init__(self, host: str, run: Run) -> None:
        self.host = host
        self.run = run
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None
        self.tail = b""
        self.stream_id = ""
        self.seen = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self) -> asyncio.Future[None]:
        self.stream_id = secrets.token_hex(8)
        self.seen = False
        self.tail = b""
        self.done = asyncio.get_running_loop().create_future()
        body = body_for(self.stream_id)
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"X-Tokenpath-Stream: {self.stream_id}\r\nContent-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        assert self.transport is not None
        self.transport.write(head + body)
        return self.done

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        window = self.tail + data
        if not self.seen and MARK in window:
            self.seen = True
            self.run.arrivals[self.stream_id] = now
        self.tail = window[-16:]
        if window.endswith(b"0\r\n\r\n") and self.done is not None and not self.done.done():
            self.run.completed += 1
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.run.errors += 1
            self.done.set_result(None)


async def h1_load(host: str, port: int, streams: int, seconds: float, run: Run) -> None:
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + seconds

    async def user(i: int) -> None:
        await asyncio.sleep(i * 0.02 / max(1, streams))  # starts spread over one token interval
        _, proto = await loop.create_connection(lambda: H1User(host, run), host, port)
        while time.monotonic() < deadline and proto.transport is not None and not proto.transport.is_closing():
            await proto.send()
        if proto.transport is not None:
            proto.transport.close()

    await asyncio.gather(*(user(i) for i in range(streams)))


# HTTP/2 ------------------------------------------------------------------------------------------------------


class H2Client(asyncio.Protocol):
    """One h2c connection carrying many users' streams."""

    def __init__(self, host: str, run: Run) -> None:
        self.run = run
        self.authority = host.encode()
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, tuple[str, asyncio.Future[None]]] = {}
        self.seen: set[int] = set()
        self.tails: dict[int, bytes] = {}
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: CLIENT_WINDOW})
        self.conn.increment_flow_control_window(CLIENT_WINDOW)
        self._flush()

    def send(self) -> asyncio.Future[None]:
        stream_id = secrets.token_hex(8)
        sid = self.conn.get_next_available_stream_id()
        body = body_for(stream_id)
        headers = [
            (b":method", b"POST"), (b":path", b"/v1/chat/completions"), (b":scheme", b"http"),
            (b":authority", self.authority), (b"content-type", b"application/json"),
            (b"x-tokenpath-stream", stream_id.encode()), (b"content-length", str(len(body)).encode()),
        ]  # fmt: skip
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.streams[sid] = (stream_id, done)
        self.conn.send_headers(sid, headers)
        self.conn.send_data(sid, body, end_stream=True)
        self._flush()
        return done

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RemoteSettingsChanged) and not self.ready.done():
                self.ready.set_result(None)
            elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
                sid, chunk = event.stream_id, event.data or b""
                self.conn.acknowledge_received_data(event.flow_controlled_length or 0, sid)
                if sid not in self.seen:
                    window = self.tails.get(sid, b"") + chunk
                    if MARK in window:
                        self.seen.add(sid)
                        self.tails.pop(sid, None)
                        self.run.arrivals[self.streams[sid][0]] = now
                    else:
                        self.tails[sid] = window[-16:]
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id is not None:
                self._end(event.stream_id, ok=True)
            elif isinstance(event, h2.events.StreamReset) and event.stream_id is not None:
                self._end(event.stream_id, ok=False)
        self._flush()

    def _end(self, sid: int, ok: bool) -> None:
        entry = self.streams.pop(sid, None)
        self.seen.discard(sid)
        if entry is None or entry[1].done():
            return
        if ok:
            self.run.completed += 1
        else:
            self.run.errors += 1
        entry[1].set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        for sid in list(self.streams):
            self._end(sid, ok=False)
        if not self.ready.done():
            self.ready.set_result(None)

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)


async def h2_load(host: str, port: int, streams: int, seconds: float, run: Run, per_conn: int) -> None:
    loop = asyncio.get_running_loop()
    conns: list[H2Client] = []
    for _ in range(math.ceil(streams / per_conn)):
        _, proto = await loop.create_connection(lambda: H2Client(host, run), host, port)
        await asyncio.wait_for(proto.ready, 10)
        conns.append(proto)
    deadline = time.monotonic() + seconds

    async def user(i: int) -> None:
        await asyncio.sleep(i * 0.02 / max(1, streams))
        conn = conns[i % len(conns)]
        while time.monotonic() < deadline and conn.transport is not None and not conn.transport.is_closing():
            await conn.send()

    await asyncio.gather(*(user(i) for i in range(streams)))
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()


# the run -----------------------------------------------------------------------------------------------------


def hostport(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def own_added(metrics_url: str) -> tuple[float, float]:
    """The gateway's added-TTFT histogram: (sum of seconds, count)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    values = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        if line.startswith("tokenpath_gateway_added_ttft_seconds_"):
            name, value = line.split()[:2]
            kind = name.rsplit("_", 1)[1]
            if kind in values:
                values[kind] += float(value)
    return values["sum"], values["count"]


def measure(
    proto: str,
    gateway: str,
    stub: str,
    gw_proc: psutil.Process,
    streams: int,
    seconds: float,
    per_conn: int,
    metrics_url: str | None = None,
) -> Run:
    run = Run()
    own0 = own_added(metrics_url) if metrics_url else (0.0, 0.0)
    host, port = hostport(gateway)
    loop = new_event_loop("uvloop")
    me = psutil.Process()
    try:
        cpu0, mine0, t0 = sum(gw_proc.cpu_times()[:2]), sum(me.cpu_times()[:2]), time.monotonic()
        if proto == "h2":
            loop.run_until_complete(h2_load(host, port, streams, seconds, run, per_conn))
        else:
            loop.run_until_complete(h1_load(host, port, streams, seconds, run))
        run.cpu_s = sum(gw_proc.cpu_times()[:2]) - cpu0
        run.client_cpu = (sum(me.cpu_times()[:2]) - mine0) / (time.monotonic() - t0)
        if metrics_url:
            own1 = own_added(metrics_url)
            if own1[1] > own0[1]:
                run.own_ms = (own1[0] - own0[0]) / (own1[1] - own0[1]) * 1e3
    finally:
        loop.close()
    ids = list(run.arrivals)
    for start in range(0, len(ids), 500):
        reply = fetch_audit(stub, ids[start : start + 500], with_log=True, timeout_s=30)
        for entry in reply.streams:
            write = entry.log.first_content_write if entry.log is not None else None
            if write is not None and entry.stream_id in run.arrivals:
                run.added_ms.append((run.arrivals[entry.stream_id] - write.actual_ns) / 1e6)
    return run


def summarize(runs: list[Run], direct: list[Run]) -> dict[str, Any]:
    per_frame = [r.cpu_s / r.frames * 1e6 if r.frames else float("nan") for r in runs]
    out: dict[str, Any] = {"cpu_us_per_frame": per_frame, "gateway_own_ms": [r.own_ms for r in runs]}
    for p in (50, 99):
        through = [percentile(sorted(r.added_ms), p) for r in runs]
        floor = [percentile(sorted(d.added_ms), p) for d in direct]
        out[f"after_write_p{p}_ms"] = through
        out[f"direct_p{p}_ms"] = floor
        out[f"added_ttft_p{p}_ms"] = [a - b for a, b in zip(through, floor, strict=True)]
    out["client_cpu"] = [max(r.client_cpu, d.client_cpu) for r, d in zip(runs, direct, strict=True)]
    out["streams_completed"] = [r.completed for r in runs]
    out["errors"] = [r.errors + d.errors for r, d in zip(runs, direct, strict=True)]
    return out


def spread(values: list[float], digits: int = 1) -> str:
    med = statistics.median(values)
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="50,200")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--per-conn", type=int, default=100, help="HTTP/2 streams per connection")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    levels = [int(s) for s in args.streams.split(",")]
    # normal priority: a SCHED_FIFO stub serving the direct h2 streams (its h2 framing costs ~20 us a frame) took
    # the client's core in bursts on this 2-core host and put 100-800 ms into the direct floor
    stub_p = ServiceProcess(tokenpath_argv("stub", "--port", "0", "--ttft-ms", "20", "--interval-ms", "20",
                                           "--tokens", str(TOKENS), "--priority", "normal"), "stub")  # fmt: skip
    gw_p: ServiceProcess | None = None
    try:
        stub = stub_p.start()
        metrics_port = free_port()
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        gw_p = ServiceProcess(tokenpath_argv("gateway", "--listen", "127.0.0.1:0", "--upstream", stub, "--no-auth",
                                             "--log-level", "warning", "--metrics-listen",
                                             f"127.0.0.1:{metrics_port}"), "gateway")  # fmt: skip
        gateway = gw_p.start()
        assert gw_p.pid is not None
        gw_proc = psutil.Process(gw_p.pid)
        keys = itertools.product(("gateway", "direct"), ("h1", "h2"), levels)
        per: dict[str, list[Run]] = {f"{t}/{p}@{n}": [] for t, p, n in keys}
        for r in range(args.runs):
            for n in levels:
                order = [("gateway", "h1"), ("direct", "h1"), ("gateway", "h2"), ("direct", "h2")]
                for target, proto in order[r % 4 :] + order[: r % 4]:  # rotated per run
                    url = gateway if target == "gateway" else stub
                    watch = metrics_url if target == "gateway" else None
                    run = measure(proto, url, stub, gw_proc, n, args.seconds, args.per_conn, watch)
                    per[f"{target}/{proto}@{n}"].append(run)
                    print(f"run {r + 1} {target} {proto} {n} streams: {run.completed} done, {run.errors} errors, "
                          f"client {run.client_cpu:.0%} of a core", flush=True)  # fmt: skip
        print(f"load average after the runs: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        summary = {f"{p}@{n}": summarize(per[f"gateway/{p}@{n}"], per[f"direct/{p}@{n}"])
                   for p, n in itertools.product(("h1", "h2"), levels)}  # fmt: skip
        if args.json:
            print(json.dumps(summary, indent=2))
            return
        print("\n| client protocol | streams | gateway CPU µs/frame | gateway's own ms | added TTFT p50 ms "
              "| added TTFT p99 ms | direct p50 / p99 ms | client CPU | streams done | errors |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in levels:
            for proto, label in (("h1", "HTTP/1.1"), ("h2", "HTTP/2 (h2c)")):
                s = summary[f"{proto}@{n}"]
                direct = f"{statistics.median(s['direct_p50_ms']):.2f} / {statistics.median(s['direct_p99_ms']):.2f}"
                print(f"| {label} | {n} | {spread(s['cpu_us_per_frame'])} | {spread(s['gateway_own_ms'], 3)} "
                      f"| {spread(s['added_ttft_p50_ms'], 2)} "
                      f"| {spread(s['added_ttft_p99_ms'], 2)} | {direct} | {max(s['client_cpu']):.0%} "
                      f"| {sum(s['streams_completed'])} | {sum(s['errors'])} |")  # fmt: skip
    finally:
        if gw_p is not None:
            gw_p.stop()
        stub_p.stop()


if __name__ == "__main__":
    main()
