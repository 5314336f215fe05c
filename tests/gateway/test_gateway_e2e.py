"""The gateway as a real process in front of real stub processes: relay, auth, failover, disconnects, limits,
metrics, shutdown. Sockets on loopback only."""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import socket
import ssl
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import openai
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import LoopbackHTTP, QuietHandler, open_receive_window
from tokenpath.proxies.base import free_port
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.serve.tlscert import self_signed
from tokenpath.stub.control import fetch_audit
from tokenpath.stub.frames import token_text
from tokenpath.wire.client import ResponseParser

pytestmark = pytest.mark.e2e

SECRET = secrets.token_urlsafe(48)
CHAT = {"model": "tokenpath-stub", "messages": [{"role": "user", "content": "hi"}], "stream": True}


class Services:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[ServiceProcess] = []

    def start(self, *args: str, name: str, env: dict[str, str] | None = None) -> ServiceProcess:
        proc = ServiceProcess(tokenpath_argv(*args), name, env)
        self.procs.append(proc)
        proc.start()
        return proc

    def stub(self, *args: str) -> str:
        url = self.start("stub", "--port", "0", *args, name="stub").url
        assert url is not None
        return url

    def gateway(self, config: str, auth: bool = False) -> ServiceProcess:
        path = self.tmp_path / f"gw{len(self.procs)}.toml"
        auth_block = '[auth]\nsecret_env = "GW_SECRET"\nalgorithms = ["HS256"]\n' if auth else '[auth]\nmode = "none"\n'
        path.write_text(f'listen = "127.0.0.1:0"\n{config}\n{auth_block}'.replace("__AUTH__", ""))
        return self.start("gateway", "--config", str(path), name="gateway", env={"GW_SECRET": SECRET})

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
            proc.log_path.unlink(missing_ok=True)  # kept by stop() when a test killed it: that looks like a failure


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(tmp_path)
    yield services
    services.stop()


def pool(*urls: str, extra: str = "") -> str:
    members = "".join(f'[[pool.member]]\nurl = "{u}"\n' for u in urls)
    return f'[[pool]]\nname = "default"\n{extra}\n{members}'


def token(**extra: Any) -> str:
    now = int(time.time())
    return jwt.encode({"sub": "test", "iat": now, "exp": now + 300, **extra}, SECRET, algorithm="HS256")


def hostport(url: str | None) -> tuple[str, int]:
    assert url is not None
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def request(body: dict[str, Any], *, path: str = "/v1/chat/completions", headers: str = "") -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n{headers}"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data  # fmt: skip


def read_response(sock: socket.socket, until: Callable[[bytes], bool] | None = None) -> tuple[ResponseParser, bytes]:
    parser = ResponseParser()
    body = bytearray()  # bytes' `+=` would copy the whole body at every read: quadratic in a 12 MB response
    while not parser.complete:
        data = sock.recv(65536)
        if not data:
            parser.feed_eof()
            break
        body += parser.feed(data)
        if until is not None and until(bytes(body)):
            break
    return parser, bytes(body)


def read_rest(sock: socket.socket, parser: ResponseParser) -> bytes:
    """The body's bytes still to come on `sock`, through the `parser` that read its start, to its end or a close."""
    rest = bytearray()
    while not parser.complete:
        data = sock.recv(65536)
        if not data:
            break
        rest += parser.feed(data)
    return bytes(rest)


def roundtrip(url: str | None, raw: bytes, timeout: float = 20) -> tuple[ResponseParser, bytes]:
    with socket.create_connection(hostport(url), timeout=timeout) as sock:
        sock.sendall(raw)
        return read_response(sock)


def count_tokens(body: bytes) -> int:
    return body.count(b'"content":" ')  # token text starts with a space; the role delta's is empty


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


# relay ------------------------------------------------------------------------------------------------------


def test_openai_client_streams_through_with_a_jwt(svc: Services) -> None:
    stub = svc.stub("--tokens", "20", "--ttft-ms", "5", "--interval-ms", "2")
    gw = svc.gateway(pool(stub), auth=True)
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key=token(), max_retries=0) as client:
        stream = client.chat.completions.create(model="tokenpath-stub", messages=[{"role": "user", "content": "x"}],
                                                stream=True)  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "".join(token_text(k) for k in range(20))
        whole = client.chat.completions.create(model="tokenpath-stub", messages=[{"role": "user", "content": "x"}])
        assert whole.choices[0].message.content == text
        assert [m.id for m in client.models.list()] == ["tokenpath-stub"]
    with (
        openai.OpenAI(base_url=f"{gw.url}/v1", api_key="not-a-jwt", max_retries=0) as client,
        pytest.raises(openai.AuthenticationError, match="invalid or missing bearer token"),
    ):
        client.models.list()


