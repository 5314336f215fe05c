"""`api = ["realtime"]` in the matrix, end to end (issue 38 item 1): the Realtime API is WebSocket only, so its one
transport is websocket; direct and through nginx with its documented WebSocket lines, each run's session measured to
its response.done and joined to the stub's writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_matrix import needs_proxies, run_matrix, streamed

pytestmark = [pytest.mark.e2e, needs_proxies]

EXPERIMENT = """
name = "realtime"
frames = 6
runs = 2
ttft_ms = 20

[conditions]
interval_ms = [30]
api = "realtime"
transport = ["websocket"]

[[proxy]]
name = "nginx"
variants = ["websocket"]
"""


def test_a_realtime_session_is_measured_direct_and_through_nginx_websocket(tmp_path: Path) -> None:
    # --force: the mixed lane runs four tests at a time; what is asserted is that the path carries the session.
    doc, _ = run_matrix(tmp_path, EXPERIMENT, "--force")
    rows = doc["rows"]
    assert {(r["proxy"], r["transport"], r["api"]) for r in rows} == {
        ("direct", "websocket", "realtime"),
        ("nginx", "websocket", "realtime"),
    }
    for row in rows:
        assert streamed(row), row  # a loaded host may lose a run to the stub's audit, never to a cut
        for run in row["raw"]:
            ws = run["metrics"]["websocket"]
            assert ws["upgraded"]
            assert ws["final_event"]  # response.done
            assert ws["close_code"] == 1000
        if row["excluded"] < row["runs"]:  # an included run: the first delta joined to the stub's write of it
            assert row["added_ttft_ms_median"] is not None
