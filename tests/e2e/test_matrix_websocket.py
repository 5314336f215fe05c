"""`transport = ["sse", "websocket"]` as a matrix condition, end to end (issue 38): the Responses stream over SSE and
over its WebSocket mode, direct, through stock nginx (which does not carry the upgrade: its WebSocket row says so,
with the status that came instead of 101, and what the client's fallback to SSE cost) and through nginx with its
documented WebSocket lines (streams)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_matrix import needs_proxies, run_matrix, streamed

pytestmark = [pytest.mark.e2e, needs_proxies]

EXPERIMENT = """
name = "websocket"
frames = 8
runs = 2
ttft_ms = 20

[conditions]
interval_ms = [30]
api = "responses"
transport = ["sse", "websocket"]

[websocket]
fallback = 2
retry_delay_ms = 50

[[proxy]]
name = "nginx"
variants = ["stock", "websocket"]
"""


def _row(doc: dict[str, Any], variant: str | None, transport: str) -> dict[str, Any]:
    proxy = "direct" if variant is None else "nginx"
    return next(
        r
        for r in doc["rows"]
        if r["proxy"] == proxy and (variant is None or r["variant"] == variant) and r["transport"] == transport
    )


def test_the_transport_axis_shows_which_paths_carry_the_websocket_mode(tmp_path: Path) -> None:
    # --force: this file runs in the mixed lane, four tests at a time; what is asserted is which path carries the
    # upgrade, not the floor (test_matrix.py, in the timed lane, asserts a certified run).
    doc, out = run_matrix(tmp_path, EXPERIMENT, "--force")
    assert {r["transport"] for r in doc["rows"]} == {"sse", "websocket"}
    direct = _row(doc, None, "websocket")
    assert streamed(direct)
    assert all(run["metrics"]["websocket"]["upgraded"] for run in direct["raw"])
    assert all(run["metrics"]["websocket"]["final_event"] for run in direct["raw"])
    stock = _row(doc, "stock", "websocket")
    # The client's policy ([websocket]): two refused upgrades, 50 ms between them, then the same request over SSE:
    # the row says what that cost, from the first upgrade to the first content event (the wait inside it).
    assert stock["verdict"].startswith("WebSocket not carried: SSE after 2 upgrades, ")
    assert stock["fallback_ms_median"] >= 50
    assert all(run["metrics"]["websocket"]["fell_back"] for run in stock["raw"])
    assert all(run["metrics"]["websocket"]["attempts"] == 2 for run in stock["raw"])
    assert stock["excluded"] == stock["runs"] == 2
    assert list(stock["exclusions"]) == ["WebSocket upgrade not carried"]
    assert all(run["metrics"]["websocket"]["upgrade_status"] == 405 for run in stock["raw"])
    assert streamed(_row(doc, "stock", "sse"))  # the same path streams over SSE
    carried = _row(doc, "websocket", "websocket")
    assert streamed(carried)
    assert all(run["metrics"]["websocket"]["upgraded"] for run in carried["raw"])
    if carried["excluded"] < carried["runs"]:  # an included run is joined to the stub's writes, as an SSE row is
        assert carried["added_ttft_ms_median"] is not None
    assert carried["fallback_ms_median"] is None  # carried: no fallback ran
    assert "WebSocket not carried" in out
