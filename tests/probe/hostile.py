"""Hostile endpoints as real loopback servers: what `probe` and `monitor --once` meet when pointed at a URL the user
does not control. Each answers every connection the same way, from its own thread, until closed.

    with Hostile("flood", tls=ctx) as h:   # h.url
        ...

Also runnable on its own, so a benchmark can point a child process at it:

    python -m tests.probe.hostile CERT KEY     # prints one `NAME URL` line per kind, serves until killed
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
TRICKLE_S = 0.5  # one byte every half second: each read returns well within any per-read timeout
TINY_FRAMES = b"data: x\n\n" * 1800  # ~16 KB: one TLS record of 1,800 frames
BIG_FRAMES = (b"data: " + b"x" * 8184 + b"\n\n") * 8  # 64 KB of 8 KB frames


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionResetError
        data += chunk


def _forever(conn: socket.socket, block: bytes) -> None:
    while True:
        conn.sendall(block)


def _trickle(conn: socket.socket, data: bytes) -> None:
    for i in range(len(data)):
        conn.sendall(data[i : i + 1])
        time.sleep(TRICKLE_S)
    while True:
        conn.sendall(b"a")
        time.sleep(TRICKLE_S)


def flood(conn: socket.socket) -> None:
    """A close-delimited stream of tiny frames as fast as the socket takes them (over TLS: 16 KB records)."""
    _read_request(conn)
    conn.sendall(SSE_HEAD + b"Connection: close\r\n\r\n")
    _forever(conn, TINY_FRAMES)


def huge(conn: socket.socket) -> None:
    """A declared 10 GB response of 8 KB frames, sent as fast as the socket takes them."""
    _read_request(conn)
    conn.sendall(SSE_HEAD + b"Content-Length: 10000000000\r\n\r\n")
    _forever(conn, BIG_FRAMES)


def head_trickle(conn: socket.socket) -> None:
    """The response head one byte every TRICKLE_S, never ending (a header value that grows forever)."""
    _read_request(conn)
    _trickle(conn, b"HTTP/1.1 200 OK\r\nX-Slow: ")


def body_trickle(conn: socket.socket) -> None:
    """A 503 whose body comes one byte every TRICKLE_S: the error preview must not wait for it."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100000\r\n\r\n")
    _trickle(conn, b"")


def handshake_trickle(conn: socket.socket) -> None:
    """(raw TCP, for an https URL) a TLS record header announcing 16 KB, then its body one byte every TRICKLE_S:
    the client's handshake never fails and never ends."""
    conn.recv(65536)  # the ClientHello
    conn.sendall(b"\x16\x03\x03\x40\x00")
    _trickle(conn, b"")


def endless_event(conn: socket.socket) -> None:
    """One SSE event that never ends."""
    _read_request(conn)
    conn.sendall(SSE_HEAD + b"Connection: close\r\n\r\ndata: ")
    _forever(conn, b"x" * 65536)


