"""The gateway's rows with `transport = "websocket"` (issue 38): the matrix's own WebSocket probe through the stock
gateway and the `jwt` variant (the token checked on the upgrade) streams the Responses events, joined to the stub's
writes as an SSE row is."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_matrix import run_matrix, streamed

pytestmark = [pytest.mark.e2e]

EXPERIMENT = """
name = "websocket-gateway"
frames = 6
runs = 2
ttft_ms = 20

[conditions]
interval_ms = [30]
api = "responses"
transport = ["sse", "websocket"]

[[proxy]]
name = "gateway"
variants = ["stock", "jwt"]
"""


def test_the_gateway_carries_the_websocket_mode_in_the_matrix(tmp_path: Path) -> None:
    # --force: what is asserted is that the gateway carries the upgrade, not the floor (test_matrix.py's lane)
    doc, _ = run_matrix(tmp_path, EXPERIMENT, "--force")
    rows = [r for r in doc["rows"] if r["proxy"] == "gateway" and r["transport"] == "websocket"]
    assert {r["variant"] for r in rows} == {"stock", "jwt"}
    for row in rows:
        # A loaded host may lose a run to the stub's audit (CI did), never to a cut; said with why each was excluded.
        why = [run.get("excluded_because") for run in row["raw"]]
        assert streamed(row), (row["variant"], row["exclusions"], row["ends"], why)
        assert all(run["metrics"]["websocket"]["upgraded"] for run in row["raw"])
        assert all(run["metrics"]["websocket"]["final_event"] for run in row["raw"])
        if row["excluded"] < row["runs"]:  # an included run is joined to the stub's writes
            assert row["added_ttft_ms_median"] is not None
