"""`tokenpath record`'s requests against servers that misbehave: its HTTP/1.0 request is bounded by the probe's idle
timeout and by what a recording can hold (a flood or a silent server held it 120 s, then the stream 600 s more), and
an error answer to it is refused, not recorded as the origin's framing."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from tests.helpers import scripted_servers
from tokenpath.errors import IdleTimeout, ResponseTooLarge, ServiceError, UsageError
from tokenpath.origins.behaviour import MAX_HTTP10_BODY_BYTES, http10_answer
from tokenpath.origins.record import RecordRequest, record
from tokenpath.probe.client import ProbeConfig

SSE = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
FRAME = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'


def flood(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(SSE)
        while True:
            conn.sendall(FRAME * 1000)


def silent(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(SSE)
        time.sleep(30)


def error_page(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 503 Busy\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], ProbeConfig]]:
    with scripted_servers() as start:
        yield lambda handle: ProbeConfig(f"http://127.0.0.1:{start(handle)}/v1", idle_timeout_s=1.0)


def test_a_flooded_http10_answer_ends_at_what_a_recording_holds(serve: Callable[..., ProbeConfig]) -> None:
    with pytest.raises(ResponseTooLarge, match=f"larger than {MAX_HTTP10_BODY_BYTES} bytes"):
        http10_answer(serve(flood))


def test_a_silent_http10_answer_ends_at_the_idle_timeout_not_the_deadline(serve: Callable[..., ProbeConfig]) -> None:
    started = time.monotonic()
    with pytest.raises(IdleTimeout, match="sent nothing for 1 s"):
        http10_answer(serve(silent))
    assert time.monotonic() - started < 20  # not its 120 s deadline


def test_an_error_answer_to_the_http10_request_is_refused_not_recorded(serve: Callable[..., ProbeConfig]) -> None:
    with pytest.raises(ServiceError, match=r"answered 503 to the HTTP/1\.0 request: nothing to record"):
        record(RecordRequest(serve(error_page), "t"))


def echoing(conn: socket.socket) -> None:
    """A good answer to both requests, with the request's Authorization echoed back as a debug header."""
    with conn, contextlib.suppress(OSError):
        request = conn.recv(65536).decode("latin-1")
        auth = next((line.split(":", 1)[1].strip() for line in request.split("\r\n") if line.lower().startswith(
            "authorization:")), "")  # fmt: skip
        http10 = request.split("\r\n", 1)[0].endswith("HTTP/1.0")
        head = "HTTP/1.0 200 OK" if http10 else "HTTP/1.1 200 OK"
        frames = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
        framing = "" if http10 else f"Content-Length: {len(frames)}\r\n"
        conn.sendall(f"{head}\r\nContent-Type: text/event-stream\r\nX-Echo-Auth: {auth}\r\n{framing}\r\n".encode())
        conn.sendall(frames)


def test_a_server_that_echoes_the_key_is_refused_never_written(serve: Callable[..., ProbeConfig]) -> None:
    cfg = replace(serve(echoing), api_key="sk-SECRET-KEY-123")
    with pytest.raises(UsageError, match="echoed the API key into its answer") as caught:
        record(RecordRequest(cfg, "t"))
    assert "SECRET" not in str(caught.value)
    plain = serve(echoing)  # no key sent: nothing to echo, recorded
    assert record(RecordRequest(plain, "t")).name == "t"
