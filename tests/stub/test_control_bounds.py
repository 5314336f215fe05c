"""stub/control.py's exchange, the control-plane client of diagnose's first check (is the target a stub?), of
--stub-url's health and of every audit: bounded in bytes and in time, whatever the peer sends. A flood took 1.9 GB to
a MemoryError; an answer trickled a byte a second held diagnose's first check for a day."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from tests.helpers import scripted_servers
from tokenpath.diagnose.measure import is_stub
from tokenpath.errors import ResponseTooLarge
from tokenpath.stub.control import TOTAL_TIMEOUTS, exchange

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


def flood(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(HEAD)
        piece = b"%x\r\n%b\r\n" % (1 << 16, b"x" * (1 << 16))
        while True:
            conn.sendall(piece)


def trickle(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        for byte in HEAD + b"5\r\n{}   \r\n0\r\n\r\n":
            conn.sendall(bytes([byte]))
            time.sleep(0.1)


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    with scripted_servers() as start:
        yield lambda handle: f"http://127.0.0.1:{start(handle)}"


def test_an_answer_that_never_ends_is_refused_at_its_size(serve: Callable[..., str]) -> None:
    url = serve(flood)
    with pytest.raises(ResponseTooLarge, match="larger than 1048576 bytes"):
        exchange(url, "GET", "/_tokenpath/health", timeout_s=10, max_bytes=1 << 20)
    assert is_stub(url + "/v1") is False  # diagnose's first check: not a stub, at once


def test_an_answer_trickled_ends_at_its_total_bound_not_a_read_timeout_per_byte(serve: Callable[..., str]) -> None:
    url = serve(trickle)  # a byte every 0.1 s: each read within its 0.3 s timeout, the whole past 5 x 0.3 s
    started = time.monotonic()
    with pytest.raises(TimeoutError):  # "no whole answer within 1.5 s", or the last read cut at that deadline
        exchange(url, "GET", "/_tokenpath/health", timeout_s=0.3)
    assert time.monotonic() - started < TOTAL_TIMEOUTS * 0.3 + 5  # bounded by it, never by the trickle's length
