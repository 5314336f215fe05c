"""`tokenpath monitor --once --json` against the stub in another API format: the one-target `--url` form with
`--api anthropic` finds the first content frame, so TTFT is reported; read as OpenAI, the same stream has no content
frame and no TTFT (the control for the option). `--accept-encoding gzip` through the gzip-hold relay is decoded and
seen held (every frame in one arrival); without it the relay does not compress and the stream is seen streaming."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.serve.procs import tokenpath_argv

TTFT_MS = 30
# Frames far enough apart that a loaded host's scheduling stall (ms) does not put two in one read of the streaming
# case; held, all 8 still arrive in one.
INTERVAL_MS = 40


@pytest.fixture(scope="module")
def stub_url(module_service: Start) -> str:
    stub = module_service(
        "stub", "--port", "0", "--api", "all", "--tokens", "8", "--interval-ms", str(INTERVAL_MS),
        "--ttft-ms", str(TTFT_MS), name="stub",
    )  # fmt: skip
    assert stub.url is not None
    return stub.url


def once(url: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        tokenpath_argv("monitor", "--url", url, "--once", "--probes", "1", "--json", *args),
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    via: dict[str, Any] = doc["targets"][0]["routes"]["via"]
    return via


def test_api_anthropic_reports_a_ttft(stub_url: str) -> None:
    via = once(stub_url + "/v1/messages", "--api", "anthropic")
    assert via["failures"] == 0
    assert via["ttft_ms"]["p50"] >= 0.8 * TTFT_MS  # from the request's last byte; the stub paces from its receipt


def test_read_as_openai_the_same_route_has_no_ttft(stub_url: str) -> None:
    via = once(stub_url + "/v1/messages")
    assert via["ttft_ms"]["p50"] is None


def test_accept_encoding_through_the_gzip_hold_relay(stub_url: str, module_service: Start) -> None:
    relay = module_service("relay", "--upstream", netloc(stub_url), "--mode", "gzip-hold", name="gzip-hold")
    assert relay.url is not None
    held = once(relay.url, "--api", "bedrock", "--accept-encoding", "gzip")
    assert held["failures"] == 0
    assert held["ttft_ms"]["p50"] is not None
    assert held["fpr_median"] >= 4  # decoded at the end: the frames arrive together
    plain = once(relay.url, "--api", "bedrock")
    assert plain["fpr_median"] <= 1.5
