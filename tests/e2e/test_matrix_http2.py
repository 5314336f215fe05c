"""`client_http = ["1.1", "2"]` as a matrix condition, end to end: the stub over h2c as the direct path, nginx's
HTTP/2 variant (h2c with prior knowledge) measured over HTTP/2 and skipped, with its reason, over HTTP/1.1 (its
cleartext h2 port speaks no HTTP/1.1); stock nginx the other way round. Rows and runs carry their HTTP version, and
the HTTP/2 conditions their windows (`h2_window`), which reach the probe (its figures name them)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_matrix import needs_proxies, run_matrix

pytestmark = [pytest.mark.e2e, needs_proxies]

EXPERIMENT = """
name = "client http"
frames = 8
runs = 2
ttft_ms = 20

[conditions]
interval_ms = [30]
client_http = ["1.1", "2"]
h2_window = ["default", "browser"]

[[proxy]]
name = "nginx"
variants = ["stock", "http2_buffering_off"]
"""


def test_rows_are_measured_in_each_client_http_version_and_a_path_that_cannot_is_skipped(tmp_path: Any) -> None:
    doc, _ = run_matrix(tmp_path, EXPERIMENT, timeout=150)
    assert doc["schema_version"] == 9  # 8: how each stream ended (issue 36); 9: attribution and pairing (issue 37)
    assert {c["client_http"] for c in doc["experiment"]["conditions"]} == {"1.1", "2"}
    rows = {(r["proxy"], r["variant"], r["http_version"], r["h2_window"]): r for r in doc["rows"]}
    assert set(rows) == {
        ("direct", "stock", "1.1", "default"), ("direct", "stock", "2", "default"), ("direct", "stock", "2", "browser"),
        ("nginx", "stock", "1.1", "default"),
        ("nginx", "http2_buffering_off", "2", "default"), ("nginx", "http2_buffering_off", "2", "browser"),
    }  # fmt: skip
    for (_, _, version, window), row in rows.items():
        assert all(run["error"] is None for run in row["raw"]), [run["error"] for run in row["raw"]]
        assert {run["http_version"] for run in row["raw"]} == {version}  # as the probe spoke it
        if version == "2":  # the window reached the probe: its own figures name it
            assert {run["metrics"]["h2"]["window"] for run in row["raw"]} == {window}
    direct_h2 = rows[("direct", "stock", "2", "default")]
    assert min(run["metrics"]["frames_per_read"] for run in direct_h2["raw"]) == 1.0  # the stub over h2c streams
    assert rows[("nginx", "http2_buffering_off", "2", "default")]["arrivals_median"] > 1  # streams, not buffered
    assert rows[("nginx", "stock", "1.1", "default")]["verdict"].startswith("buffers")  # stock 1.22, over 1.1
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    assert set(skipped) == {
        "nginx (60 B @ 30 ms, loopback, HTTP/2)",
        "nginx (60 B @ 30 ms, loopback, HTTP/2 (window browser))",
        "nginx (http2_buffering_off) (60 B @ 30 ms, loopback)",
    }
    assert all(skipped.values())  # each with its reason
    # The controls were certified over HTTP/2 too before an HTTP/2 row was measured: the same checks, by name
    checks = {c["name"]: c["passed"] for c in doc["certification"]["checks"]}
    h2_checks = {name for name in checks if name.endswith("(HTTP/2)")}
    assert {"buffer relay seen (one arrival) (HTTP/2)", "cork relay seen (bursts, late) (HTTP/2)",
            "probes spoke HTTP/2 (HTTP/2)"} <= h2_checks  # fmt: skip
    assert all(checks[name] for name in h2_checks), checks
