"""Issue 22 (framing and truncation) and the gateway items of issue 21 (metrics, logs, whose fault a failure is):
never more body bytes than a Content-Length announced; over TLS only close_notify ends a close-delimited body;
a stream cut mid-response counted once; one ejection, one log line; the access log names the member; a bug in
the gateway's own code is its own 500 or error event, never the member's failure."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.gateway.test_gateway_e2e import CHAT, Services, hostport, metric, pool, request
from tests.gateway.test_hostile_e2e import wait_for_log
from tests.gateway.test_tls_upstream_e2e import CA, server_context
from tests.helpers import BackgroundLoop, accept_each
from tokenpath.gateway import config as gwconfig
from tokenpath.gateway.downstream import Downstream
from tokenpath.gateway.server import GatewayServer
from tokenpath.gateway.upstream import ConnectionPool, UpstreamConnection
from tokenpath.proxies.base import free_port

pytestmark = pytest.mark.e2e

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
EVENTS = [b'data: {"choices":[{"index":0,"delta":{"content":" %d"}}]}\n\n' % i for i in range(3)]


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(tmp_path)
    yield services
    services.stop()


class ScriptedUpstream:
    """A TCP peer (optionally TLS) that reads each request and plays `script(sock)` on its connection."""

    def __init__(self, script: Callable[[Any], None], tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        accept_each(self.listener, self._serve)

    def _serve(self, raw: socket.socket) -> None:
        sock: Any = raw
        with contextlib.suppress(OSError):
            if self.tls is not None:
                sock = self.tls.wrap_socket(raw, server_side=True)  # raw's descriptor moves into sock
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.lower().split(b"\r\n")
            length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:"))
            while len(body) < length:
                body += sock.recv(65536)
            self.script(sock)
        sock.close()

    def close(self) -> None:
        self.listener.close()


def read_all(url: str | None, raw: bytes, timeout: float = 20) -> tuple[bytes, bytes]:
    """The response's head and its raw body bytes, read until the gateway closes."""
    with socket.create_connection(hostport(url), timeout=timeout) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return out


def header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.decode("latin-1").partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def last_event(payload: bytes) -> bytes:
    return [e for e in payload.split(b"\n\n") if e.strip()][-1]


# 1. never more than the length announced ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_an_sse_body_cut_short_under_a_content_length_never_overruns_it(svc: Services, version: str) -> None:
    """The upstream announces 40 bytes, sends 9 and closes. Before: the client got the 9 plus the error event,
    174 bytes under `Content-Length: 40`. A token stream is re-framed instead, so the error event fits."""

    def script(sock: socket.socket) -> None:
        sock.sendall(SSE_HEAD + b"Content-Length: 40\r\n\r\ndata: 1\n\n")

    upstream = ScriptedUpstream(script)
    try:
        gw = svc.gateway(pool(upstream.url))
        raw = request(CHAT, headers="Connection: close\r\n")
        if version == "1.0":
            raw = raw.replace(b"HTTP/1.1", b"HTTP/1.0", 1)
        head, body = read_all(gw.url, raw)
        assert head.startswith(b"HTTP/1.1 200")
        announced = header(head, "content-length")
        assert announced is None or len(body) <= int(announced)  # failed before: 174 > 40
        payload = dechunk(body) if header(head, "transfer-encoding") == "chunked" else body
        assert payload.startswith(b"data: 1\n\n")
        assert last_event(payload).startswith(b"event: error\ndata: ")
        assert json.loads(last_event(payload).split(b"data: ", 1)[1])["error"]["code"] == "upstream_disconnected"
    finally:
        upstream.close()


def test_a_plain_body_cut_short_under_a_content_length_is_cut_not_padded(svc: Services) -> None:
    def script(sock: socket.socket) -> None:
        sock.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"a": 12}')

    upstream = ScriptedUpstream(script)
    try:
        gw = svc.gateway(pool(upstream.url))
        head, body = read_all(gw.url, request(CHAT, headers="Connection: close\r\n"))
        assert head.startswith(b"HTTP/1.1 200")
        assert header(head, "content-length") == "40"
        assert body == b'{"a": 12}'  # fewer bytes than announced, then the close: the client sees the cut
    finally:
        upstream.close()


# 2. TLS: close_notify ends a close-delimited body, a bare FIN cuts it -----------------------------------------------