def test_every_relayed_byte_is_exact(svc: Services) -> None:
    stub = svc.stub()
    gw = svc.gateway(pool(stub))
    pacing = {"tokenpath": {"ttft_ms": 5, "interval_ms": 20, "tokens": 25, "frame_bytes": 300, "format": "plain"}}
    body = {**CHAT, **pacing}
    direct_head, direct = roundtrip(stub, request(body, headers="Connection: close\r\n"))
    via_head, via = roundtrip(gw.url, request(body, headers="Connection: close\r\n"))
    assert via_head.head is not None
    assert direct_head.head is not None
    assert via_head.head.status == direct_head.head.status == 200
    assert via == direct
    assert len(via) == 25 * 300
    headers = dict((k.lower(), v) for k, v in via_head.head.headers)
    assert headers["content-type"].startswith("text/event-stream")
    assert uuid.UUID(headers["x-request-id"]).version == 4  # a UUID: servers that check the header take it


def lockstep_member(frames: int, delivered: queue.Queue[int]) -> tuple[socket.socket, threading.Thread]:
    """A member that sends frame k only once the client has said it got frame k - 1 (`delivered`): a gateway that
    writes each upstream read at once passes it whatever the host's load; one that holds a frame (for more bytes, or
    a timer) never gets the next one to send, and the client's wait for it times out."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            seen = b""
            while b"\r\n\r\n" not in seen:
                seen += conn.recv(65536)
            head, _, body = seen.partition(b"\r\n\r\n")
            length = int(
                next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            )
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for k in range(frames):
                frame = b'data: {"choices":[{"delta":{"content":"f%03d"}}]}\n\n' % k
                conn.sendall(b"%x\r\n%b\r\n" % (len(frame), frame))
                if delivered.get(timeout=30) != k:
                    return
            conn.sendall(b"5\r\nend\n\n\r\n0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_each_upstream_read_reaches_the_client_before_the_next_is_sent(svc: Services) -> None:
    """Each upstream read is written downstream at once. Was: a probe's frames per read at most 15/13 for 60 ms
    frames, which a loaded host failed by scheduling the probe late (1.875 with a core kept busy), not the gateway.
    In lockstep nothing but the gateway can hold a frame: the member sends the next only when the client has this
    one, and a frame held is never followed (10 s, then the test fails)."""
    delivered: queue.Queue[int] = queue.Queue()
    listener, member = lockstep_member(15, delivered)
    try:
        gw = svc.gateway(pool(f"http://127.0.0.1:{listener.getsockname()[1]}"))
        with socket.create_connection(hostport(gw.url), timeout=10) as sock:
            sock.sendall(request(CHAT, headers="Connection: close\r\n"))
            parser = ResponseParser()
            got = b""
            for k in range(15):
                while b"f%03d" % k not in got:
                    data = sock.recv(65536)  # the socket's 10 s timeout: a held frame fails here
                    assert data, f"closed before frame {k}"
                    got += parser.feed(data)
                delivered.put(k)
            got += read_rest(sock, parser)
        assert got.endswith(b"end\n\n")
    finally:
        delivered.put(-1)
        listener.close()
        member.join(5)


def test_http_1_0_client_gets_a_close_delimited_stream(svc: Services) -> None:
    stub = svc.stub("--tokens", "5", "--ttft-ms", "1", "--interval-ms", "1")
    gw = svc.gateway(pool(stub))
    raw = request(CHAT).replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    parser, body = roundtrip(gw.url, raw)
    assert parser.head is not None
    assert parser.head.close_delimited
    assert parser.complete
    assert body.endswith(b"data: [DONE]\n\n")


# auth ---------------------------------------------------------------------------------------------------------


def test_bad_tokens_get_401_with_the_challenge_and_the_token_is_never_logged(svc: Services) -> None:
    stub = svc.stub()
    gw = svc.gateway(pool(stub), auth=True)
    expired = jwt.encode({"sub": "x", "exp": int(time.time()) - 3600}, SECRET, algorithm="HS256")
    for auth_header, challenge in (("", 'Bearer realm="tokenpath"'),
                                   (f"Authorization: Bearer {expired}\r\n", 'error="invalid_token"')):  # fmt: skip
        parser, body = roundtrip(gw.url, request(CHAT, headers=auth_header + "Connection: close\r\n"))
        assert parser.head is not None
        assert parser.head.status == 401
        assert challenge in dict(parser.head.headers)["WWW-Authenticate"]
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
    time.sleep(0.2)
    log = gw.log_path.read_text()
    assert "token expired" in log
    assert "missing bearer token" in log
    assert expired not in log
    assert expired.split(".")[1] not in log


# failover and mid-stream failure ---------------------------------------------------------------------------------


class FailingServer(LoopbackHTTP):
    """A member that answers every request with 500: a real socket, a real HTTP server."""

    def __init__(self) -> None:
        self.hits = 0
        outer = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                outer.hits += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                body = b'{"error":{"message":"overloaded"}}'
                self.send_response(500)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


def test_failover_before_the_first_byte_on_connect_error_and_5xx(svc: Services) -> None:
    stub = svc.stub("--tokens", "3", "--ttft-ms", "1", "--interval-ms", "1")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    failing = FailingServer()
    try:
        metrics_port = free_port()
        gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n[health]\neject_after = 2\ncooldown_s = 60\n'
                         + pool(dead, failing.url, stub))  # fmt: skip
        statuses = []
        for _ in range(9):
            parser, body = roundtrip(gw.url, request(CHAT, headers="Connection: close\r\n"))
            assert parser.head is not None
            statuses.append(parser.head.status)
            assert body.endswith(b"data: [DONE]\n\n")
        assert statuses == [200] * 9
        assert failing.hits == 2  # ejected after two 500s: the cooldown keeps it out
        murl = f"http://127.0.0.1:{metrics_port}/metrics"
        assert metric(murl, "tokenpath_gateway_failovers_total") >= 4
        assert metric(murl, 'tokenpath_gateway_member_healthy{member="' + dead) == 0
        assert metric(murl, 'tokenpath_gateway_member_healthy{member="' + stub) == 1
        assert metric(murl, 'tokenpath_gateway_errors_total{reason="upstream_500"}') == 2
    finally:
        failing.close()


def test_all_members_down_is_a_clear_502_that_keeps_member_details_in_the_log(svc: Services) -> None:
    port = free_port()
    gw = svc.gateway(pool(f"http://127.0.0.1:{port}"))
    parser, body = roundtrip(gw.url, request(CHAT, headers="Connection: close\r\nX-Request-Id: trace-me\r\n"))
    assert parser.head is not None
    assert parser.head.status == 502
    error = json.loads(body)["error"]
    assert error["code"] == "upstream_unavailable"
    assert "trace-me" in error["message"]  # the id an operator greps the log for
    assert str(port) not in error["message"]  # the member's address and the OS error stay inside
    assert "refused" not in error["message"].lower()
    time.sleep(0.2)
    log = gw.log_path.read_text()
    assert f"connect to 127.0.0.1:{port}" in log
    assert "trace-me" in log


def test_a_member_dying_mid_stream_ends_it_with_an_explicit_error_event(svc: Services) -> None:
    stub = svc.stub()
    relay = svc.start("relay", "--upstream", stub.removeprefix("http://"), "--mode", "pass", name="relay")
    gw = svc.gateway(pool(relay.url or ""))
    body = {**CHAT, "tokenpath": {"ttft_ms": 5, "interval_ms": 20, "tokens": 200}}
    with socket.create_connection(hostport(gw.url), timeout=20) as sock:
        sock.sendall(request(body))
        parser, got = read_response(sock, until=lambda b: count_tokens(b) >= 3)
        assert relay.pid is not None
        os.kill(relay.pid, signal.SIGKILL)
        while not parser.complete:
            data = sock.recv(65536)
            if not data:
                break
            got += parser.feed(data)
    frames = [f for f in got.split(b"\n\n") if f.strip()]
    assert frames[-1].startswith(b"event: error\ndata: ")
    error = json.loads(frames[-1].split(b"data: ", 1)[1])["error"]
    assert error["code"] == "upstream_disconnected"
    assert b"[DONE]" not in got
    assert b'"finish_reason":"stop"' not in got


# client disconnect -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["before the first token", "mid-stream", "non-streaming, before any header"])
def test_a_client_leaving_aborts_the_upstream_at_once(svc: Services, phase: str) -> None:
    """The stream would run 10 s; the stub must stop writing right after the client leaves. How soon (under 100 ms
    on a quiet host) is a benchmark figure; here the margin is one that a loaded machine cannot break."""
    stub = svc.stub()
    gw = svc.gateway(pool(stub))
    stream_id = f"gone-{phase.split()[0].strip(',')}-{secrets.token_hex(4)}"
    waits_first = phase.startswith(("before", "non"))
    body = {**CHAT, "stream": not phase.startswith("non"),
            "tokenpath": {"ttft_ms": 800 if waits_first else 5, "interval_ms": 20, "tokens": 500}}  # fmt: skip
    with socket.create_connection(hostport(gw.url), timeout=20) as sock:
        sock.sendall(request(body, headers=f"X-Tokenpath-Stream: {stream_id}\r\n"))
        if phase.startswith("non"):
            time.sleep(0.3)  # the gateway is waiting for the upstream's head, which comes with the whole answer
        elif phase.startswith("before"):
            read_response(sock, until=lambda b: b"role" in b)  # the head and the role delta, no token yet
        else:
            read_response(sock, until=lambda b: count_tokens(b) >= 5)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        left_ns = time.monotonic_ns()
    time.sleep(0.5)
    log = fetch_audit(stub, [stream_id]).streams[0].log
    assert log is not None
    assert log.state == "client_gone"  # the stub was told: its connection from the gateway was closed
    if log.writes:
        last_write_ns = max(w.actual_ns for w in log.writes)
        kept_ms = (last_write_ns - left_ns) / 1e6
        assert kept_ms < 1000, f"the stub kept writing {kept_ms:.0f} ms"
    assert len(log.writes) < 100
    if phase.startswith("non"):
        assert log.writes == ()  # the answer was never produced


# limits --------------------------------------------------------------------------------------------------------


def test_limits_answer_413_431_503_and_close_slow_headers(svc: Services) -> None:
    stub = svc.stub("--ttft-ms", "600", "--tokens", "3")
    gw = svc.gateway("[limits]\nmax_body_bytes = 1000\nmax_head_bytes = 2048\nheader_timeout_s = 1.0\n"
                     "max_streams = 1\n" + pool(stub))  # fmt: skip
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}
    parser, body = roundtrip(gw.url, request(big))
    assert parser.head is not None
    assert parser.head.status == 413
    assert "larger than 1000" in body.decode()
    parser, _ = roundtrip(gw.url, request(CHAT, headers=f"X-Big: {'y' * 3000}\r\n"))
    assert parser.head is not None
    assert parser.head.status == 431
    with socket.create_connection(hostport(gw.url), timeout=10) as slow:  # slowloris: half a head, then nothing
        t0 = time.monotonic()  # before the send: the gateway's head timer cannot start earlier
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n")
        assert slow.recv(100) == b""
        assert 0.8 < time.monotonic() - t0 < 5
    with socket.create_connection(hostport(gw.url), timeout=10) as first:
        first.sendall(request(CHAT))
        time.sleep(0.2)  # the first stream is open (600 ms to its first token)
        parser, body = roundtrip(gw.url, request(CHAT, headers="Connection: close\r\n"))
        assert parser.head is not None
        assert parser.head.status == 503
        assert dict(parser.head.headers)["Retry-After"] == "1"
        _, rest = read_response(first)
        assert rest.endswith(b"data: [DONE]\n\n")


def test_a_slow_client_pauses_the_upstream_instead_of_growing_memory(svc: Services) -> None:
    stub = svc.stub()
    gw = svc.gateway(pool(stub))
    assert gw.pid is not None
    proc = psutil.Process(gw.pid)
    total = 3000 * 4096  # 12 MB offered as fast as the stub can write
    body = {**CHAT, "tokenpath": {"ttft_ms": 1, "interval_ms": 0.2, "tokens": 3000, "frame_bytes": 4096,
                                  "format": "plain"}}  # fmt: skip
    with socket.create_connection(hostport(gw.url), timeout=30) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        sock.sendall(request(body))
        rss_before = proc.memory_info().rss
        time.sleep(2.0)  # the client reads nothing while the stub offers the whole 12 MB
        grown_mb = (proc.memory_info().rss - rss_before) / 1e6
        open_receive_window(sock)
        parser, got = read_response(sock)
    # A gateway that buffered would hold the 12 MB it was offered; a paused one holds its 64 KiB write buffer. The
    # margin is wide on purpose: how little it grows is a benchmark figure (bench/timing_bounds.py, RESULTS.md).
    assert grown_mb < 10, f"gateway RSS grew {grown_mb:.1f} MB while its client did not read"
    assert len(got) == total
    assert parser.complete


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],  # see tests/conftest.py
)
@given(
    line=st.binary(min_size=0, max_size=120),
    headers=st.lists(st.binary(min_size=0, max_size=80), max_size=6),
)
def test_fuzzed_request_lines_and_headers_never_crash_it(fuzz_gateway: ServiceProcess, line: bytes,
                                                        headers: list[bytes]) -> None:  # fmt: skip
    raw = line + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"
    with socket.create_connection(hostport(fuzz_gateway.url), timeout=5) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        try:
            while sock.recv(65536):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
    health = urllib.request.urlopen(f"{fuzz_gateway.url}/_tokenpath/health", timeout=5)
    assert health.status == 200


@pytest.fixture(scope="module")
def fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    services = Services(tmp_path_factory.mktemp("fuzz"))
    stub = services.stub("--tokens", "2", "--ttft-ms", "1", "--interval-ms", "1")
    gw = services.gateway("[limits]\nheader_timeout_s = 2.0\n" + pool(stub))
    yield gw
    assert gw.pid is not None
    assert psutil.pid_exists(gw.pid)
    services.stop()


# observability and lifecycle ---------------------------------------------------------------------------------------


def test_metrics_and_request_id_propagation(svc: Services) -> None:
    stub = svc.stub("--tokens", "10", "--ttft-ms", "1", "--interval-ms", "1")
    metrics_port = free_port()
    gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n' + pool(stub))
    parser, _ = roundtrip(gw.url, request(CHAT, headers="X-Request-Id: abc-123\r\nConnection: close\r\n"))
    assert parser.head is not None
    assert dict(parser.head.headers)["X-Request-Id"] == "abc-123"
    murl = f"http://127.0.0.1:{metrics_port}/metrics"
    assert metric(murl, "tokenpath_gateway_frames_relayed_total") == 13  # role + 10 tokens + finish + [DONE]
    assert metric(murl, "tokenpath_gateway_added_ttft_seconds_count") == 1
    assert metric(murl, "tokenpath_gateway_upstream_ttft_seconds_count") == 1
    assert metric(murl, 'tokenpath_gateway_requests_total{code="200"}') == 1
    assert metric(murl, "tokenpath_gateway_streams_active") == 0


def test_sigterm_drains_open_streams_then_exits(svc: Services) -> None:
    stub = svc.stub()
    gw = svc.gateway("[limits]\ndrain_s = 10\n" + pool(stub))
    body = {**CHAT, "tokenpath": {"ttft_ms": 5, "interval_ms": 20, "tokens": 40}}
    with socket.create_connection(hostport(gw.url), timeout=20) as sock:
        sock.sendall(request(body))
        parser, got = read_response(sock, until=lambda b: count_tokens(b) >= 2)
        assert gw.pid is not None
        os.killpg(gw.pid, signal.SIGTERM)
        got += read_rest(sock, parser)
    assert got.endswith(b"data: [DONE]\n\n")
    assert count_tokens(got) == 40
    deadline = time.monotonic() + 5
    while psutil.pid_exists(gw.pid) and psutil.Process(gw.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the gateway did not exit after draining"
        time.sleep(0.05)


def test_two_workers_share_the_port(svc: Services) -> None:
    stub = svc.stub("--tokens", "3", "--ttft-ms", "1", "--interval-ms", "1")
    metrics_port = free_port()
    gw = svc.gateway(f'workers = 2\nmetrics_listen = "127.0.0.1:{metrics_port}"\n' + pool(stub))
    for _ in range(6):
        parser, body = roundtrip(gw.url, request(CHAT, headers="Connection: close\r\n"))
        assert parser.head is not None
        assert parser.head.status == 200
        assert body.endswith(b"[DONE]\n\n")
    assert metric(f"http://127.0.0.1:{metrics_port}/metrics", 'tokenpath_gateway_requests_total{code="200"}') == 6


def test_active_health_checks_eject_a_dead_member_without_traffic(svc: Services) -> None:
    stub = svc.stub()
    dead = f"http://127.0.0.1:{free_port()}"
    metrics_port = free_port()
    gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n[health]\nactive_interval_s = 0.2\n'
                     "eject_after = 2\ncooldown_s = 60\n" + pool(dead, stub))  # fmt: skip
    assert gw.url is not None
    murl = f"http://127.0.0.1:{metrics_port}/metrics"
    for _ in range(50):  # bounded: 5 s
        if metric(murl, 'tokenpath_gateway_member_healthy{member="' + dead) == 0:
            break
        time.sleep(0.1)
    assert metric(murl, 'tokenpath_gateway_member_healthy{member="' + dead) == 0
    assert metric(murl, 'tokenpath_gateway_member_healthy{member="' + stub) == 1


class BodilessServer(LoopbackHTTP):
    """An upstream that answers HEAD (Content-Length, no body), POST with 204, GET with a body."""

    BODY = b'{"object":"list","data":[]}'

    def __init__(self) -> None:
        outer = self
        self.seen: dict[str, str] = {}  # the last request's headers, as the upstream got them

        class Handler(QuietHandler):
            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.BODY)))
                self.end_headers()

            def do_GET(self) -> None:
                self.do_HEAD()
                self.wfile.write(outer.BODY)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.seen = dict(self.headers.items())
                self.send_response(204)
                self.end_headers()

        super().__init__(Handler)


def test_head_204_and_a_following_request_on_the_same_connection(svc: Services) -> None:
    upstream = BodilessServer()
    try:
        gw = svc.gateway(pool(upstream.url))
        with socket.create_connection(hostport(gw.url), timeout=10) as sock:
            sock.sendall(b"HEAD /v1/models HTTP/1.1\r\nHost: t\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 200")
            assert f"Content-Length: {len(upstream.BODY)}".encode() in head
            assert head.endswith(b"\r\n\r\n")
            assert b"chunked" not in head
            sock.sendall(request({"x": 1}, path="/v1/things", headers="X-Forwarded-For: 10.1.2.3\r\n"
                                 "Authorization: Bearer client-key\r\nX-Request-Id: r-1\r\n"))  # fmt: skip
            parser, body = read_response(sock)
            assert parser.head is not None
            assert parser.head.status == 204
            assert body == b""
            seen = upstream.seen
            assert seen["X-Forwarded-For"] == "10.1.2.3, 127.0.0.1"
            assert seen["X-Forwarded-Proto"] == "http"
            assert seen["X-Request-Id"] == "r-1"
            assert seen["Authorization"] == "Bearer client-key"  # --no-auth: the upstream checks the client's key
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            parser, body = read_response(sock)
            assert parser.head is not None
            assert parser.head.status == 200
            assert body == upstream.BODY
        with_auth = svc.gateway(pool(upstream.url), auth=True)
        jwt_header = f"Authorization: Bearer {token()}\r\nConnection: close\r\n"
        parser, _ = roundtrip(with_auth.url, request({"x": 1}, path="/v1/things", headers=jwt_header))
        assert parser.head is not None
        assert parser.head.status == 204
        assert "Authorization" not in upstream.seen  # the gateway checked the JWT: it is not passed on
    finally:
        upstream.close()


def test_a_tls_listener_forwards_x_forwarded_proto_https(svc: Services) -> None:
    upstream = BodilessServer()
    try:
        files = self_signed(svc.tmp_path / "tls", ["127.0.0.1"])
        gw = svc.gateway(f'tls_cert = "{files.cert}"\ntls_key = "{files.key}"\n' + pool(upstream.url))
        assert gw.url is not None
        assert gw.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(files.cert))
        ctx.set_alpn_protocols(["http/1.1"])
        host, port = gw.url.removeprefix("https://").rsplit(":", 1)
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname=host) as sock,
        ):
            sock.sendall(request({"x": 1}, path="/v1/things", headers="Connection: close\r\n"))
            parser, _ = read_response(sock)
        assert parser.head is not None
        assert parser.head.status == 204
        assert upstream.seen["X-Forwarded-Proto"] == "https"
    finally:
        upstream.close()
