"""`tokenpath load` against the controls, whose effect on the first token is known exactly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tokenpath.procs import tokenpath_argv

TOKENS, INTERVAL_MS = 20, 14


def test_load_joins_streams_to_the_stub_and_sees_the_controls(tmp_path: Path) -> None:
    out = subprocess.run(
        tokenpath_argv(
            "load", "--proxy", "pass", "--proxy", "buffer", "--proxy", "cork", "--concurrency", "4,12",
            "--warmup", "0.5", "--duration", "2", "--runs", "1", "--tokens", str(TOKENS), "--interval-ms",
            str(INTERVAL_MS), "--ttft-ms", "30", "--out", str(tmp_path),
        ),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["schema_version"] == 1
    rows: dict[tuple[int, str], dict[str, Any]] = {(r["concurrency"], r["target"]): r for r in doc["levels"]}
    assert set(rows) == {(c, t) for c in (4, 12) for t in ("direct", "pass", "buffer", "cork")}
    stream_ms = (TOKENS + 1) * INTERVAL_MS  # role frame first, then the tokens, finish and [DONE] frames
    for (_, target), row in rows.items():
        assert row["streams"] > 0, row
        assert row["frames_lost"] == 0
        assert row["frames_out_of_order"] == 0
        assert row["errors"] == 0, row["error_samples"]
        assert set(row["added_ttft_ms"]) == {"p50", "p99", "p999"}
        assert set(row["floor_ms"]) == {"p50", "p99"}
        for key in ("concurrency", "cpu_cores", "rss_mb", "warnings"):
            assert key in row
        added = row["added_ttft_ms"]["p50"]
        if target in ("direct", "pass"):
            assert added < 5, row  # the floor
        elif target == "buffer":
            assert added >= 0.9 * stream_ms, row  # the whole stream
        else:
            assert 50 <= added <= 250, row  # held until ~1,448 bytes queue (~9 frames x 14 ms) or 200 ms
    assert rows[(4, "pass")]["cpu_cores"] is not None
    table = (tmp_path / "table.md").read_text()
    assert "| 12 | cork |" in table
