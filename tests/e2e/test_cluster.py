"""`tokenpath load --cluster local:N`: a Ray cluster of simulated hosts in network namespaces joined by veth links
(client workers on some, the stub on one, the targets with the driver on node 0). Its clocks are joined by the
estimate, so a stub made to run 250 ms ahead (its test-only knob) must not move the figures; a node that dies
mid-level ends the run with one line and keeps the rows measured. Needs root (namespaces) and Ray (make test
installs `.[dev,cluster]`)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from tokenpath.links import netns
from tokenpath.load.runner import STUB_OFFSET_ENV
from tokenpath.procs import tokenpath_argv

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))
TOKENS, INTERVAL_MS = 20, 14


def ray_processes() -> list[psutil.Process]:
    """Ray daemons alive (a killed one can linger as a zombie until its new parent reaps it: it is gone)."""
    return [p for p in psutil.process_iter(["name", "status"])
            if p.info["name"] in ("raylet", "gcs_server") and p.info["status"] != psutil.STATUS_ZOMBIE]  # fmt: skip


def our_namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.startswith("tp-n")]


def test_a_cluster_run_joins_clocks_across_nodes_and_sees_the_control(tmp_path: Path) -> None:
    before = len(ray_processes())
    out = subprocess.run(
        tokenpath_argv("load", "--cluster", "local:3", "--client-workers", "2", "--stub-node", "10.98.0.3",
                       "--proxy", "cork", "--concurrency", "8", "--runs", "1", "--warmup", "0.5", "--duration", "2",
                       "--tokens", str(TOKENS), "--interval-ms", str(INTERVAL_MS), "--ttft-ms", "30",
                       "--out", str(tmp_path)),
        capture_output=True, text=True, timeout=300, env={**os.environ, STUB_OFFSET_ENV: "250"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    nodes = doc["config"]["cluster_nodes"]
    assert nodes["nodes"] == ["10.98.0.1", "10.98.0.2", "10.98.0.3"]
    assert sorted(nodes["client_workers"]) == ["10.98.0.2", "10.98.0.3"]  # spread: one per client node
    assert nodes["stub_node"] == "10.98.0.3"
    rows = {r["target"]: r for r in doc["levels"]}
    for row in rows.values():
        assert row["errors"] == 0, row["error_samples"]
        assert row["streams"] > 0
        for clock in row["clock"]["runs"][0]:  # each client worker found the stub's clock 250 ms ahead
            assert abs(clock["offset_ms"] - 250) <= clock["uncertainty_ms"] + 0.05, clock
            assert clock["uncertainty_ms"] < 5
    assert rows["direct"]["added_ttft_ms"]["p50"] < 5  # not 250: the offset is taken out
    assert 50 <= rows["cork"]["added_ttft_ms"]["p50"] <= 250  # held to ~1,448 bytes or 200 ms
    assert our_namespaces() == []
    assert len(ray_processes()) <= before  # every raylet and GCS the run started is gone


def test_a_node_that_dies_mid_level_ends_the_run_with_one_line_and_keeps_the_rows(tmp_path: Path) -> None:
    argv = tokenpath_argv("load", "--cluster", "local:2", "--proxy", "pass", "--concurrency", "6,12", "--runs", "2",
                          "--warmup", "0.3", "--duration", "3", "--tokens", str(TOKENS),
                          "--out", str(tmp_path))  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        deadline = time.monotonic() + 120
        while not any("client workers on" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(5)  # the first rows are measured by now (each run is ~4 s)
        (client_node,) = [n for n in our_namespaces() if n.startswith("tp-n1-")]
        pids = subprocess.run(["ip", "netns", "pids", client_node], capture_output=True, text=True).stdout.split()
        for pid in pids:
            os.kill(int(pid), 9)
        rc = proc.wait(120)
        stderr = proc.stderr.read() if proc.stderr else ""
    assert rc == 22, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("tokenpath load: error:")]
    assert len(errors) == 1
    assert "a client worker died" in errors[0]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["interrupted"] is True
    assert doc["levels"]  # the rows measured before the node died
    assert our_namespaces() == []
