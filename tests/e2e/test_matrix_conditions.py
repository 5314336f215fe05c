"""The format and the request's Accept-Encoding as matrix conditions, end to end: real stub, real nginx (stock and
its gzip variant), the compressing controls certified before the compressed conditions, each format's direct
stream certified before its conditions, and rows that carry api and both encodings.

One certified run, 6 conditions x 3 paths x 2 runs of 8 frames every 30 ms: ~30 s on this 2-core machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_matrix import needs_proxies, run_matrix

pytestmark = pytest.mark.e2e

APIS = ("openai", "anthropic", "bedrock")
ENCODINGS = ("identity", "gzip")
EXPERIMENT = """
name = "formats and encodings"
frames = 8
runs = 2
ttft_ms = 20

[conditions]
interval_ms = [30]
api = ["openai", "anthropic", "bedrock"]
accept_encoding = ["identity", "gzip"]

[[proxy]]
name = "nginx"
variants = ["stock", "gzip"]
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("conditions")
    run_matrix(tmp, EXPERIMENT, timeout=120)
    return tmp / "out"


@pytest.fixture(scope="module")
def doc(run_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = json.loads((run_dir / "results.json").read_text())
    return results


def _rows(doc: dict[str, Any], proxy: str, variant: str = "stock") -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["api"], r["accept_encoding"]): r for r in doc["rows"] if (r["proxy"], r["variant"]) == (proxy, variant)}


@needs_proxies
def test_certification_includes_the_compression_controls_and_each_format(doc: dict[str, Any]) -> None:
    cert = doc["certification"]
    checks = {c["name"]: c for c in cert["checks"]}
    assert checks["gzip-hold relay seen (held: bursts, late; decoded gzip)"]["passed"], checks
    assert checks["gzip-flush relay within the floor (decoded gzip)"]["passed"], checks
    assert checks["direct streams cleanly in anthropic"]["passed"], checks
    assert checks["direct streams cleanly in bedrock"]["passed"], checks
    assert "direct streams cleanly in openai" not in checks  # the base checks are OpenAI's
    assert cert["passed"]


@needs_proxies
def test_rows_carry_the_format_and_both_encodings(doc: dict[str, Any]) -> None:
    for path in (("direct", "stock"), ("nginx", "stock"), ("nginx", "gzip")):
        rows = _rows(doc, *path)
        assert set(rows) == {(a, e) for a in APIS for e in ENCODINGS}, path
        for row in rows.values():
            assert row["runs"] - row["excluded"] >= 1, (path, row["exclusions"])
            assert row["fpr_median"] is not None, (path, row["verdict"])
    direct = _rows(doc, "direct")
    assert {r["content_encoding"] for r in direct.values()} == {"identity"}  # the stub never compresses
    gzip = _rows(doc, "nginx", "gzip")
    for api in APIS:
        # `gzip_types text/event-stream` compresses the SSE formats; Bedrock's binary event stream is another type.
        compressed = "identity" if api == "bedrock" else "gzip"
        assert gzip[(api, "gzip")]["content_encoding"] == compressed, api  # it compressed: the client decoded it
        assert gzip[(api, "identity")]["content_encoding"] == "identity", api  # nobody asked: it did not
    conditions = doc["experiment"]["conditions"]
    assert {(c["api"], c["accept_encoding"]) for c in conditions} == {(a, e) for a in APIS for e in ENCODINGS}


@needs_proxies
def test_nginx_gzip_without_proxy_buffering_off_holds_the_stream(doc: dict[str, Any]) -> None:
    for api in APIS:
        row = _rows(doc, "nginx", "gzip")[(api, "gzip")]
        assert row["within_floor"] is False, (api, row["verdict"])
        held = (row["arrivals_median"] or 0) <= 1 or (row["fpr_median"] or 0) >= 2
        assert held, (api, row["verdict"])
        assert row["added_ttft_ms_median"] >= 5 * 30, (api, row["verdict"])  # past most of the 8 x 30 ms stream


@needs_proxies
def test_the_table_has_the_api_and_encoding_columns(run_dir: Path) -> None:
    table = (run_dir / "table.md").read_text()
    assert "| api | encoding (asked -> answered) |" in table
    assert "| anthropic | gzip -> gzip |" in table
    assert "- nginx (gzip): `gzip on; gzip_types text/event-stream;`" in table
