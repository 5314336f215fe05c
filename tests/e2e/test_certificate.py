"""The instrument's certificate, on real processes: it must see every control for what it is.

40 frames of 60 B every 50 ms (the second article's condition), probed by the CLI as a user would (the four
paths at once, each its own stream and process).
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

FRAMES, INTERVAL_MS, TTFT_MS = 40, 50, 20
STREAM_MS = TTFT_MS + (FRAMES - 1) * INTERVAL_MS


@pytest.fixture(scope="module")
def paths(module_service: Start) -> dict[str, str]:
    stub = module_service(
        "stub", "--port", "0", "--format", "plain", "--tokens", str(FRAMES), "--interval-ms", str(INTERVAL_MS),
        "--ttft-ms", str(TTFT_MS), "--frame-bytes", "60", name="stub",
    )  # fmt: skip

    def relay(mode: str) -> ServiceProcess:
        cork = ("--cork-ms", "200") if mode == "cork" else ()  # cork's own flag (another mode refuses it)
        return module_service("relay", "--upstream", netloc(stub.url), "--mode", mode, *cork, name=mode)

    with ThreadPoolExecutor(3) as pool:  # the three relays start side by side: one start-up's wait, not three
        relays = dict(zip(("pass", "buffer", "cork"), pool.map(relay, ("pass", "buffer", "cork")), strict=True))
    urls = {"direct": stub.url, **{mode: r.url for mode, r in relays.items()}}
    return {k: v for k, v in urls.items() if v is not None}


@pytest.fixture(scope="module")
def probes(paths: dict[str, str]) -> dict[str, tuple[int, str, str]]:
    """Every path probed by the CLI (two runs each) at the same time, as four users would: each stream is timed
    against its own schedule, and four 60-byte streams at 50 ms are no load for the stub or the relays. One
    stream's wait instead of four in a row."""
    started = {name: launch_probe(url) for name, url in paths.items()}
    done: dict[str, tuple[int, str, str]] = {}
    for name, proc in started.items():
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        done[name] = (proc.returncode, stdout, stderr)
    return done


def launch_probe(url: str) -> subprocess.Popen[str]:
    argv = tokenpath_argv("probe", url, "--runs", "2", "--json")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def probe_json(probes: dict[str, tuple[int, str, str]], name: str) -> dict[str, Any]:
    returncode, stdout, stderr = probes[name]
    assert returncode == 0, stderr
    doc: dict[str, Any] = json.loads(stdout)
    return doc


def test_direct_streams_at_the_floor(probes: dict[str, tuple[int, str, str]]) -> None:
    doc = probe_json(probes, "direct")
    assert doc["schema_version"] == 1
    for run in doc["runs"]:
        assert run["status"] == 200
        assert run["frames"] == FRAMES
        assert run["frames_per_read"] <= 1.05
        assert set(run["gaps_ms"]) == {"p50", "p90", "max"}
    assert doc["summary"]["frames_per_read"] <= 1.05


def test_pass_relay_streams_at_the_floor(probes: dict[str, tuple[int, str, str]]) -> None:
    assert probe_json(probes, "pass")["summary"]["frames_per_read"] <= 1.05


def test_buffer_relay_is_one_arrival_after_the_whole_stream(probes: dict[str, tuple[int, str, str]]) -> None:
    doc = probe_json(probes, "buffer")
    for run in doc["runs"]:
        assert run["frames_per_read"] == FRAMES
        assert run["arrivals"] == 1
        assert run["bursts"] == {str(FRAMES): 1}
        # Late by the whole stream, exactly: the probe's sent time is read before its write (probe/trace.py
        # SENT_RULE), the stub's schedule starts when it has the request, and its writes are late, never early. (A
        # time read after the write measured 1963.7 ms against 1970 in a loaded CI run.)
        assert run["ttft_ms"] >= STREAM_MS


def test_cork_relay_is_seen_as_bursts_late(probes: dict[str, tuple[int, str, str]]) -> None:
    doc = probe_json(probes, "cork")
    for run in doc["runs"]:
        assert run["frames"] == FRAMES
        assert run["frames_per_read"] >= 3
        assert run["ttft_ms"] >= 150