def close_delimited_tls(ending: str) -> Callable[[Any], None]:
    def script(tls: ssl.SSLSocket) -> None:
        tls.sendall(SSE_HEAD + b"Connection: close\r\n\r\n")
        for event in EVENTS:
            tls.sendall(event)
        if ending == "close_notify":
            tls.sendall(b"data: [DONE]\n\n")
            with contextlib.suppress(OSError):
                tls.unwrap()  # close_notify, then waits for the gateway's
        else:
            tls.shutdown(socket.SHUT_RDWR)  # a FIN and no close_notify: what anyone on the path can send

    return script


def test_over_tls_close_notify_ends_a_close_delimited_body_at_once(svc: Services, ca: CA) -> None:
    upstream = ScriptedUpstream(close_delimited_tls("close_notify"), server_context(ca))
    try:
        gw = svc.gateway("[limits]\nidle_timeout_s = 4\n" + pool(upstream.url, extra=f'ca_file = "{ca.ca_file}"'))
        t0 = time.monotonic()
        head, body = read_all(gw.url, request(CHAT, headers="Connection: close\r\n"))
        elapsed = time.monotonic() - t0
        assert head.startswith(b"HTTP/1.1 200")
        payload = dechunk(body)
        assert b"event: error" not in payload  # before: the idle timeout's error event, 4 s later
        assert payload == b"".join(EVENTS) + b"data: [DONE]\n\n"
        assert body.endswith(b"0\r\n\r\n")
        assert elapsed < 3  # ends on the close_notify (nginx: 0.40 s), not on the 4 s idle timeout
    finally:
        upstream.close()


def test_over_tls_a_fin_without_close_notify_mid_close_delimited_body_is_a_truncation(svc: Services, ca: CA) -> None:
    upstream = ScriptedUpstream(close_delimited_tls("fin"), server_context(ca))
    try:
        gw = svc.gateway(pool(upstream.url, extra=f'ca_file = "{ca.ca_file}"'))
        head, body = read_all(gw.url, request(CHAT, headers="Connection: close\r\n"))
        assert head.startswith(b"HTTP/1.1 200")
        payload = dechunk(body)
        assert payload.startswith(b"".join(EVENTS))
        error = last_event(payload)
        assert error.startswith(b"event: error\ndata: ")  # before: passed on as a clean end
        assert json.loads(error.split(b"data: ", 1)[1])["error"]["code"] == "upstream_disconnected"
        assert wait_for_log(gw, "without TLS close_notify")
    finally:
        upstream.close()


@pytest.fixture
def ca(tmp_path: Path) -> CA:
    (tmp_path / "ca").mkdir()
    return CA(tmp_path / "ca")


# 3. metrics and logs of a stream that fails mid-response -------------------------------------------------------------


