"""The instrument's certificate, on real processes: it must see every control for what it is.

40 frames of 60 B every 50 ms (the second article's condition), probed by the CLI as a user would.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.procs import ServiceProcess, tokenpath_argv

FRAMES, INTERVAL_MS, TTFT_MS = 40, 50, 20
STREAM_MS = TTFT_MS + (FRAMES - 1) * INTERVAL_MS


@pytest.fixture(scope="module")
def paths(module_service: Start) -> dict[str, str]:
    stub = module_service(
        "stub", "--port", "0", "--format", "plain", "--tokens", str(FRAMES), "--interval-ms", str(INTERVAL_MS),
        "--ttft-ms", str(TTFT_MS), "--frame-bytes", "60", name="stub",
    )  # fmt: skip
    urls = {"direct": stub.url}
    for mode in ("pass", "buffer", "cork"):
        relay: ServiceProcess = module_service(
            "relay", "--upstream", netloc(stub.url), "--mode", mode, "--cork-ms", "200", name=mode
        )
        urls[mode] = relay.url
    return {k: v for k, v in urls.items() if v is not None}


def probe_json(url: str, runs: int = 2) -> dict[str, Any]:
    out = subprocess.run(
        tokenpath_argv("probe", url, "--runs", str(runs), "--json"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def test_direct_streams_at_the_floor(paths: dict[str, str]) -> None:
    doc = probe_json(paths["direct"])
    assert doc["schema_version"] == 1
    for run in doc["runs"]:
        assert run["status"] == 200
        assert run["frames"] == FRAMES
        assert run["frames_per_read"] <= 1.05
        assert set(run["gaps_ms"]) == {"p50", "p90", "max"}
    assert doc["summary"]["frames_per_read"] <= 1.05


def test_pass_relay_streams_at_the_floor(paths: dict[str, str]) -> None:
    assert probe_json(paths["pass"])["summary"]["frames_per_read"] <= 1.05


def test_buffer_relay_is_one_arrival_after_the_whole_stream(paths: dict[str, str]) -> None:
    doc = probe_json(paths["buffer"])
    for run in doc["runs"]:
        assert run["frames_per_read"] == FRAMES
        assert run["arrivals"] == 1
        assert run["bursts"] == {str(FRAMES): 1}
        assert run["ttft_ms"] >= STREAM_MS


def test_cork_relay_is_seen_as_bursts_late(paths: dict[str, str]) -> None:
    doc = probe_json(paths["cork"])
    for run in doc["runs"]:
        assert run["frames"] == FRAMES
        assert run["frames_per_read"] >= 3
        assert run["ttft_ms"] >= 150
