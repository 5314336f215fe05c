"""`tokenpath load` through a path that cuts (issue 36): the gateway with a 1 s idle limit in front of a stub that
falls silent for 2 s after the first token. Each level's results hold how its streams ended, and the load table
shows them (its `ends` column, only because a stream did not end complete); the direct path's are never cut."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import Start
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

pytestmark = pytest.mark.e2e

PACING = ["--tokens", "3", "--interval-ms", "20", "--ttft-ms", "20", "--pause-ms", "2000", "--pause-after", "1"]


def test_a_load_run_through_a_path_that_cuts_shows_how_its_streams_ended(tmp_path: Path, service: Start) -> None:
    stub = service("stub", "--port", "0", *PACING, name="stub")
    config = tmp_path / "gateway.toml"
    config.write_text("[limits]\nidle_timeout_s = 1.0\nkeepalive_interval_s = 0\n")
    argv = ["gateway", "--config", str(config), "--listen", "127.0.0.1:0", "--upstream", stub.url or "", "--no-auth"]
    gateway = ServiceProcess(tokenpath_argv(*argv), "gateway")
    gateway.start()
    try:
        load = [
            *("load", "--target", gateway.url or "", "--stub-url", stub.url or ""),
            *("--concurrency", "2", "--warmup", "0.2", "--duration", "1.0", "--runs", "1", *PACING),
            *("--out", str(tmp_path / "out")),
        ]
        out = subprocess.run(
            tokenpath_argv(*load), capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "250"}
        )
    finally:
        gateway.stop()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    levels = {r["target"]: r for r in json.loads((tmp_path / "out" / "results.json").read_text())["levels"]}
    cut = levels["target"]["ends"]
    assert cut.get("cut_error", 0) + cut.get("cut_silent", 0) > 0, levels["target"]
    assert not {"cut_error", "cut_silent"} & set(levels["direct"]["ends"]), levels["direct"]  # (2 s streams: few)
    assert " ends " in out.stdout  # the column, shown because a stream was cut
    assert "cut_" in out.stdout
    out_dir = tmp_path / "out"
    assert "cut_" in (out_dir / "table.md").read_text()
    assert "<th>ends</th>" in (out_dir / "report.html").read_text()
