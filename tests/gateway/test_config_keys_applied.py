"""Gateway config keys that had no test failing when the key is ignored: `retry_after_s`, `request_id_header`,
`write_buffer_bytes`, `[health] active_path`, `ws_pong_timeout_s` and `header_timeout_s` as the TLS handshake's
deadline. Each runs the gateway in this process (its loop in a thread, tests.helpers.BackgroundLoop), built by
config.from_dict from what a TOML file would hold, in front of a scripted member on loopback, with the key set far
from its default, so the default would give a different answer (or none within the test's bound)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway import wspeer
from tests.gateway.wspeer import (
    CLOSE,
    PING,
    TEXT,
    FrameReader,
    WsMember,
    answer_101,
    close,
    offer,
    pong_member,
    session,
    text,
)
from tests.helpers import BackgroundLoop, LoopbackHTTP, QuietHandler, accept_each, post
from tokenpath.gateway import config as gwconfig
from tokenpath.gateway.server import GatewayServer
from tokenpath.serve.tlscert import self_signed
from tokenpath.wire.limits import WRITE_BUFFER_HIGH

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


class Gateway:
    """One gateway in this process, from a config as `[limits]`, `[health]` and top-level keys of a TOML file."""

    def __init__(self, member_url: str, **top: Any) -> None:
        self.bg = BackgroundLoop()
        data = {"listen": "127.0.0.1:0", "auth": {"mode": "none"}, **top}
        data["pool"] = [{"name": "default", "member": [{"url": member_url}]}]
        cfg = gwconfig.from_dict(data)

        async def start() -> GatewayServer:
            server = GatewayServer(cfg)
            await server.start()
            return server

        self.server = self.bg.run(start())
        self.port = self.server.port

    def close(self) -> None:
        try:
            self.bg.run(self.server.close(0.2))
        finally:
            self.bg.close()


@contextlib.contextmanager
def gateway(member_url: str, **top: Any) -> Iterator[Gateway]:
    gw = Gateway(member_url, **top)
    try:
        yield gw
    finally:
        gw.close()


CHAT_PATH = "/v1/chat/completions"


def read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The response's status, its headers (lowercased names), and the bytes read past the head."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response head: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(" ", 2)[1]), headers, rest


def answer(port: int, raw: bytes) -> tuple[int, dict[str, str]]:
    """Send one request on a connection of its own; its response's status and headers."""
    with socket.create_connection(("127.0.0.1", port), 10) as sock:
        sock.sendall(raw)
        status, headers, _ = read_head(sock)
    return status, headers