def endless_head(conn: socket.socket) -> None:
    """Header lines, fast, forever."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    _forever(conn, b"X-More: " + b"y" * 1000 + b"\r\n")


OPENAI_FRAMES = (
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
    + b"".join(b'data: {"choices":[{"delta":{"content":"t%d "}}]}\n\n' % i for i in range(5))
    + b"data: [DONE]\n\n"
)


def gzipped(conn: socket.socket) -> None:
    """A well-formed stream, gzip-compressed (nginx `gzip on` answering `Accept-Encoding: gzip`)."""
    _read_request(conn)
    body = gzip.compress(OPENAI_FRAMES)
    conn.sendall(SSE_HEAD + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))


def unknown_coding(conn: socket.socket) -> None:
    """A stream in a Content-Encoding no client decodes (`compress`, LZW, long retired): gzip, br and zstd are
    decoded now, an unknown coding is still a named failure, not 0 frames."""
    _read_request(conn)
    body = gzip.compress(OPENAI_FRAMES)
    conn.sendall(SSE_HEAD + b"Content-Encoding: compress\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))


def _anthropic_events() -> bytes:
    events: list[tuple[str, dict[str, object]]] = [
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": []}}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        ("ping", {"type": "ping"}),
        *[
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"t{i} "}},
            )
            for i in range(3)
        ],
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode() for name, obj in events)


ANTHROPIC_FRAMES = _anthropic_events()


def anthropic(conn: socket.socket) -> None:
    """An Anthropic Messages stream: well-formed SSE, no OpenAI chunk in it."""
    _read_request(conn)
    conn.sendall(SSE_HEAD + b"Content-Length: %d\r\n\r\n%b" % (len(ANTHROPIC_FRAMES), ANTHROPIC_FRAMES))


def status(code: int, reason: str, body: bytes) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%b" % (code, reason.encode(), len(body), body))  # fmt: skip

    return answer


KINDS: dict[str, Callable[[socket.socket], None]] = {
    "flood": flood,
    "huge": huge,
    "head_trickle": head_trickle,
    "body_trickle": body_trickle,
    "handshake_trickle": handshake_trickle,
    "endless_event": endless_event,
    "endless_head": endless_head,
    "gzip": gzipped,
    "unknown_coding": unknown_coding,
    "anthropic": anthropic,
}
RAW_TCP_TLS = {"handshake_trickle"}  # speaks (broken) TLS itself: https URL, no server-side wrap


class Hostile:
    """One hostile behaviour on a free loopback port (TLS with `tls`)."""

    def __init__(
        self, kind: str | Callable[[socket.socket], None], tls: ssl.SSLContext | None = None, https: bool = False
    ) -> None:
        self._behave = KINDS[kind] if isinstance(kind, str) else kind
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        scheme = "https" if tls is not None or https else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}/v1"
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.first_accept: float | None = None  # time.monotonic() of the first connection: the probe's work begins
        # Its own accept loop, not tests.helpers.accept_each: bench/hostile_rss.py runs this module beside trees
        # (--src) that predate what tests.helpers imports.
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
                if self.first_accept is None:
                    self.first_accept = time.monotonic()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
                with self._lock:
                    self._conns.append(conn)
            self._behave(conn)
        except (OSError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    conn.close()

    def __enter__(self) -> Hostile:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class Measured:
    peak_rss_mb: float  # the child's own high-water mark (VmHWM, sampled every 20 ms)
    wall_s: float
    returncode: int
    stdout: str
    stderr: str
    killed: str  # why it was killed ("" if it ended by itself)
    rss_samples: tuple[tuple[float, float], ...] = ()  # (seconds since start, VmRSS in MB), every 20 ms
    started_at: float = 0.0  # time.monotonic() when the child was started

    def since(self, peer: Hostile) -> float:
        """Seconds from the child's start to its first connection to `peer` (0 if it never connected)."""
        return max(0.0, peer.first_accept - self.started_at) if peer.first_accept is not None else 0.0

    def growth_after(self, fraction: float, since_s: float = 0.0) -> float:
        """How far the RSS rose after `fraction` of the run above its highest before it (MB): a bounded process has
        reached its plateau by then, an unbounded one keeps growing with what the peer sends. Peak against peak, not
        against the first later sample: a bounded process's RSS swings within its plateau as buffers are freed and
        filled again (27 MB under a TLS record flood on a loaded CI host), and a swing is no growth. `since_s`: where
        the run being judged begins (the child's first connection to the peer): before it the interpreter starts and
        imports, which grows the RSS too, and on a loaded host takes half the wall time (a probe read as growing 30 MB
        at load 10 was still importing at mid-run)."""
        start = since_s + fraction * (self.wall_s - since_s)
        earlier = [mb for t, mb in self.rss_samples if t < start]
        later = [mb for t, mb in self.rss_samples if t >= start]
        if not later or not earlier:
            return 0.0
        return max(0.0, max(later) - max(earlier))


def run_measured(argv: list[str], *, kill_after_s: float, kill_rss_mb: float, env: dict[str, str]) -> Measured:
    """Run a child to its end and return its peak RSS: the highest VmHWM a watcher read (every 20 ms). VmHWM is the
    child program's own high-water mark, reset at exec; wait4's ru_maxrss is not: Linux carries the forking
    process's mark across exec, so a child of a large test worker read as that worker's size (313 MB for a 45 MB
    probe in CI). The watcher also kills it past `kill_after_s` or once its VmHWM passes `kill_rss_mb`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        killed: list[str] = []
        samples: list[tuple[float, float]] = []
        peak = [0.0]
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.02):
                rss = _status_mb(child.pid, "VmRSS:")
                if rss is not None:
                    samples.append((time.monotonic() - t0, rss))
                hwm = _status_mb(child.pid, "VmHWM:")
                if hwm is not None:
                    peak[0] = max(peak[0], hwm)
                if time.monotonic() - t0 > kill_after_s:
                    killed.append(f"killed after {kill_after_s:.0f} s")
                elif hwm is not None and hwm > kill_rss_mb:
                    killed.append(f"killed at {hwm:.0f} MB RSS")
                if killed:
                    with contextlib.suppress(OSError):
                        child.kill()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, status, _usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - t0
        done.set()
        watcher.join()
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Measured(round(peak[0], 1), round(wall, 2), child.returncode,
                        out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                        killed[0] if killed else "", tuple(samples), t0)  # fmt: skip


def _status_mb(pid: int, field: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def server_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


ENDPOINTS = [  # label, kind, served over TLS
    ("flood_tls", "flood", True), ("huge_tls", "huge", True), ("flood", "flood", False), ("huge", "huge", False),
    *[(kind, kind, False) for kind in KINDS if kind not in ("flood", "huge")],
]  # fmt: skip


def main(argv: list[str]) -> None:
    ctx = server_context(argv[0], argv[1])
    servers = []
    for label, kind, tls in ENDPOINTS:
        servers.append(Hostile(kind, tls=ctx if tls else None, https=kind in RAW_TCP_TLS))
        print(label, servers[-1].url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
