"""bench/gateway_blocks.py: the CPU of each event-loop block of a live gateway, filed by kind. Counts only (never a
timing): every completed stream's blocks are filed where they belong, and the options reach the gateway."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parents[2] / "bench" / "gateway_blocks.py"
SRC = Path(__file__).parents[2] / "src"


def blocks(*args: str, tmp: Path | None = None) -> dict[str, object]:
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp is not None else None
    done = subprocess.run([sys.executable, str(SCRIPT), "--src", str(SRC), "--json", *args], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_each_streams_blocks_are_filed_by_kind(tmp_path: Path) -> None:
    result = blocks("--streams", "4", "--tokens", "20", "--seconds", "3", tmp=tmp_path)
    assert list(tmp_path.iterdir()) == []  # its scratch directory (the timed gateway's counts) gone with the run
    assert result["failed"] == 0
    assert result["log_level"] == "info"  # the gateway's default, as `tokenpath gateway` runs
    completed = result["completed"]
    assert isinstance(completed, int)
    assert completed >= 4
    rows = result["blocks"]
    assert isinstance(rows, dict)
    assert set(rows) >= {"request", "head", "first", "later", "end", "log"}
    assert "other" not in rows  # clear-text HTTP/1.1: every upstream read belongs to a response
    # Counted from the end of the first second, whatever each open stream was doing then: a stream open across
    # that moment has some of its blocks counted and not others, so the kinds agree within the streams open.
    streams = 4
    once = [rows[kind]["count"] for kind in ("request", "head", "first", "end")]
    assert min(once) >= 1
    assert max(once) - min(once) <= 2 * streams
    assert rows["later"]["count"] >= (rows["head"]["count"] - streams) * 10  # 20 frames each, mostly a read each
    assert rows["log"]["count"] >= 1  # the access log's batches, written on the wheel
    # The options reach the load: 20 frames a stream at most (128 if --tokens were dropped), 4 streams at once (a
    # stream takes >= 0.36 s on the stub's schedule: 50 would complete ~10 x as many), a 3 s run counted from 1 s.
    assert rows["later"]["count"] <= (rows["head"]["count"] + streams) * 20
    assert completed <= streams * 3 / 0.36 + streams
    counted_s = result["counted_s"]
    assert isinstance(counted_s, float)
    assert 1.0 < counted_s < 4.5
    for row in rows.values():
        assert 0 < row["p50_us"] <= row["p90_us"] <= row["p99_us"] <= row["max_us"]
    assert abs(sum(row["share"] for row in rows.values()) - 1) < 1e-6


def test_the_log_level_reaches_the_gateway() -> None:
    """The level is read back from the gateway process: info (its default, a line per request) unless told."""
    result = blocks("--streams", "2", "--tokens", "10", "--seconds", "2", "--log-level", "warning")
    assert result["log_level"] == "warning"
    assert result["failed"] == 0


def test_bad_options_are_refused_before_anything_starts() -> None:
    refused = (
        (["--seconds", "1"], "warm-up"),
        (["--streams", "0"], "at least 1"),
        (["--src", "/nonexistent"], "no tokenpath package"),
    )
    for args, words in refused:
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert words in done.stderr
