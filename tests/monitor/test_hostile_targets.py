"""Broken and hostile targets end as failed probes with their reason, never as a stuck or dead monitor: real loopback
servers in process (tests/monitor/hostile_fleet.py), the monitor's own probe path (probing.default_prober,
MONITOR_LIMITS). All of them at once, 100 targets, for memory: tests/e2e/test_monitor_reliability.py."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.monitor.hostile_fleet import ALL, redirect_loop
from tests.probe.hostile import SSE_HEAD, Hostile, _read_request
from tokenpath import errors
from tokenpath.monitor.config import from_dict
from tokenpath.monitor.metrics import MonitorMetrics
from tokenpath.monitor.probing import INVALID_UTF8, MONITOR_LIMITS, OK, Aborter, default_prober, probe_route
from tokenpath.monitor.runner import Watch
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.trace import TraceRecorder
from tokenpath.probe.transport import TLSOptions

MS = 1_000_000


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Hostile] = []

    def start(kind: Any, https: bool = False) -> Hostile:
        started.append(Hostile(ALL[kind] if isinstance(kind, str) else kind, https=https))
        return started[-1]

    yield start
    for h in started:
        h.close()


def probe(url: str, connect_timeout_s: float = 2) -> Any:
    cfg = ProbeConfig(url, tls=TLSOptions(insecure=True), connect_timeout_s=connect_timeout_s, total_timeout_s=5)
    return probe_route("t", "via", cfg, default_prober(Aborter()))


def test_frames_that_are_not_utf8_fail_the_probe_as_invalid_utf8_with_its_figures(serve: Any) -> None:
    out = probe(serve("invalid_utf8").url)
    assert out.outcome == INVALID_UTF8
    assert out.message == "3 of 5 frames were not UTF-8 (an event stream always is)"
    assert out.metrics is not None
    assert out.metrics.frames == 5  # measured all the same: the dashboards show what it did


def test_utf8_beyond_ascii_is_content_as_any_other() -> None:
    rec = TraceRecorder("s", 0, MONITOR_LIMITS)
    rec.on_read(MS, SSE_HEAD + b"Content-Length: 100\r\n\r\n")
    rec.on_read(2 * MS, 'data: {"choices":[{"delta":{"content":"h\u00e9 \U0001f600"}}]}\n\n'.encode())
    assert rec.trace.invalid_utf8_frames == 0
    assert rec.trace.first_content == 0
    out = probe_route("t", "via", ProbeConfig("http://127.0.0.1:9"), lambda c, s: rec.trace)
    assert out.outcome == OK


def test_a_redirect_is_not_followed_and_its_message_drops_credentials_and_query(serve: Any) -> None:
    elsewhere = socket.create_server(("127.0.0.1", 0))  # where a redirect would lead: must see no connection
    elsewhere.settimeout(0.2)
    port = elsewhere.getsockname()[1]

    def away(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://a:b@127.0.0.1:%d/v1?sig=x\r\n"
                     b"Content-Length: 0\r\n\r\n" % port)  # fmt: skip

    try:
        h = serve(away)
        out = probe(h.url)
        assert out.outcome == "http_status"
        assert f"HTTP 307 from http://127.0.0.1:{h.port}" in out.message
        assert f"a redirect to 'http://127.0.0.1:{port}/v1', not followed" in out.message
        assert "sig=" not in out.message
        assert "a:b" not in out.message
        with pytest.raises(TimeoutError):
            elsewhere.accept()
    finally:
        elsewhere.close()
    loop = probe(serve(redirect_loop).url)
    assert loop.outcome == "http_status"
    assert "t0ken" not in loop.message
    assert "user:pw" not in loop.message


def test_the_monitor_holds_one_event_of_at_most_256_kb_and_fails_past_it(serve: Any) -> None:
    assert MONITOR_LIMITS.event_bytes == 256 << 10
    out = probe(serve("endless_event").url)
    assert out.outcome == "response_too_large"
    assert f"grew past {256 << 10} bytes" in out.message
    rec = TraceRecorder("s", 0)  # the probe command's own limit stays 8 MB
    rec.on_read(MS, SSE_HEAD + b"Connection: close\r\n\r\ndata: ")
    rec.on_read(2 * MS, b"x" * (2 << 20))


def test_a_tls_peer_that_never_answers_the_handshake_is_connect_timeout(serve: Any) -> None:
    h = serve("tls_stall", https=True)
    started = time.monotonic()
    out = probe(h.url, connect_timeout_s=0.5)
    assert out.outcome == "connect_timeout"
    assert "TLS handshake" in out.message
    assert time.monotonic() - started < 2


def test_stop_ends_a_probe_stuck_in_a_tls_handshake_at_once(serve: Any) -> None:
    h = serve("tls_stall", https=True)
    target = {"name": "stall", "url": h.url, "insecure": True, "connect_timeout_s": 60, "total_timeout_s": 60}
    cfg = from_dict({"monitor": {"interval_s": 5}, "target": [target]})
    watch = Watch(cfg, MonitorMetrics(cfg))
    runner = threading.Thread(target=watch.run)
    runner.start()
    try:
        deadline = time.monotonic() + 5
        while not watch.aborter._connecting and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watch.aborter._connecting, "the probe never started connecting"
        time.sleep(0.1)  # in the handshake's wait now
        stopped = time.monotonic()
        watch.stop()
        runner.join(10)
        assert not runner.is_alive()
        assert time.monotonic() - stopped < 2  # not the 60 s connect timeout
        assert not watch.aborter._connecting
    finally:
        watch.stop()


def test_a_stop_before_connecting_ends_the_connect_at_once() -> None:
    aborter = Aborter()
    aborter.stop()
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        cfg = ProbeConfig(f"https://127.0.0.1:{listener.getsockname()[1]}", connect_timeout_s=30)
        started = time.monotonic()
        with pytest.raises(errors.ConnectError):
            aborter.connect(cfg.target, cfg)
        assert time.monotonic() - started < 2
    finally:
        listener.close()


def test_the_monitor_takes_at_most_64_kb_per_tls_wake_up(tmp_path: Any) -> None:
    """A flood of TLS records: the monitor's drain stops at MONITOR_DRAIN_BYTES (the probe command's is 1 MB)."""
    from tests.probe.hostile import server_context
    from tokenpath.monitor.probing import MONITOR_DRAIN_BYTES
    from tokenpath.serve.tlscert import self_signed

    files = self_signed(tmp_path, ["127.0.0.1"])

    def flood_then_wait(conn: socket.socket) -> None:
        conn.recv(65536)
        for _ in range(64):
            conn.sendall(b"r" * 16384)  # 1 MB in 16 KB records, then silence
        time.sleep(30)

    h = Hostile(flood_then_wait, tls=server_context(str(files.cert), str(files.key)))
    cfg = ProbeConfig(h.url, tls=TLSOptions(insecure=True))
    transport = Aborter().connect(cfg.target, cfg)
    try:
        transport.sendall(b"GET / HTTP/1.1\r\n\r\n")
        transport.recv(5)
        time.sleep(0.5)  # let the flood fill the socket buffers
        drained = transport.drain()
        assert MONITOR_DRAIN_BYTES == 64 << 10
        assert 0 < len(drained) <= MONITOR_DRAIN_BYTES
    finally:
        transport.close()
        h.close()


def _echo_401(conn: socket.socket) -> None:
    """A debug or WAF page that echoes the request's head back, as many do."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head = data.split(b"\r\n\r\n")[0]
    conn.sendall(
        b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%b" % (len(head), head)
    )


def test_a_target_that_echoes_the_request_never_puts_the_key_in_the_message(serve: Any) -> None:
    """The failure's message (its log line) carried `Authorization: Bearer <key>` from the page's body."""
    key = "sk-TOPSECRET-abc"
    cfg = ProbeConfig(serve(_echo_401).url, api_key=key, connect_timeout_s=2, total_timeout_s=5)
    out = probe_route("t", "via", cfg, default_prober(Aborter()))
    assert out.outcome == "http_status"
    assert "Bearer ***" in out.message
    assert key not in out.message
