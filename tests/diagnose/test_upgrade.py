"""diagnose --transport websocket, without a network: the upgrade tried through a scripted probe (refused, then the
client's fallback policy), the finding (the recognised proxy's catalogue line, or what carries it anywhere), its
exit code, its JSON and its lines. The real paths: tests/e2e/test_diagnose_websocket.py."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import replace

from tests.diagnose.test_classify import grown, streaming
from tests.helpers import accept_each
from tokenpath.diagnose import upgrade
from tokenpath.diagnose.report import diagnosis, dumps, lines
from tokenpath.diagnose.series import BASE, paced
from tokenpath.diagnose.upgrade import UpgradeTried, finding, try_upgrade
from tokenpath.errors import UpgradeNotCarried
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace
from tokenpath.probe.wsfallback import NO_FALLBACK, WsFallback
from tokenpath.probe.wsfigures import WsFigures
from tokenpath.proxies.catalogue import catalogue
from tokenpath.wire.apis import Api

REFUSED = WsFigures(False, 405, 2.0)
CARRIED = WsFigures(True, 101, 1.5, messages=12, message_reads=12, final_event=True)
POLICY = WsFallback(3, 10.0, 1.0)
TEMPLATE = ProbeConfig(url="http://127.0.0.1:9/v1/responses", api=Api.RESPONSES, transport="websocket")


def nginx_line() -> str:
    return catalogue()["nginx"].variant("websocket").line


class ScriptedProbe:
    """Answers each probe with the next WsFigures, and keeps the configs it was given."""

    def __init__(self, *answers: WsFigures) -> None:
        self.answers = list(answers)
        self.seen: list[ProbeConfig] = []

    def __call__(self, cfg: ProbeConfig) -> Trace:
        self.seen.append(cfg)
        trace = Trace(stream_id="tp-test", t_sent_ns=0)
        trace.ws = self.answers.pop(0)
        return trace


def test_a_carried_upgrade_is_tried_once_without_a_fallback() -> None:
    probe = ScriptedProbe(CARRIED)
    tried = try_upgrade(TEMPLATE, paced(BASE), probe, POLICY)
    assert tried.first.upgraded
    assert tried.fallback is None
    assert [c.ws_fallback for c in probe.seen] == [WsFallback(1, POLICY.retry_delay_ms, POLICY.upgrade_timeout_s)]
    assert probe.seen[0].transport == "websocket"
    assert ("tokenpath", paced(BASE).stub_pacing(Api.RESPONSES)) in probe.seen[0].extra_body  # the run's request


def test_a_refused_upgrade_is_tried_again_under_the_clients_policy() -> None:
    fell = replace(REFUSED, attempts=3, fell_back=True, fallback_ms=850.0)
    probe = ScriptedProbe(REFUSED, fell)
    tried = try_upgrade(TEMPLATE, paced(BASE), probe, POLICY)
    # the first upgrade waits the policy's upgrade timeout for its 101; the whole policy reaches the second probe
    assert [c.ws_fallback for c in probe.seen] == [WsFallback(1, 10.0, 1.0), POLICY]
    found = finding(tried, "nginx")
    assert not found.carried
    assert (found.status, found.fix, found.proxy, found.generic) == (405, nginx_line(), "nginx", None)
    assert (found.fallback_attempts, found.fallback_ms) == (3, 850.0)


def test_no_policy_measures_no_fallback() -> None:
    probe = ScriptedProbe(REFUSED)
    tried = try_upgrade(TEMPLATE, paced(BASE), probe, NO_FALLBACK)
    assert len(probe.seen) == 1
    assert tried.fallback is None


def test_each_stock_refuser_gets_its_own_catalogue_line_and_an_unnamed_path_all_of_them() -> None:
    tried = UpgradeTried(REFUSED, POLICY)
    for name in ("nginx", "envoy", "apache2"):
        assert finding(tried, name).fix == catalogue()[name].variant("websocket").line
    unnamed = finding(tried, None)
    assert unnamed.fix is None
    assert unnamed.generic is not None
    for name in ("nginx", "envoy", "apache2"):
        assert catalogue()[name].variant("websocket").line in unnamed.generic
    # HAProxy carries an upgrade stock: it has no such line, so the generic one is said
    assert finding(tried, "haproxy").fix is None


def test_h2o_lighttpd_and_squid_refused_get_their_own_catalogue_line() -> None:
    """Stock, each drops the Upgrade header (405 from the stub); each has a measured `websocket` variant now, so
    diagnose names its line, not the generic advice."""
    tried = UpgradeTried(REFUSED, POLICY)
    expected = {
        "h2o": "proxy.websocket: ON",
        "lighttpd": '"upgrade" => "enable"',
        "squid": "http_upgrade_request_protocols websocket allow all",
    }
    for name, line in expected.items():
        found = finding(tried, name)
        assert (found.proxy, found.fix, found.generic) == (name, catalogue()[name].variant("websocket").line, None)
        assert line in (found.fix or "")


def test_a_later_upgrade_that_was_carried_is_said_not_counted_as_a_fallback() -> None:
    tried = UpgradeTried(REFUSED, POLICY, replace(CARRIED, attempts=2))
    found = finding(tried, "nginx")
    assert found.fallback_ms is None
    assert found.fallback_error is not None
    assert "at times" in found.fallback_error


def test_the_diagnosis_exits_21_and_says_the_line_and_the_cost() -> None:
    verdict, runs = grown(streaming)
    fell = replace(REFUSED, attempts=3, fell_back=True, fallback_ms=850.0)
    d = diagnosis("http://p", True, runs, verdict, [[("Server", "nginx/1.22.1")]], None, (), None, (), upgrade=None)
    assert d.exit_code == 0
    assert d.upgrade is None
    d = diagnosis(
        "http://p", True, runs, verdict, [[("Server", "nginx/1.22.1")]], upgrade=UpgradeTried(REFUSED, POLICY, fell)
    )
    assert d.exit_code == UpgradeNotCarried.exit_code == 21
    text = "\n".join(lines(d))
    assert "websocket: not carried: WebSocket upgrade not carried: HTTP 405" in text
    assert f"fix: {nginx_line()}" in text
    assert "fallback: 3 failed upgrades" in text
    assert "850 ms" in text
    doc = json.loads(dumps(d))["websocket"]
    assert doc["carried"] is False
    assert doc["upgrade_status"] == 405
    assert doc["fix"] == {"proxy": "nginx", "line": nginx_line()}
    assert doc["fallback"]["policy"]["attempts"] == 3
    assert doc["fallback"]["cost_ms"] == 850.0
    carried = diagnosis("http://p", True, runs, verdict, [], upgrade=UpgradeTried(CARRIED, POLICY))
    assert carried.exit_code == 0
    assert json.loads(dumps(carried))["websocket"]["carried"] is True
    assert upgrade.finding(UpgradeTried(CARRIED, POLICY), None).fix is None


SSE_EVENTS = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"hi"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","response":{}}\n\n'
)


@contextlib.contextmanager
def unanswered_upgrades() -> Iterator[int]:
    """A server on loopback that accepts every connection, leaves a WebSocket upgrade unanswered (the socket open,
    nothing sent) and answers a POST with a short Responses SSE stream; its port."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve(conn: socket.socket) -> None:
        held.append(conn)
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return
            data += more
        head = data.split(b"\r\n\r\n", 1)[0].lower()
        if b"upgrade: websocket" in head:
            return  # held open, never answered
        head_lines = head.split(b"\r\n")
        length = next((int(h.split(b":", 1)[1]) for h in head_lines if h.startswith(b"content-length:")), 0)
        while len(data.split(b"\r\n\r\n", 1)[1]) < length:
            data += conn.recv(65536)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(SSE_EVENTS)
            + SSE_EVENTS
        )

    accept_each(server, serve)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for conn in held:
            conn.close()