def test_a_stream_cut_mid_response_is_counted_once_ejected_once_and_logged_with_its_member(svc: Services) -> None:
    def script(sock: socket.socket) -> None:
        sock.sendall(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%b\r\n" % (len(EVENTS[0]), EVENTS[0]))
        time.sleep(0.05)  # then the member dies mid-stream

    upstream = ScriptedUpstream(script)
    try:
        metrics_port = free_port()
        gw = svc.gateway(f'metrics_listen = "127.0.0.1:{metrics_port}"\n[health]\neject_after = 1\ncooldown_s = 60\n'
                         + pool(upstream.url))  # fmt: skip
        for _ in range(2):  # the second goes to the member although it is ejected: it is the only one
            head, body = read_all(gw.url, request(CHAT, headers="Connection: close\r\n"))
            assert head.startswith(b"HTTP/1.1 200")
            assert last_event(dechunk(body)).startswith(b"event: error")
        murl = f"http://127.0.0.1:{metrics_port}/metrics"
        assert metric(murl, 'tokenpath_gateway_requests_total{code="200"}') == 2  # before: 0
        assert metric(murl, 'tokenpath_gateway_errors_total{reason="upstream_lost_mid_stream"}') == 2
        assert metric(murl, "tokenpath_gateway_errors_total{") == 2  # before: 4 (also under upstream_closed)
        assert metric(murl, "tokenpath_gateway_streams_active") == 0
        deadline = time.monotonic() + 5
        while True:
            lines = [json.loads(x) for x in gw.log_path.read_text().splitlines() if x.startswith("{")]
            requests = [x for x in lines if "request_id" in x]
            if len(requests) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(requests) == 2
        assert all(x["member"] == upstream.url for x in requests)  # before: no member in the access log
        ejections = [x for x in lines if x.get("event") == "member_ejected"]
        assert len(ejections) == 1  # before: once per failure while already ejected
        assert ejections[0]["member"] == upstream.url
    finally:
        upstream.close()


# 3. a bug in our own code is never the member's failure --------------------------------------------------------


class InProcessGateway:
    """The gateway in this process (its loop in a thread), so a test can plant a bug in it."""

    def __init__(self, upstream_url: str) -> None:
        self.bg = BackgroundLoop()
        self.registry = CollectorRegistry()
        cfg = gwconfig.from_dict({
            "listen": "127.0.0.1:0", "auth": {"mode": "none"}, "health": {"eject_after": 1, "cooldown_s": 60},
            "pool": [{"name": "default", "member": [{"url": upstream_url}]}],
        })  # fmt: skip

        async def start() -> GatewayServer:
            server = GatewayServer(cfg, registry=self.registry)
            await server.start()
            return server

        self.server = self.bg.run(start())
        self.url = self.server.url

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def settled(self, name: str, want: float, timeout_s: float = 5.0) -> float:
        """The gauge once it reads `want`, or its value after timeout_s: an exchange leaves the active set when its
        task ends, one loop pass after its last bytes went out, so a client that has read them may look first."""
        deadline = time.monotonic() + timeout_s
        while (value := self.sample(name)) != want and time.monotonic() < deadline:
            time.sleep(0.01)
        return value

    def close(self) -> None:
        self.bg.run(self.server.close(0.5))
        self.bg.close()


@pytest.mark.parametrize("where", ["acquire", "upstream_head", "upstream_body", "upstream_complete"])
def test_a_bug_in_our_code_fails_the_request_as_internal_and_never_counts_against_the_member(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    def script(sock: socket.socket) -> None:
        body = b"".join(EVENTS) + b"data: [DONE]\n\n"
        sock.sendall(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))

    upstream = ScriptedUpstream(script)
    gateway = InProcessGateway(upstream.url)
    original: Any = ConnectionPool.acquire if where == "acquire" else getattr(Downstream, where)
    planted: list[str] = []

    def buggy(self: Downstream, *args: Any) -> None:
        if not planted:
            planted.append(where)
            if where != "upstream_head":
                original(self, *args)  # the bug strikes after the method did part of its work
            raise RuntimeError(f"planted bug in {where}")
        original(self, *args)

    async def buggy_acquire(self: ConnectionPool, *args: Any) -> UpstreamConnection:
        if not planted:
            planted.append(where)
            raise RuntimeError("planted bug in acquire")
        conn: UpstreamConnection = await original(self, *args)
        return conn

    if where == "acquire":
        monkeypatch.setattr(ConnectionPool, "acquire", buggy_acquire)
    else:
        monkeypatch.setattr(Downstream, where, buggy)
    try:
        head, body = read_all(gateway.url, request(CHAT, headers="Connection: close\r\n"))
        member = gateway.server.app.pools[0].members[0]
        assert planted == [where]
        if where in ("acquire", "upstream_head"):  # before: a 502 (acquire: no answer until the total timeout)
            assert head.startswith(b"HTTP/1.1 500")
            assert json.loads(body)["error"]["code"] == "internal_error"
        elif where == "upstream_body":
            assert head.startswith(b"HTTP/1.1 200")
            assert json.loads(last_event(dechunk(body)).split(b"data: ", 1)[1])["error"]["code"] == "internal"
        else:
            assert head.startswith(b"HTTP/1.1 200")  # the bug struck once the body was complete
        # The member answered correctly: not blamed (before: malformed_response, ejected with eject_after = 1).
        assert member.consecutive_failures == 0
        assert member.healthy(time.monotonic())
        assert gateway.sample("tokenpath_gateway_member_healthy", pool="default", member=upstream.url) == 1
        assert gateway.sample("tokenpath_gateway_errors_total", reason="malformed_response") == 0
        assert gateway.sample("tokenpath_gateway_errors_total", reason="internal") == 1
        assert gateway.settled("tokenpath_gateway_streams_active", 0) == 0  # and not one leaked
        assert member.outstanding == 0
        assert any(r.exc_info and "planted bug" in str(r.exc_info[1]) for r in caplog.records)  # with traceback
        # and the next request is served by the same member as if nothing had happened
        head, body = read_all(gateway.url, request(CHAT, headers="Connection: close\r\n"))
        assert head.startswith(b"HTTP/1.1 200")
        assert dechunk(body).endswith(b"data: [DONE]\n\n")
    finally:
        monkeypatch.undo()
        gateway.close()
        upstream.close()