class HeldMember:
    """Reads each request whole (`got` set), then holds it, its answer unsent, until `release()`: the request's
    stream stays open and its body held (kept for failover until a member's head comes)."""

    def __init__(self) -> None:
        self.got = threading.Event()
        self.released = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        accept_each(self.listener, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            self.got.set()
            self.released.wait(30)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            conn.sendall(b"0\r\n\r\n")

    def close(self) -> None:
        self.released.set()
        self.listener.close()


# retry_after_s ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("refusal", ["max_streams", "max_body_bytes_in_flight"])
def test_retry_after_s_is_the_retry_after_of_a_503(refusal: str) -> None:
    """One stream held open fills the limit (a stream, or the bytes of request bodies held); the next request's 503
    says Retry-After: 7, the key's value (the default says 1)."""
    body = json.dumps({**BODY, "pad": "x" * 800}).encode()  # ~900 bytes, held while its stream is open
    limits: dict[str, Any] = {"retry_after_s": 7}
    if refusal == "max_streams":
        limits["max_streams"] = 1
    else:
        limits |= {"max_body_bytes": 1000, "max_body_bytes_in_flight": 1000}
    member = HeldMember()
    try:
        with gateway(member.url, limits=limits) as gw, socket.create_connection(("127.0.0.1", gw.port), 10) as held:
            held.sendall(post(CHAT_PATH, body))
            assert member.got.wait(10)  # the stream is open, its body held
            with socket.create_connection(("127.0.0.1", gw.port), 10) as second:
                second.sendall(post(CHAT_PATH, body[:500]))
                status, headers, _ = read_head(second)
            assert status == 503
            assert headers["retry-after"] == "7"
            member.released.set()
            assert read_head(held)[0] == 200
    finally:
        member.close()


# request_id_header -------------------------------------------------------------------------------------------------


class RecordingMember(LoopbackHTTP):
    """Answers every request 200 with a small JSON body; records each request's method, path and headers."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any]] = []
        outer = self

        class Handler(QuietHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.seen.append((self.command, self.path, self.headers))
                reply = b'{"ok":true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_GET = do_POST = _answer

        super().__init__(Handler)


def test_request_id_header_names_the_header_the_id_rides_in_both_ways() -> None:
    """With request_id_header = "X-Trace-Token": the client's id in that header is the one passed on, to the member
    and back, and the gateway's own id goes out under that name when the client sent none. X-Request-Id (the
    default's name) becomes an ordinary header: forwarded as the client sent it, never the gateway's id."""
    member = RecordingMember()
    try:
        with gateway(member.url + "/", request_id_header="X-Trace-Token") as gw:
            ids = "X-Trace-Token: trace-abc.123\r\nX-Request-Id: client-other-1\r\n"
            status, headers = answer(gw.port, post(CHAT_PATH, b'{"model":"m"}', extra=ids))
            assert status == 200
            assert headers.get("x-trace-token") == "trace-abc.123"
            assert "x-request-id" not in headers
            # no id of the client's: the gateway makes its own
            status, made = answer(gw.port, post(CHAT_PATH, b'{"model":"m"}'))
            assert status == 200
        first, second = member.seen[0][2], member.seen[1][2]
        assert first.get_all("X-Trace-Token") == ["trace-abc.123"]
        assert first.get_all("X-Request-Id") == ["client-other-1"]  # the client's header, untouched
        assert uuid.UUID(second["X-Trace-Token"]).version == 4
        assert second.get("X-Request-Id") is None
        assert uuid.UUID(made["x-trace-token"]) == uuid.UUID(second["X-Trace-Token"])
        assert "x-request-id" not in made
    finally:
        member.close()


# write_buffer_bytes ------------------------------------------------------------------------------------------------


def _kernel_max(path: str, fallback: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(path).read_text().split()[-1])
    return fallback


class BulkMember:
    """Answers one request with `size` bytes of application/octet-stream, sent while it can: a send blocked for
    `stall_s` ends it. `sent` is how many bytes the gateway took."""

    def __init__(self, size: int, stall_s: float) -> None:
        self.size, self.stall_s = size, stall_s
        self.sent = 0
        self.done = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        accept_each(self.listener, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
                         % self.size)  # fmt: skip
            conn.settimeout(self.stall_s)
            piece = memoryview(b"z" * (1 << 20))
            while self.sent < self.size:
                self.sent += conn.send(piece[: min(len(piece), self.size - self.sent)])
        self.done.set()

    def close(self) -> None:
        self.listener.close()


def test_write_buffer_bytes_is_what_the_gateway_queues_for_a_client_that_does_not_read() -> None:
    """A client that reads nothing: the gateway queues up to write_buffer_bytes for it before it stops reading the
    member. Set far above everything the kernel's socket buffers on the path can hold (their sysctl maxima, read
    here), the member's whole body goes in while the client reads nothing; with the default (64 KiB) the member
    stalls once those buffers are full, well short of the body. Then the client reads all of it, byte for byte."""
    kernel = _kernel_max("/proc/sys/net/ipv4/tcp_rmem", 32 << 20) + _kernel_max("/proc/sys/net/ipv4/tcp_wmem", 4 << 20)
    size = kernel + (24 << 20)
    member = BulkMember(size, stall_s=5.0)
    try:
        with gateway(member.url, limits={"write_buffer_bytes": size + (16 << 20)}) as gw:
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)  # before connect: no autotuning
            client.settimeout(30)
            with client:
                client.connect(("127.0.0.1", gw.port))
                client.sendall(post(CHAT_PATH, BODY))
                assert member.done.wait(60)
                assert member.sent == size, f"the member stalled at {member.sent} of {size} bytes"
                status, headers, got = read_head(client)
                assert status == 200
                assert int(headers["content-length"]) == size
                received = len(got)
                while chunk := client.recv(1 << 20):
                    received += len(chunk)
                assert received == size
    finally:
        member.close()
    assert size > 16 * WRITE_BUFFER_HIGH


def test_write_buffer_bytes_is_what_the_gateway_queues_for_a_websocket_member_that_does_not_read() -> None:
    """The same on a WebSocket session's other way: a member that reads nothing after its 101. The gateway queues
    up to write_buffer_bytes of the client's messages for it before it stops reading the client; set far above the
    kernel's buffers, the client sends every message; with the default it stalls well short. Then the member reads
    every message."""
    kernel = _kernel_max("/proc/sys/net/ipv4/tcp_rmem", 32 << 20) + _kernel_max("/proc/sys/net/ipv4/tcp_wmem", 4 << 20)
    message = text({"type": "response.create", "input": "x" * ((1 << 20) - 100)})
    count = (kernel + (24 << 20)) // len(message) + 1
    go = threading.Event()
    got: list[int] = []

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        answer_101(conn, head)
        go.wait(60)
        conn.settimeout(30)
        while len(got) < count and (f := reader.next()) is not None:
            if f.opcode == CLOSE:  # the gateway ends the session (a failed test's close)
                conn.sendall(close(f.close_code, mask=False))
                return
            got.append(f.opcode)

    member = WsMember(script)
    limits = {"write_buffer_bytes": count * len(message) + (16 << 20), "ws_max_message_bytes": 2 << 20}
    try:
        with gateway(member.url, limits=limits) as gw:
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
            with client:
                client.connect(("127.0.0.1", gw.port))
                client.sendall(offer())
                head, _ = wspeer.read_head(client)
                assert head.startswith(b"HTTP/1.1 101"), head
                client.settimeout(5.0)  # a send blocked this long: the gateway stopped reading
                sent = 0
                with contextlib.suppress(TimeoutError):
                    for _ in range(count):
                        client.sendall(message)
                        sent += 1
                go.set()
                assert sent == count, f"the client stalled after {sent} of {count} messages of {len(message)} bytes"
                assert member.done.wait(60)
        assert got == [TEXT] * count
    finally:
        go.set()
        member.close()


# [health] active_path ----------------------------------------------------------------------------------------------


def test_active_path_is_the_path_each_member_is_checked_on() -> None:
    """The active check GETs the member's base path plus active_path: /base/healthz/ready, never /base/v1/models
    (the default)."""
    member = RecordingMember()
    try:
        health = {"active_interval_s": 0.1, "active_path": "/healthz/ready"}
        with gateway(member.url + "/base", health=health):
            deadline = time.monotonic() + 10
            while len(member.seen) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        checks = [(method, path) for method, path, _ in member.seen]
        assert len(checks) >= 2, checks
        assert set(checks) == {("GET", "/base/healthz/ready")}
    finally:
        member.close()


# ws_pong_timeout_s -------------------------------------------------------------------------------------------------


def test_ws_pong_timeout_s_closes_a_client_that_never_answers_its_ping_in_that_time() -> None:
    """ws_pong_timeout_s = 0.3: a client that does not answer the gateway's ping is closed 1001 within seconds of the
    ping (16 times the value: a loaded host's margin), the reason naming 0.3 s. The default, 15 s, would send
    nothing at all within the socket's 8 s timeout."""
    member = pong_member()
    try:
        limits = {"ws_ping_interval_s": 0.3, "ws_pong_timeout_s": 0.3}
        with gateway(member.url, limits=limits) as gw:
            sock, reader = session(gw.port)
            with sock:
                sock.settimeout(8)
                ping = reader.next()
                pinged = time.monotonic()
                assert ping is not None
                assert ping.opcode == PING
                got = reader.until_close()
                waited = time.monotonic() - pinged
        assert [f.opcode for f in got] == [CLOSE], got
        assert got[0].close_code == 1001
        assert got[0].close_reason == "no pong within 0.3 s"
        assert waited < 5.0, waited
    finally:
        member.close()


# header_timeout_s: the TLS handshake -------------------------------------------------------------------------------


def test_header_timeout_s_is_the_tls_handshake_deadline(tmp_path: Path) -> None:
    """A connection to the TLS listener that never starts its handshake is closed by header_timeout_s (0.3 s here)
    on a loaded host within 4 s: far below the default's 10 s, which the socket's 7 s timeout would not see."""
    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    top = {"tls_cert": str(files.cert), "tls_key": str(files.key), "limits": {"header_timeout_s": 0.3}}
    with gateway("http://127.0.0.1:9", **top) as gw, socket.create_connection(("127.0.0.1", gw.port), 10) as silent:
        silent.settimeout(7)
        started = time.monotonic()
        try:
            got = silent.recv(1)
        except ConnectionResetError:
            got = b""
        waited = time.monotonic() - started
    assert got == b""  # closed by the gateway (a timeout raises)
    assert waited < 4.0, waited
