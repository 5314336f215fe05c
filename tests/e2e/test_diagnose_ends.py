"""`tokenpath diagnose` against a small loopback origin (no proxy, no stub), for what is no firm cut: bytes that
break HTTP's chunked framing are the peer's error (exit 10), never "the path cut the stream" (19); one reset of
one stream, whole in its repeats, is measured again and reported as a cut seen once (unsure, 17), not a limit."""

from __future__ import annotations

import itertools
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tokenpath.errors import DiagnosisUnsure, RemoteProtocolError
from tokenpath.serve.procs import tokenpath_argv

pytestmark = pytest.mark.e2e

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _frame(i: int) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % i


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return data
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return head


def _serve(conn: socket.socket, mode: str, streams: Iterator[int]) -> None:
    with conn:
        head = _read_request(conn)
        if not head.startswith(b"POST"):  # the stub's health: not one here
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        stream = next(streams)
        conn.sendall(HEAD)
        for i in range(12):
            conn.sendall(_chunk(_frame(i)))
            time.sleep(0.05)
            if mode == "badchunk" and i == 4:
                conn.sendall(b"zz\r\nhello\r\n")
                return
            if mode == "reset_once" and stream == 2 and i == 5:  # the first stream after the warm-up, once
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
        conn.sendall(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


@pytest.fixture
def origin(request: pytest.FixtureRequest) -> Iterator[str]:
    mode = request.param
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    done = threading.Event()

    def accept() -> None:
        streams = itertools.count(1)  # the POSTs: the warm-up's is the first
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=_serve, args=(conn, mode, streams), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        done.set()
        listener.close()
        thread.join(timeout=2)


@pytest.mark.parametrize("origin", ["badchunk"], indirect=True)
def test_a_malformed_chunk_is_the_peers_error_not_a_cut(origin: str) -> None:
    out = subprocess.run(tokenpath_argv("diagnose", origin), capture_output=True, text=True, timeout=30)
    assert out.returncode == RemoteProtocolError.exit_code == 10, out.stdout + out.stderr
    assert "chunk size" in out.stderr
    assert "cuts the stream" not in out.stdout


@pytest.mark.parametrize("origin", ["reset_once"], indirect=True)
def test_one_reset_whole_in_its_repeats_is_a_cut_seen_once(origin: str) -> None:
    out = subprocess.run(tokenpath_argv("diagnose", origin), capture_output=True, text=True, timeout=60)
    assert out.returncode == DiagnosisUnsure.exit_code == 17, out.stdout + out.stderr
    first = out.stdout.splitlines()[0]
    assert "cut a stream once" in first
    assert "total limit" not in out.stdout
    assert "measured 3 times" in out.stdout
