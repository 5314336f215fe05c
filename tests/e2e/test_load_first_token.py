"""`tokenpath load` with what real servers send before the first token: the stub it starts sends keep-alives,
reasoning deltas, a padded first event and holds its head; every stream still checks byte for byte (keep-alives
skipped), joins to the first content write, and reports an added first-token figure. ~6 s here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tokenpath.serve.procs import tokenpath_argv

pytestmark = pytest.mark.e2e


def test_load_with_every_option_before_the_first_token(tmp_path: Path) -> None:
    out = subprocess.run(
        tokenpath_argv(
            "load", "--proxy", "pass", "--concurrency", "4", "--warmup", "0.2", "--duration", "0.6", "--runs", "1",
            "--tokens", "10", "--interval-ms", "10", "--ttft-ms", "20", "--heartbeat-ms", "15",
            "--reasoning-tokens", "3", "--first-event-bytes", "2048", "--head-at", "first-token",
            "--client-workers", "1", "--out", str(tmp_path),
        ),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    config = doc["config"]
    assert (config["heartbeat_ms"], config["reasoning_tokens"], config["first_event_bytes"], config["head_at"]) == (
        15.0, 3, 2048, "first-token",
    )  # fmt: skip
    for row in doc["levels"]:
        where = (row["target"], row["warnings"], row["error_samples"])
        assert row["streams"] > 0, where
        assert row["errors"] == 0, where
        assert row["unjoined"] == 0, where
        assert (row["frames_lost"], row["frames_out_of_order"]) == (0, 0), where
        assert row["reserialized_streams"] == 0, where  # byte for byte, keep-alives skipped
        assert row["added_ttft_ms"]["p50"] is not None, where
        first = row["added_first_token_ms"]
        assert first is not None, where
        assert first["p50"] < 10, where  # direct and pass: the first reasoning delta is not held
        assert row["added_ttft_ms"]["p50"] < 10, where  # joined to the first content write, not a keep-alive
