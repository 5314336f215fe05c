"""`probe --api FORMAT` against the stub, one real process serving every format by route: the probe's first content
frame is the very frame the stub's audit says it wrote first content in, for every format, and arrives after it."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.conftest import Start
from tests.helpers import HTTP_APIS
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.serve.procs import tokenpath_argv
from tokenpath.stub.control import fetch_audit
from tokenpath.wire.apis import Api

pytestmark = pytest.mark.e2e

TOKENS, TTFT_MS, INTERVAL_MS = 6, 40, 5
# TTFT is from the request's last byte as the probe stamped it and the stub paces from its receipt, so a probe
# preempted between the two reads short (19 ms of 40 once, in a six-wide test run): the checks that TTFT is the first
# content's arrival and not the head's are made against the stub's own write times (never before that write), which
# a stall can only make later.


@pytest.fixture(scope="module")
def stub_url(module_service: Start) -> str:
    stub = module_service(
        "stub", "--port", "0", "--tokens", str(TOKENS), "--ttft-ms", str(TTFT_MS), "--interval-ms", str(INTERVAL_MS)
    )
    url: str | None = stub.url
    assert url is not None
    return url


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_the_probe_s_first_content_frame_is_the_stub_s_first_content_write(stub_url: str, api: Api) -> None:
    sid = f"probe-{api.value}"
    trace = probe_stream(ProbeConfig(url=stub_url, api=api, total_timeout_s=10), stream_id=sid)
    metrics = run_metrics(trace)
    assert metrics.status == 200
    log = fetch_audit(stub_url, [sid]).by_id()[sid].log
    assert log is not None
    assert trace.frame_count == len(log.writes)  # the format's own frames, one per write
    assert trace.first_content == log.first_content  # the same frame on both sides of the wire
    assert trace.first_token == trace.first_content  # the stub sends no reasoning
    first = log.first_content_write
    assert first is not None
    assert trace.t_first_content_ns is not None
    assert trace.t_first_content_ns >= first.actual_ns  # one host, one CLOCK_MONOTONIC: never before its write
    assert metrics.ttft_ms is not None
    assert metrics.ttft_note == ""


def test_the_cli_takes_api_and_a_base_url(stub_url: str) -> None:
    out = subprocess.run(
        tokenpath_argv("probe", stub_url, "--api", "bedrock", "--json", "--stub-url", stub_url),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["api"] == "bedrock"
    [run] = doc["runs"]
    assert run["frames"] == TOKENS + 4  # messageStart, a delta per token, contentBlockStop, messageStop, metadata
    assert run["added_ttft_ms"] >= 0  # after the stub's first content write (the head's frame would read ~-40 ms)
    assert run["first_token_ms"] == run["ttft_ms"]