def test_the_upgrade_check_is_bounded_where_the_path_leaves_upgrades_unanswered() -> None:
    """A path that never answers the upgrade: the policy's whole measurement (4 upgrades of 0.4 s, 0.35 s of waits:
    over 2 s) is cut to the upgrades that fit in the bound, and its cost is a least cost, the skipped waits added."""
    policy = WsFallback(4, 50.0, 0.4)
    with unanswered_upgrades() as port:
        template = replace(TEMPLATE, url=f"http://127.0.0.1:{port}/v1/responses", connect_timeout_s=1.0)
        started = time.monotonic()
        tried = try_upgrade(template, paced(BASE), probe_stream, policy, bound_s=1.0)
        took = time.monotonic() - started
    assert (tried.first.upgraded, tried.first.upgrade_status) == (False, 0)  # no answer within 0.4 s
    assert tried.measured == WsFallback(1, 50.0, 0.4)  # 0.6 s left after the first: one more upgrade fits
    assert tried.fallback is not None
    assert tried.fallback.fell_back
    assert tried.fallback.attempts == 1
    assert took < 1.0 + 1.0, took  # the bound, and the SSE stream after it
    measured_ms = tried.fallback.fallback_ms
    assert measured_ms is not None
    skipped_waits_ms = 50.0 + 100.0 + 200.0  # before the 3 upgrades not tried
    assert abs((tried.fallback_ms or 0.0) - (measured_ms + skipped_waits_ms)) < 1e-6
    found = finding(tried, None)
    assert found.measured_attempts == 1
    said = "\n".join(found.lines())
    assert "fallback: 4 failed upgrades (0.35 s of waits), then SSE: at least" in said, said
    assert "measured with 1 of its upgrades" in said
    assert found.to_json()["fallback"]["cost_at_least"] is True


def test_a_policy_that_fits_the_bound_is_measured_whole() -> None:
    fell = replace(REFUSED, attempts=3, fell_back=True, fallback_ms=850.0)
    probe = ScriptedProbe(REFUSED, fell)
    tried = try_upgrade(TEMPLATE, paced(BASE), probe, POLICY, bound_s=60.0)
    assert tried.measured is None
    assert probe.seen[1].ws_fallback == POLICY
    assert finding(tried, None).to_json()["fallback"]["cost_at_least"] is False


def test_the_bound_is_the_total_timeout_at_most_the_check_s_own() -> None:
    assert upgrade.upgrade_bound_s(TEMPLATE) == upgrade.UPGRADE_CHECK_S == 30.0
    assert upgrade.upgrade_bound_s(replace(TEMPLATE, total_timeout_s=12.0)) == 12.0
    codex = WsFallback(6)
    words = upgrade.waiting_words(codex, 30.0)
    assert "6 upgrades of up to 15 s each, 6.2 s of waits between them, then SSE: up to 96.2 s" in words
    assert "at most 30 s" in words
    assert "measured whole" in upgrade.waiting_words(WsFallback(2, 10.0, 1.0), 30.0)
