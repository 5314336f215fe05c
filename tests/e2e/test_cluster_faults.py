"""A node of a `--cluster local:2` run killed mid-level: one line, exit 22, the rows measured kept, nothing left
behind. Not timed (it runs in Makefile's parallel lane)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.test_cluster import TOKENS, our_namespaces
from tokenpath.links import netns
from tokenpath.serve.procs import tokenpath_argv

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))


@pytest.mark.usefixtures("ray_cluster_alone")
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
