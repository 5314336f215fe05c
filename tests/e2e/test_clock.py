"""A real stub whose clock is made to run 250 ms ahead (its test-only knob): the clock estimate must recover the
offset within its own bound, and the audit's write times must be on that clock too."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.helpers import exchange, post
from tokenpath.clock import monotonic_ns
from tokenpath.load.clocksync import measure
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stub.control import fetch_audit

MS = 1_000_000


@pytest.fixture(scope="module")
def skewed_stub() -> Iterator[str]:
    with ServiceProcess(tokenpath_argv("stub", "--port", "0", "--clock-offset-ms", "250"), "stub") as stub:
        assert stub.url is not None
        yield stub.url


def test_a_stub_on_another_clock_is_recovered(skewed_stub: str) -> None:
    got = measure(skewed_stub, samples=40)
    assert abs(got.offset_ns - 250 * MS) <= got.uncertainty_ns, got
    assert got.uncertainty_ns < 5 * MS  # loopback: the fastest exchanges take well under 10 ms


def test_the_offset_shifts_the_audits_times_too(skewed_stub: str) -> None:
    """The join uses audit write times: they must be on the same (offset) clock as the time endpoint."""
    port = int(skewed_stub.rsplit(":", 1)[1])
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True, "user": "tp-skew",
            "max_tokens": 2, "tokenpath": {"ttft_ms": 0, "interval_ms": 1}}  # fmt: skip
    before = monotonic_ns()
    exchange(port, post("/v1/chat/completions", json.dumps(body).encode()))
    time.sleep(0.05)
    log = fetch_audit(skewed_stub, ["tp-skew"]).streams[0].log
    assert log is not None
    first_write = log.writes[0].actual_ns
    assert 240 * MS < first_write - before < 400 * MS
