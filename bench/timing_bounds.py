"""The timing bounds that used to be test assertions, measured as figures (bench/RESULTS.md has the latest):

- the gateway stops its upstream when a client leaves mid-stream: ms from the client's close to the stub's last
  write, over --runs streams;
- a client that stops reading pauses the upstream instead of growing the gateway's memory: RSS growth (MB) while
  12 MB are offered to a client that reads nothing for 2 s;
- the stub's pacing drift at one stream (p50/p99/max over --runs streams of 40 frames every 14 ms).

The tests keep the behaviour with margins a loaded machine cannot break; these are the numbers.
    .venv/bin/python bench/timing_bounds.py --runs 20 [--json]
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stats import median, percentile
from tokenpath.stub.control import fetch_audit
from tokenpath.wire.client import ResponseParser

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def request(body: dict[str, Any], stream_id: str) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"X-Tokenpath-Stream: {stream_id}\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data  # fmt: skip


def hostport(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def abort_ms(gw: str, stub: str) -> float:
    sid = f"bench-gone-{secrets.token_hex(4)}"
    body = {**CHAT, "tokenpath": {"ttft_ms": 5, "interval_ms": 20, "tokens": 500}}
    with socket.create_connection(hostport(gw), timeout=20) as sock:
        sock.sendall(request(body, sid))
        seen = b""
        while seen.count(b"data: ") < 6:
            seen += sock.recv(65536)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        left_ns = time.monotonic_ns()
    time.sleep(0.5)
    log = fetch_audit(stub, [sid]).streams[0].log
    assert log is not None
    return max(0.0, (max(w.actual_ns for w in log.writes) - left_ns) / 1e6)


def paused_rss_growth_mb(gw: str, pid: int) -> float:
    proc = psutil.Process(pid)
    body = {**CHAT, "tokenpath": {"ttft_ms": 1, "interval_ms": 0.2, "tokens": 3000, "frame_bytes": 4096,
                                  "format": "plain"}}  # fmt: skip
    with socket.create_connection(hostport(gw), timeout=30) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        sock.sendall(request(body, f"bench-slow-{secrets.token_hex(4)}"))
        before = proc.memory_info().rss
        time.sleep(2.0)
        grown = float(proc.memory_info().rss - before) / 1e6
        # A normal buffer to read with: on loopback a 16 KiB one drops the gateway's ~32 KiB segments, each sent
        # again on its retransmission timer (tests/helpers.open_receive_window says more).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        parser = ResponseParser()
        while not parser.complete:
            data = sock.recv(65536)
            if not data:
                break
            parser.feed(data)
    return grown


def stub_drift(stub: str) -> dict[str, float]:
    from tokenpath.probe.client import ProbeConfig
    from tokenpath.probe.stream import probe_stream

    pacing = {"ttft_ms": 20, "interval_ms": 14, "tokens": 40, "format": "plain"}
    trace = probe_stream(ProbeConfig(url=stub, extra_body=(("tokenpath", pacing),)))
    verdict = fetch_audit(stub, [trace.stream_id]).streams[0].verdict
    return {"p50": verdict.drift_p50_ms, "p99": verdict.drift_p99_ms, "max": verdict.drift_max_ms}


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": median(ordered), "p99": percentile(ordered, 99), "max": ordered[-1], "n": len(ordered)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tokenpath-bench-"))
    config = tmp / "gw.toml"
    procs: list[ServiceProcess] = []
    try:
        stub = ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub")
        procs.append(stub)
        stub_url = stub.start()
        config.write_text(f'listen = "127.0.0.1:0"\n[[pool]]\nname = "d"\n[[pool.member]]\nurl = "{stub_url}"\n'
                          '[auth]\nmode = "none"\n')  # fmt: skip
        gw = ServiceProcess(tokenpath_argv("gateway", "--config", str(config)), "gateway")
        procs.append(gw)
        gw_url = gw.start()
        assert gw.pid is not None
        aborts = [abort_ms(gw_url, stub_url) for _ in range(args.runs)]
        growth = [paused_rss_growth_mb(gw_url, gw.pid) for _ in range(max(1, args.runs // 5))]
        drifts = [stub_drift(stub_url) for _ in range(args.runs)]
    finally:
        for proc in reversed(procs):
            proc.stop()
    result = {
        "gateway_abort_ms": summary(aborts),
        "gateway_paused_rss_growth_mb": summary(growth),
        "stub_one_stream_drift_p50_ms": summary([d["p50"] for d in drifts]),
        "stub_one_stream_drift_max_ms": summary([d["max"] for d in drifts]),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    for name, s in result.items():
        print(f"{name:32s} p50 {s['p50']:8.3f}  p99 {s['p99']:8.3f}  max {s['max']:8.3f}  (n={s['n']:.0f})")


if __name__ == "__main__":
    main()
