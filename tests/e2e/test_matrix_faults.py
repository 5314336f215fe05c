"""`tokenpath matrix` when things go wrong (a missing proxy, one that dies mid-run, Ctrl-C) and the declared
exclusion rule applied. The assertions are about rows, errors, rules and processes, not timing, so these run in the
parallel lane with --force: a loaded host may fail the certification, which is not what they test (test_matrix.py,
run alone, asserts certified runs)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.test_matrix import row, run_matrix
from tokenpath.serve.procs import tokenpath_argv

pytestmark = pytest.mark.e2e


def test_missing_and_dying_proxies_cost_their_rows_only(tmp_path: Path) -> None:
    relay = f"{sys.executable} {Path(__file__).parent / 'dying_relay.py'} --listen {{listen}} --upstream {{upstream}}"
    doc, stdout = run_matrix(
        tmp_path,
        f"""
name = "failures"
frames = 10
runs = 4
ttft_ms = 0
[conditions]
interval_ms = [40]
[[proxy]]
name = "absent"
command = "no-such-proxy-binary --listen {{listen}} --to {{upstream}}"
[[proxy]]
name = "dies"
command = "{relay}"
""",
        "--force",  # four tests at a time here: what is asserted is the rows, whether or not the floor certified
    )
    assert "skipping absent" in stdout
    assert any(s["path"].startswith("absent") for s in doc["skipped"])
    dies = row(doc, "dies")
    assert dies["excluded"] >= 1
    assert any("proxy exited" in (r["error"] or "") for r in dies["raw"])
    assert not any(r["error"] for r in row(doc, "direct")["raw"])  # the dying proxy cost its own row only


def test_ctrl_c_writes_the_rows_so_far_and_stops_every_process(tmp_path: Path) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text(
        "name = 'long'\nframes = 20\nruns = 50\n[conditions]\ninterval_ms = [50]\n[[proxy]]\nname = 'pass'\n"
    )
    out_dir = tmp_path / "out"
    # A test run started in the background of a script inherits SIGINT ignored, and so would the matrix: Ctrl-C
    # from a terminal reaches a process whose SIGINT is at its default, so that is what the child gets here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            tokenpath_argv("matrix", str(exp), "--out", str(out_dir), "--force"), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 60
    while not (out_dir / "results.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(5)  # a few measured rounds (one stream per path, ~1 s each), audited as a round
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 2  # the stub and the relays, each in its own session
    proc.send_signal(signal.SIGINT)
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # fail this test alone: a leaked Popen would fail a later one when collected
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"the matrix did not stop within 60 s of Ctrl-C; its output:\n{output.decode(errors='replace')}")
    assert proc.returncode == 130, output
    doc = json.loads((out_dir / "results.json").read_text())
    assert doc["interrupted"] is True
    assert {r["proxy"] for r in doc["rows"]} == {"direct", "pass"}
    assert 0 < row(doc, "direct")["runs"] < 50
    still_running = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert still_running == []


def test_the_declared_exclusion_rule_is_the_one_applied(tmp_path: Path) -> None:
    """0.001 ms: every real write drifts more than that, so every run is excluded (the stub's own default rule,
    max(2 ms, 20 %), would have kept them all). Certification runs under the declared rule too, hence --force. With
    no direct run kept nothing can be judged: exit 20, after results.json and the report are written."""
    doc, stdout = run_matrix(
        tmp_path, 'name = "strict"\nframes = 4\nruns = 2\n[conditions]\ninterval_ms = [20]\n[exclusion]\n'
        "tolerance_ms = 0.001\n", "--force", exit_code=20,
    )  # fmt: skip
    direct = row(doc, "direct")
    assert direct["excluded"] == direct["runs"] == 2
    assert direct["exclusions"] == {"stub audit failed": 2}
    for run in direct["raw"]:
        assert run["audit"]["tolerance_ms"] == 0.001
        assert run["audit"]["drift_ms"]["max"] > 0.001
    assert doc["exclusion_shares"][-1] == {"condition": None, "label": "all", "excluded": 2, "runs": 2, "share": 1.0}
    drift = doc["certification"]["emitter_drift_ms"]["loopback"]
    assert drift["writes"] > 0
    assert drift["p50"] is not None
    assert "emitter drift p50" in stdout
