"""`tokenpath load` against the controls, whose effect on the first token is known exactly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tokenpath.serve.procs import tokenpath_argv

TOKENS, INTERVAL_MS = 20, 14


def test_load_joins_streams_to_the_stub_and_sees_the_controls(tmp_path: Path) -> None:
    out = subprocess.run(
        tokenpath_argv(
            "load", "--proxy", "pass", "--proxy", "buffer", "--proxy", "cork", "--concurrency", "4,12",
            "--warmup", "0.5", "--duration", "1.5", "--runs", "1", "--tokens", str(TOKENS), "--interval-ms",
            str(INTERVAL_MS), "--ttft-ms", "30", "--out", str(tmp_path),
        ),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "report.html").exists()
    assert "report: " in out.stdout
    assert doc["schema_version"] == 9  # 8: how each stream ended (issue 36); 9: attribution and pairing (issue 37)
    rows: dict[tuple[int, str], dict[str, Any]] = {(r["level"], r["target"]): r for r in doc["levels"]}
    assert set(rows) == {(c, t) for c in (4, 12) for t in ("direct", "pass", "buffer", "cork")}
    stream_ms = (TOKENS + 1) * INTERVAL_MS  # role frame first, then the tokens, finish and [DONE] frames
    for (_, target), row in rows.items():
        assert row["streams"] > 0, row
        assert row["frames_lost"] == 0
        assert row["frames_out_of_order"] == 0
        assert row["errors"] == 0, row["error_samples"]
        assert set(row["added_ttft_ms"]) == {"p50", "p99", "p999"}
        assert set(row["floor_ms"]) == {"p50", "p99"}
        assert row["loop"] == "closed"
        for key in ("level", "cpu_cores", "rss_mb", "warnings"):
            assert key in row
        added = row["added_ttft_ms"]["p50"]
        frames = row["added_frame_delay_ms"]  # each frame after the first token
        if target in ("direct", "pass"):
            assert added < 5, row  # the floor
            assert frames["p50"] < 5, row
        elif target == "buffer":
            assert added >= 0.9 * stream_ms, row  # the whole stream
            assert frames["p50"] >= 0.3 * stream_ms, row  # every later frame held until the end, by what was left
        else:
            assert 50 <= added <= 250, row  # held until ~1,448 bytes queue (~9 frames x 14 ms) or 200 ms
    assert rows[(4, "pass")]["cpu_cores"] is not None
    table = (tmp_path / "table.md").read_text()
    assert "| 12 | cork |" in table
    for row in rows.values():  # kept/total and the share, always, even at 0 %
        assert row["kept"] + row["excluded"] == row["streams_total"]
        assert f"{row['kept']}/{row['streams_total']} (" in table


def test_open_loop_counts_from_the_schedule_and_reports_dispatch_lag(tmp_path: Path) -> None:
    # A cap of 2 streams in flight against ~6 arrivals/s of ~0.3 s streams: arrivals must queue, and that wait
    # (dispatch lag) is added to the corrected figure, never dropped.
    out = subprocess.run(
        tokenpath_argv(
            "load", "--proxy", "buffer", "--rate", "6", "--max-in-flight", "2", "--warmup", "0.5", "--duration", "3",
            "--runs", "1", "--tokens", str(TOKENS), "--interval-ms", str(INTERVAL_MS), "--ttft-ms", "30",
            "--out", str(tmp_path),
        ),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["loop"] == "open"
    rows = {r["target"]: r for r in doc["levels"]}
    buffer = rows["buffer"]
    assert (buffer["level"], buffer["loop"]) == (6.0, "open")
    assert buffer["streams"] > 5
    assert buffer["dispatch_lag_ms"]["p99"] > 50  # the cap made arrivals wait
    assert buffer["added_ttft_corrected_ms"]["p99"] >= buffer["added_ttft_ms"]["p99"] + 50
    direct = rows["direct"]  # its streams last as long, so they queue as well: the lag is the client's, not a path's
    assert direct["added_ttft_ms"]["p50"] < 5
    assert direct["added_ttft_corrected_ms"]["p50"] >= direct["dispatch_lag_ms"]["p50"]


def test_external_target_needs_its_stub() -> None:
    out = subprocess.run(
        tokenpath_argv("load", "--target", "http://127.0.0.1:9"), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "--stub-url" in out.stderr
