"""Gateway CPU to relay one big SSE event vs the same bytes as many small events (issue 22: the relay's hold rule).

One raw-socket upstream writes either one event of --event-mib MiB in 16 KiB pieces (one chunk each, --pace-ms
apart, so a gateway that keeps up reads them as 16 KiB reads), or --event-mib x 64 events of 16 KiB each at the same
pace: the same bytes and writes. One gateway per source tree (PYTHONPATH), both cases through each, interleaved over
rounds. CPU is the gateway process's own user+system time (psutil) from the request to the last byte its client
read; the health check's longest wait is polled meanwhile on a second connection.

    .venv/bin/python bench/relay_hold.py --src src [--src /tmp/base/src] [--event-mib 8] [--rounds 3]

A gateway that falls behind the pace reads several pieces per read, which flatters a relay that rescans what it
holds; its figures are then a lower bound. The event is exactly --event-mib MiB including `data: ` and its blank
line, so the default stays within the relay's bound (wire.sse.MAX_EVENT_BYTES, 8 MiB) and is relayed whole.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

from tokenpath.proxies.base import free_port
from tokenpath.serve.procs import ServiceProcess
from tokenpath.wire.client import ResponseParser

PIECE = 16 << 10
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def big_event(size: int) -> list[bytes]:
    """One event of `size` bytes, as 16 KiB pieces: `data: xxx...` and, in the last piece, its blank line."""
    raw = b"data: " + b"x" * (size - 8) + b"\n\n"
    return [raw[i : i + PIECE] for i in range(0, size, PIECE)]


def small_events(size: int) -> list[bytes]:
    """The same bytes as size / 16 KiB events of 16 KiB each, one per piece."""
    return [b"data: " + b"x" * (PIECE - 8) + b"\n\n"] * (size // PIECE)


class Upstream:
    """Answers each request with the pieces its body names (`"big"` or `"small"`), one chunk per write."""

    def __init__(self, size: int, pace_s: float) -> None:
        self.cases = {b"big": big_event(size), b"small": small_events(size)}
        self.pace_s = pace_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn, contextlib.suppress(OSError):
            while True:  # keep-alive: one request after another
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    data += piece
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))  # fmt: skip
                while len(body) < length:
                    body += conn.recv(65536)
                pieces = self.cases[b"big" if b'"big"' in body else b"small"]
                conn.sendall(HEAD)
                next_at = time.perf_counter()
                for piece in pieces:
                    next_at += self.pace_s
                    delay = next_at - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    conn.sendall(chunk(piece))
                conn.sendall(b"0\r\n\r\n")

    def close(self) -> None:
        self.listener.close()


def gateway(src: str, upstream: str) -> ServiceProcess:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    argv = [sys.executable, "-m", "tokenpath", "gateway", "--listen", f"127.0.0.1:{port}", "--upstream", upstream,
            "--no-auth", "--log-level", "error"]  # fmt: skip
    return ServiceProcess(argv, f"gateway ({src})", env=env)


def hostport(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def stream(url: str, case: str) -> int:
    body = b'{"model": "%s", "messages": [{"role": "user", "content": "x"}], "stream": true}' % case.encode()
    with socket.create_connection(hostport(url), timeout=300) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))  # fmt: skip
        parser = ResponseParser()
        got = 0
        while not parser.complete:
            data = sock.recv(1 << 20)
            if not data:
                parser.feed_eof()
                break
            got += len(parser.feed(data))
        return got


def health_waits(url: str, stop: threading.Event, waits: list[float]) -> None:
    """Health checks one after another until `stop`; a check the gateway dropped (its header timer can fire once a
    pinned worker gets back to it) counts for as long as it waited, and the next one reconnects."""
    while not stop.is_set():
        with socket.create_connection(hostport(url), timeout=300) as sock:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    sock.sendall(b"GET /_tokenpath/health HTTP/1.1\r\nHost: t\r\n\r\n")
                    parser = ResponseParser()
                    while not parser.complete:
                        data = sock.recv(65536)
                        if not data:
                            raise ConnectionResetError("closed")
                        parser.feed(data)
                except OSError:
                    waits.append(time.perf_counter() - t0)
                    break
                waits.append(time.perf_counter() - t0)
                time.sleep(0.01)


def measure(url: str, pid: int, case: str, expect: int) -> tuple[float, float, float]:
    """(gateway CPU s, wall s, longest health-check wait s) for one stream of `case`."""
    proc = psutil.Process(pid)
    waits: list[float] = []
    stop = threading.Event()
    poller = threading.Thread(target=health_waits, args=(url, stop, waits))
    poller.start()
    time.sleep(0.05)
    before = proc.cpu_times()
    t0 = time.perf_counter()
    got = stream(url, case)
    wall = time.perf_counter() - t0
    after = proc.cpu_times()
    stop.set()
    poller.join()
    if got != expect:
        raise SystemExit(f"{case}: the client got {got} body bytes, expected {expect}")
    return after.user + after.system - before.user - before.system, wall, max(waits, default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", required=True, help="a tokenpath source tree's src/ (repeat)")
    ap.add_argument("--event-mib", type=int, default=8)
    ap.add_argument("--pace-ms", type=float, default=1.0, help="between the upstream's 16 KiB writes")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    size = args.event_mib << 20
    upstream = Upstream(size, args.pace_ms / 1000)
    gateways = [gateway(src, upstream.url) for src in args.src]
    cases = ("big", "small")
    try:
        urls = [g.start() for g in gateways]
        results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        for _ in range(args.rounds):
            for src, g, url in zip(args.src, gateways, urls, strict=True):
                assert g.pid is not None
                assert url is not None
                for case in cases:
                    results.setdefault((src, case), []).append(measure(url, g.pid, case, size))
        print(f"command: {' '.join([os.path.relpath(sys.executable), *sys.argv])}")
        print(f"gateway CPU to relay {args.event_mib} MiB in {size // PIECE} writes of 16 KiB, {args.pace_ms:g} ms "
              f"apart, {args.rounds} rounds interleaved (median; every round)")  # fmt: skip
        labels = {"big": f"one {args.event_mib} MiB event", "small": f"{size // PIECE} events of 16 KiB"}
        for src in args.src:
            print(f"  {src}:")
            for case in cases:
                runs = results[(src, case)]
                cpu = [r[0] for r in runs]
                print(f"    {labels[case]:>22}: CPU {statistics.median(cpu):.3f} s "
                      f"({' / '.join(f'{c:.3f}' for c in cpu)}); wall {statistics.median(r[1] for r in runs):.2f} s; "
                      f"longest health-check wait {max(r[2] for r in runs) * 1000:.0f} ms")  # fmt: skip
    finally:
        for g in gateways:
            g.stop()
        upstream.close()


if __name__ == "__main__":
    main()
