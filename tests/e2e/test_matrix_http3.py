"""`client_http = ["2", "3"]` as a matrix condition over Caddy 2.11's stock TLS site (issue 38 item 2): certified
over HTTP/3 first (the stub speaks no QUIC: Caddy's clean h3 site in front of it is the HTTP/3 direct path, and the
buffer and cork relays behind Caddy must be seen held over h3), then both rows measured, each in its own version,
within the floor of each other on a clean path; Envoy's http3 variant (its QUIC listener) streams over HTTP/3 too; a
path with no QUIC listener (stock nginx) skipped with its reason."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_matrix import needs_proxies, run_matrix
from tokenpath.proxies import catalogue
from tokenpath.report.compare import NOT_DISTINGUISHABLE, SAME, Comparison, Figure
from tokenpath.results.model import FLOOR_MARGIN_FPR, FLOOR_MARGIN_TTFT_MS
from tokenpath.stats import median

pytestmark = [
    pytest.mark.e2e,
    needs_proxies,
    pytest.mark.skipif(bool(catalogue()["caddy-2.11"].missing_reason()), reason="caddy-2.11 is not in the tools"),
]

EXPERIMENT = """
name = "client http 3"
frames = 12
runs = 3
ttft_ms = 20

[conditions]
interval_ms = [50]
tls = [true]
client_http = ["2", "3"]

[[proxy]]
name = "caddy-2.11"

[[proxy]]
name = "envoy"
variants = ["http3"]

[[proxy]]
name = "nginx"
"""


def test_http3_rows_are_certified_first_and_agree_with_http2_on_a_clean_path(tmp_path: Any) -> None:
    doc, stdout = run_matrix(tmp_path, EXPERIMENT, timeout=240)
    assert {c["client_http"] for c in doc["experiment"]["conditions"]} == {"2", "3"}
    checks = {c["name"]: c for c in doc["certification"]["checks"]}
    h3 = {name: c for name, c in checks.items() if "HTTP/3" in name}
    assert {
        "direct over HTTP/3: not run",  # stated, with why: the stub speaks no QUIC
        "pass over HTTP/3: not run",
        "h3-direct streams cleanly (HTTP/3)",
        "Caddy response_buffers seen held (HTTP/3)",  # the instrument sees a held stream over h3
        "cork relay behind Caddy seen (bursts, late) (HTTP/3)",
        "probes spoke HTTP/3",
    } <= set(h3)
    assert all(c["passed"] for c in h3.values()), h3
    assert "QUIC" in checks["direct over HTTP/3: not run"]["evidence"]
    assert doc["certification"]["passed"] is True

    rows = {(r["proxy"], r["http_version"]): r for r in doc["rows"]}
    assert set(rows) == {
        *(("direct", v) for v in ("2", "3")),
        *(("caddy-2.11", v) for v in ("2", "3")),
        *(("envoy", v) for v in ("2", "3")),  # its http3 variant: a QUIC listener beside ALPN h2
    }
    for (_, version), row in rows.items():
        assert all(run["error"] is None for run in row["raw"]), [run["error"] for run in row["raw"]]
        assert {run["http_version"] for run in row["raw"]} == {version}  # as the probe spoke it
    over_h2, over_h3 = rows[("caddy-2.11", "2")], rows[("caddy-2.11", "3")]
    assert over_h3["within_floor"] is True, over_h3["verdict"]
    assert over_h2["within_floor"] is True, over_h2["verdict"]
    # Within the floor of each other, by report --compare's rule over each run's own added time (against the stub's
    # writes: the rows' medians are each against their own direct path, and HTTP/3's is Caddy's clean h3 site):
    # "same" within the wider floor, or ranges that overlap; never one version clearly slower.
    floors = [f for f in doc["floors"] if f["condition"]["client_http"] in ("2", "3")]
    noise = max(f["ttft_spread_ms"] for f in floors) + FLOOR_MARGIN_TTFT_MS
    ttft = Comparison("caddy-2.11", "added TTFT ms", _figure(over_h2), _figure(over_h3), noise)
    assert ttft.verdict == SAME or ttft.verdict.startswith(NOT_DISTINGUISHABLE), (ttft, over_h2, over_h3)
    assert abs(over_h3["fpr_median"] - over_h2["fpr_median"]) <= FLOOR_MARGIN_FPR
    assert rows[("envoy", "3")]["within_floor"] is True, rows[("envoy", "3")]["verdict"]
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    assert any(path.startswith("nginx (") and "HTTP/3" in path for path in skipped), skipped
    assert all("QUIC" in reason for path, reason in skipped.items() if "HTTP/3" in path)
    assert "h3-direct" in stdout


def _figure(row: dict[str, Any]) -> Figure:
    """A row's added TTFT as report --compare takes it: the kept runs' own (against the stub's writes), median and
    range."""
    added = [r["path_added_ttft_ms"] for r in row["raw"] if r["included"] and r["path_added_ttft_ms"] is not None]
    return Figure(median(added), min(added), max(added))
