"""The stub's flags are held to the rules a request's own pacing is (stub/config.py Pacing.override): a NaN or
infinite delay, a stream longer or larger than one response may be, an empty host or a worker count past any host's
cores was taken at start, then every request hung, failed, or the stub bound every interface (a hostile CLI review,
2026-12-07)."""

from __future__ import annotations

from typing import Any

import pytest

from tokenpath.errors import UsageError
from tokenpath.stub.config import MAX_FRAME_BYTES, MAX_TOKENS, MAX_WORKERS, Jitter, Pacing, StubConfig


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"ttft_ms": float("nan")}, "`ttft_ms` must be a finite number of ms >= 0"),
        ({"ttft_ms": float("inf")}, "`ttft_ms` must be a finite number of ms >= 0"),
        ({"interval_ms": float("nan")}, "`interval_ms` must be a finite number of ms >= 0"),
        ({"interval_ms": -1.0}, "`interval_ms` must be a finite number of ms >= 0"),
        ({"interval_ms": 1e12}, "the stream would run"),
        ({"tokens": MAX_TOKENS + 1}, f"`tokens` must be a whole number from 1 to {MAX_TOKENS}"),
        ({"frame_bytes": MAX_FRAME_BYTES + 1}, f"`frame_bytes` must be a whole number from 1 to {MAX_FRAME_BYTES}"),
        ({"host": ""}, "`host` is empty"),
        ({"workers": MAX_WORKERS + 1}, f"`workers` must be from 1 to {MAX_WORKERS}"),
        ({"workers": 0}, f"`workers` must be from 1 to {MAX_WORKERS}"),
    ],
)
def test_a_flag_no_request_could_be_served_with_is_refused_at_start(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StubConfig(**flags)


def test_the_largest_of_each_is_taken() -> None:
    StubConfig(tokens=MAX_TOKENS, interval_ms=0, workers=MAX_WORKERS, host="0.0.0.0")
    StubConfig(frame_bytes=MAX_FRAME_BYTES, tokens=400)


@pytest.mark.parametrize("width", ["nan", "inf", "-1"])
def test_a_jitter_of_no_finite_width_is_refused(width: str) -> None:
    with pytest.raises(UsageError, match="the width must be a finite number of ms >= 0"):
        Jitter.parse(f"uniform:{width}")


def test_a_heartbeat_longer_than_any_stream_is_refused() -> None:
    """1e300 was taken: a keep-alive that never falls due in a stream of at most an hour."""
    with pytest.raises(UsageError, match=r"heartbeat_ms` must be a number of ms > 0 and <= 3\.6e"):
        Pacing(heartbeat_ms=1e300).check()
    Pacing(heartbeat_ms=3_600_000.0).check()
