"""The WebSocket client's fallback policy (probe/wsfallback.py, probe/stream.py): N failed upgrades (a refusal, or
no 101 within the upgrade timeout), the waits between them doubling, then the same request over SSE; the cost (the
first upgrade -> the first content event over SSE) reported apart from the SSE stream's own TTFT; every option
refused where it would be ignored."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

import tokenpath.probe.stream
from tests.helpers import accept_each
from tests.wssession import accept_101, offer_key, read_offer
from tokenpath.cli import app
from tokenpath.errors import UsageError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import probe_results, run_metrics
from tokenpath.probe.stream import _websocket, probe_stream
from tokenpath.probe.table import probe_table
from tokenpath.probe.trace import DEFAULT_LIMITS
from tokenpath.probe.transport import open_connection
from tokenpath.probe.wsfallback import CODEX_ATTEMPTS, NO_FALLBACK, WsFallback
from tokenpath.wire.apis import Api

EVENTS = [
    {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "status": "in_progress"}},
    {
        "type": "response.output_text.delta",
        "sequence_number": 1,
        "delta": "a",
        "item_id": "i",
        "output_index": 0,
        "content_index": 0,
    },
    {"type": "response.completed", "sequence_number": 2, "response": {"id": "r", "status": "completed"}},
]
SSE_BODY = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in EVENTS)


class Path:
    """A path that does not carry WebSocket: an upgrade is refused (405, as stock nginx leads to) or never answered
    (`silent`); a POST gets the Responses stream over SSE. Counts what it was asked."""

    def __init__(self, silent: bool = False, dies_after_101: bool = False) -> None:
        self.silent = silent
        self.dies_after_101 = dies_after_101
        self.upgrades = 0
        self.posts = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/responses"
        accept_each(self.listener, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = read_offer(conn)
            if data is None:
                return
            upgrade = b"upgrade: websocket" in data.lower()
            with self.lock:
                if upgrade:
                    self.upgrades += 1
                else:
                    self.posts += 1
            with contextlib.suppress(OSError):
                if upgrade and self.dies_after_101:  # upgrades, reads the response.create, then drops the socket
                    conn.sendall(accept_101(offer_key(data)))
                    conn.recv(65536)
                elif upgrade and self.silent:
                    conn.recv(65536)  # holds the offer unanswered until the client gives up
                elif upgrade:
                    body = b'{"error":"GET is not allowed"}'
                    conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                    conn.sendall(SSE_BODY)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def refusing() -> Iterator[Path]:
    path = Path()
    yield path
    path.close()


def _cfg(url: str, policy: WsFallback = NO_FALLBACK, **kw: Any) -> ProbeConfig:
    return ProbeConfig(url=url, api=Api.RESPONSES, transport="websocket", ws_fallback=policy, **kw)


def test_the_policy_s_waits_double_as_codex_s_do() -> None:
    codex = WsFallback(CODEX_ATTEMPTS)
    assert [codex.delay_s(k) for k in range(1, 6)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2])
    assert codex.waits_s == pytest.approx(6.2)  # five waits between six upgrades
    assert codex.upgrade_timeout_s == 15.0
    assert not NO_FALLBACK.enabled
    for bad in ({"attempts": -1}, {"attempts": 21}, {"attempts": True}, {"retry_delay_ms": -1.0}):
        with pytest.raises(UsageError):
            WsFallback(**bad)
    with pytest.raises(UsageError, match="upgrade_timeout"):
        WsFallback(2, upgrade_timeout_s=0)


def test_the_experiment_s_websocket_table() -> None:
    assert WsFallback.from_table({}, "[websocket]") == WsFallback(CODEX_ATTEMPTS)
    assert WsFallback.from_table({"fallback": 0}, "[websocket]") == NO_FALLBACK
    table = {"fallback": 2, "retry_delay_ms": 50, "upgrade_timeout_s": 1.5}
    assert WsFallback.from_table(table, "[websocket]") == WsFallback(2, 50, 1.5)
    with pytest.raises(UsageError, match=r"\[websocket\]: unknown key\(s\) retries"):
        WsFallback.from_table({"retries": 3}, "[websocket]")
    with pytest.raises(UsageError, match=r"\[websocket\]"):
        WsFallback.from_table({"fallback": -2}, "[websocket]")


def test_after_n_refused_upgrades_the_request_goes_out_over_sse_and_its_cost_is_reported(refusing: Path) -> None:
    waits: list[float] = []
    cfg = _cfg(refusing.url, WsFallback(3, retry_delay_ms=40))

    def connect(target: Any, c: ProbeConfig) -> Any:
        return open_connection(target, connect_timeout_s=c.connect_deadline_s, tls=c.tls)

    def sleep(s: float) -> None:
        waits.append(s)
        time.sleep(s)

    trace = _websocket(cfg, "tp-fallback", time.monotonic_ns, connect, DEFAULT_LIMITS, sleep)
    assert (refusing.upgrades, refusing.posts) == (3, 1)
    assert waits == pytest.approx([0.04, 0.08])  # doubled after each failure
    metrics = run_metrics(trace)
    ws = metrics.ws
    assert ws is not None
    assert ws.fell_back
    assert not ws.upgraded
    assert ws.upgrade_status == 405  # the last refusal's figures
    assert ws.attempts == 3
    assert metrics.ttft_ms is not None  # the SSE stream's own, from its request
    assert ws.fallback_ms is not None
    assert ws.fallback_ms >= 120  # the waits (40 + 80 ms) are inside the cost ...
    assert ws.fallback_ms > metrics.ttft_ms  # ... and the SSE TTFT is apart from it
    assert trace.end is not None
    assert not trace.end.cut
    assert "fell back to SSE after 3 upgrades" in ws.note
    doc = json.loads(json.dumps(metrics.to_json()))["websocket"]
    assert (doc["fell_back"], doc["attempts"]) == (True, 3)
    assert doc["fallback_ms"] == pytest.approx(ws.fallback_ms, abs=0.001)
    caption = str(probe_table(probe_results(refusing.url, [metrics], Api.RESPONSES)).caption)
    assert "fell back to SSE after 3 upgrades" in caption


def test_without_the_policy_a_refusal_is_the_result_and_no_sse_request_goes_out(refusing: Path) -> None:
    ws = run_metrics(probe_stream(_cfg(refusing.url))).ws
    assert ws is not None
    assert not ws.fell_back
    assert ws.attempts == 1
    assert (refusing.upgrades, refusing.posts) == (1, 0)


def test_no_101_within_the_upgrade_timeout_is_a_failed_upgrade() -> None:
    path = Path(silent=True)
    try:
        started = time.monotonic()
        cfg = _cfg(path.url, WsFallback(2, retry_delay_ms=0, upgrade_timeout_s=0.3), first_byte_timeout_s=30)
        metrics = run_metrics(probe_stream(cfg))
        took = time.monotonic() - started
    finally:
        path.close()
    ws = metrics.ws
    assert ws is not None
    assert ws.fell_back
    assert ws.upgrade_status == 0
    assert "no answer within 0.3 s" in ws.note
    assert (path.upgrades, path.posts) == (2, 1)
    assert ws.fallback_ms is not None
    assert ws.fallback_ms >= 600
    assert took < 20  # the upgrade timeout, never the 30 s first-byte timeout


def test_an_upgrade_that_succeeds_is_never_retried() -> None:
    """Against the stub itself (it carries the upgrade): one upgrade, no SSE request, attempts 1."""
    path = _CountingStub()
    try:
        ws = run_metrics(probe_stream(_cfg(path.url, WsFallback(3)))).ws
    finally:
        path.close()
    assert ws is not None
    assert ws.upgraded
    assert ws.final_event
    assert ws.attempts == 1
    assert not ws.fell_back


class _CountingStub:
    def __init__(self) -> None:
        from tests.helpers import BackgroundLoop
        from tokenpath.stub.config import StubConfig
        from tokenpath.stub.server import StubServer

        self.bg = BackgroundLoop()
        self.server = StubServer(StubConfig(port=0, api="all", tokens=3, interval_ms=5))
        self.bg.run(self.server.start())
        self.url = self.server.url

    def close(self) -> None:
        self.bg.run(self.server.close())
        self.bg.close()


# --- the options: each reaches the config, each refused where it would be ignored ----------------------------------


def _captured(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[list[ProbeConfig], str]:
    seen: list[ProbeConfig] = []

    def capture(cfg: ProbeConfig, **_: Any) -> Any:
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(tokenpath.probe.stream, "probe_stream", capture)
    out = CliRunner().invoke(app, ["probe", "http://127.0.0.1:9", "--api", "responses", *args])
    return seen, out.output


def test_the_flags_reach_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    ws = ["--transport", "websocket"]
    seen, _ = _captured(monkeypatch, *ws, "--ws-fallback", "4")
    assert seen[0].ws_fallback == WsFallback(4)  # Codex's waits and upgrade timeout by default
    seen, _ = _captured(
        monkeypatch, *ws, "--ws-fallback", "2", "--ws-retry-delay-ms", "75", "--ws-upgrade-timeout", "2.5"
    )
    assert seen[0].ws_fallback == WsFallback(2, 75.0, 2.5)
    seen, _ = _captured(monkeypatch, *ws, "--ws-ping-s", "0.5")
    assert seen[0].ws_ping_s == 0.5
    assert seen[0].ws_fallback == NO_FALLBACK


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--ws-fallback", "3"], "--ws-fallback is the WebSocket client's policy"),
        (["--transport", "websocket", "--ws-retry-delay-ms", "10"], "go with --ws-fallback N"),
        (["--transport", "websocket", "--ws-upgrade-timeout", "1"], "go with --ws-fallback N"),
        (["--transport", "websocket", "--ws-fallback", "0"], "at least 1 upgrade"),
        (["--transport", "websocket", "--ws-fallback", "1", "--ws-retry-delay-ms", "10"], "no upgrade is tried again"),
        (["--ws-ping-s", "1"], "--ws-ping-s"),
        (["--transport", "websocket", "--ws-ping-s", "0"], "--ws-ping-s"),
    ],
)
def test_an_option_that_would_be_ignored_is_refused(
    monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    seen, output = _captured(monkeypatch, *args)
    assert not seen
    assert says in " ".join(output.split())


def test_the_config_refuses_a_policy_off_websocket() -> None:
    with pytest.raises(UsageError, match="ws_fallback"):
        ProbeConfig(url="http://127.0.0.1:9", ws_fallback=WsFallback(2))
    with pytest.raises(UsageError, match="ws_ping_s"):
        ProbeConfig(url="http://127.0.0.1:9", ws_ping_s=1.0)


def test_load_refuses_the_websocket_transport_where_it_cannot_run_rather_than_ignore_it() -> None:
    """load speaks the WebSocket mode (load/wsconn.py, issue 38), over HTTP/1.1 only, in a format that has it."""
    out = CliRunner().invoke(app, ["load", "--api", "responses", "--transport", "websocket", "--http2"])
    assert out.exit_code != 0
    assert "--transport websocket is an HTTP/1.1 upgrade" in " ".join(out.output.split())
    out = CliRunner().invoke(app, ["load", "--transport", "websocket"])
    assert out.exit_code != 0
    assert "no WebSocket mode" in " ".join(out.output.split())


def test_a_stream_cut_after_its_upgrade_is_surfaced_never_retried_over_sse() -> None:
    """The peer dies at the worst moment: after its 101 and our response.create. The agents surface that (a retry
    could run a billed response twice); so does the policy: one upgrade, no SSE request, the cut reported."""
    path = Path(dies_after_101=True)
    try:
        metrics = run_metrics(probe_stream(_cfg(path.url, WsFallback(3, retry_delay_ms=0))))
    finally:
        path.close()
    ws = metrics.ws
    assert ws is not None
    assert ws.upgraded
    assert ws.cut
    assert ws.close_code == 1006
    assert ws.attempts == 1
    assert not ws.fell_back
    assert (path.upgrades, path.posts) == (1, 0)
