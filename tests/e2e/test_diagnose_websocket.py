"""`tokenpath diagnose --transport websocket` through real nginx in front of the real stub (issue 38): stock nginx
drops the Upgrade and Connection headers, so the upgrade is not carried: exit 21, nginx's own catalogue line, and
the cost of the client's fallback to SSE measured (its failed upgrades, its waits, the SSE stream's first content
event); nginx with that line carries it and the series runs over WebSocket, each event its own message. Counts and
wide bounds, never tight times."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import stub_upstream
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.serve.procs import tokenpath_argv

pytestmark = pytest.mark.e2e

ATTEMPTS = 2
RETRY_DELAY_MS = 100.0  # one wait of 100 ms between the two upgrades


@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    with stub_upstream() as upstream:
        yield upstream


@pytest.fixture
def nginx(stub: Endpoint, request: pytest.FixtureRequest) -> Iterator[RunningProxy]:
    proxy = catalogue()["nginx"]
    if proxy.missing_reason():
        pytest.skip(f"nginx: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir("nginx"), proxy.variant(request.param))
    running = start(proxy, site)
    try:
        yield running
    finally:
        running.stop()


def diagnose(url: str) -> tuple[int, dict[str, Any], str]:
    argv = tokenpath_argv("diagnose", url, "--api", "responses", "--transport", "websocket", "--json")
    argv += ["--ws-fallback", str(ATTEMPTS), "--ws-retry-delay-ms", str(RETRY_DELAY_MS)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    doc: dict[str, Any] = json.loads(out.stdout) if out.stdout.strip() else {}
    return out.returncode, doc, out.stderr


@pytest.mark.parametrize("nginx", ["stock"], indirect=True)
def test_stock_nginx_does_not_carry_the_upgrade_and_diagnose_names_its_line_and_the_cost(
    nginx: RunningProxy,
) -> None:
    code, doc, err = diagnose(nginx.url)
    assert code == 21, err[-2000:]
    ws = doc["websocket"]
    assert ws["carried"] is False
    assert ws["upgrade_status"] not in (0, 101)
    assert ws["fix"] == {"proxy": "nginx", "line": catalogue()["nginx"].variant("websocket").line}
    fallback = ws["fallback"]
    assert fallback["policy"]["attempts"] == ATTEMPTS
    assert fallback["attempts"] == ATTEMPTS
    assert fallback["error"] is None
    # at least the policy's one wait, then the SSE stream's first content event; bounded widely
    assert RETRY_DELAY_MS <= fallback["cost_ms"] < 30_000
    # the series ran over SSE, the stream the client falls back to (its compressing client too): stock nginx's
    # proxy_buffering holds it, named as without --transport
    assert "browser" in [r["name"] for r in doc["runs"]]
    assert {r["transport"] for r in doc["runs"]} == {"sse"}
    assert doc["verdict"]["held"] is True


@pytest.mark.parametrize("nginx", ["websocket"], indirect=True)
def test_nginx_with_the_upgrade_lines_carries_it_and_the_series_runs_over_websocket(nginx: RunningProxy) -> None:
    code, doc, err = diagnose(nginx.url)
    assert code == 0, (doc.get("verdict"), err[-2000:])
    ws = doc["websocket"]
    assert ws["carried"] is True
    assert ws["upgrade_status"] == 101
    assert ws["fallback"] is None
    assert doc["verdict"]["cause"] == "streams"
    assert doc["paced"] is True
    assert "browser" not in [r["name"] for r in doc["runs"]]
    assert {r["transport"] for r in doc["runs"]} == {"websocket"}  # each run's trace: messages, not SSE events
    # one event a message, one message a read mostly: a WebSocket tunnel does not buffer
    base = next(r for r in doc["runs"] if r["name"] == "base")
    assert base["frames"] > 0


def diagnose_realtime(url: str) -> subprocess.CompletedProcess[str]:
    """The Realtime API, no --transport: WebSocket is implied, and no fallback policy (it has no SSE to fall to)."""
    argv = tokenpath_argv("diagnose", url, "--api", "realtime", "--json")
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_a_realtime_session_is_diagnosed_over_websocket(stub: Endpoint) -> None:
    out = diagnose_realtime(f"http://{stub.hostport}")
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["websocket"]["carried"] is True
    assert {r["transport"] for r in doc["runs"]} == {"websocket"}
    assert doc["verdict"]["cause"] == "streams"


@pytest.mark.parametrize("nginx", ["stock"], indirect=True)
def test_a_refused_realtime_upgrade_is_the_whole_finding_with_the_line_that_carries_it(nginx: RunningProxy) -> None:
    out = diagnose_realtime(nginx.url)
    assert out.returncode == 21, out.stderr[-2000:]
    assert "WebSocket only" in out.stderr
    assert catalogue()["nginx"].variant("websocket").line in out.stderr.replace("\n", " ")
