"""`tokenpath sweep` over a veth pair infers HAProxy's flush rule (one segment or ~200 ms). Its own file so the
timed lane (`--dist loadfile`) runs it beside the other matrix tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_matrix import needs_proxies
from tokenpath.links import netns
from tokenpath.serve.procs import tokenpath_argv


@needs_proxies
@pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))
def test_sweep_infers_haproxys_flush_rule_over_veth(tmp_path: Path) -> None:
    out = subprocess.run(
        tokenpath_argv(
            "sweep", "haproxy", "--link", "veth", "--sizes", "60,360,700,1000,2000", "--intervals", "25,50",
            "--runs", "2", "--frames", "12", "--out", str(tmp_path),
        ),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["kind"] == "sweep"
    assert {(p["frame_bytes"], p["interval_ms"]) for p in doc["points"]} == {
        (s, i) for s in (60, 360, 700, 1000, 2000) for i in (25.0, 50.0)
    }
    inferred = doc["inferred"]
    # 60-byte frames are released by the timer at both intervals; 360-1,000-byte ones by size.
    assert inferred["timer_ms"] is not None, inferred
    assert 120 <= inferred["timer_ms"] <= 260  # Linux's 200 ms cork timer, seen from the first token
    assert inferred["size_bytes"] is not None, inferred
    assert 1000 <= inferred["size_bytes"] <= 2100  # one 1,448-byte segment on a 1,500-byte MTU
    two_k = [p for p in doc["points"] if p["frame_bytes"] == 2000]
    # A frame larger than a segment is never held: each its own arrival, and never the cork timer's ~200 ms late.
    # Not `within_floor` (2 ms): three timed tests at a time on a loaded CI host put one 2,000-byte point's first
    # token 3.4 ms late with every frame alone (fpr 1.00).
    assert all(p["fpr_median"] == 1.0 and p["modal_burst"] == 1 for p in two_k), two_k
    assert all(p["added_ttft_ms_median"] < 100 for p in two_k), two_k
