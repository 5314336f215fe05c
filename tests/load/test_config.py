from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest

from tokenpath.errors import UsageError
from tokenpath.load.runner import LoadConfig, spare_client_workers


def test_client_workers_default_to_what_the_machine_spares() -> None:
    assert [spare_client_workers(1, cpus) for cpus in (1, 2, 4, 8, 32)] == [1, 1, 1, 3, 15]
    assert spare_client_workers(4, 8) == 2
    cfg = LoadConfig(targets=("direct",))
    assert cfg.client_workers == spare_client_workers(1, len(os.sched_getaffinity(0)))
    assert LoadConfig(targets=("direct",), client_workers=5).client_workers == 5  # a given number is kept
    with pytest.raises(UsageError, match="`client_workers` >= 0"):
        LoadConfig(targets=("direct",), client_workers=-1)


def test_a_worker_gives_up_only_when_nearly_every_stream_fails_one_way() -> None:
    from tokenpath.load.worker import SAME_FAILURE_MIN, FailureTally, StreamResult

    tally = FailureTally()
    for i in range(SAME_FAILURE_MIN - 1):
        tally.add(StreamResult(f"s{i}", error="HTTP 401"))
    before = tally.stop_reason
    assert before is None  # too few to judge
    tally.add(StreamResult("last", error="HTTP 401"))
    assert (
        tally.stop_reason
        == f"{SAME_FAILURE_MIN} of {SAME_FAILURE_MIN} streams failed the same way (HTTP 401): level stopped early"
    )
    mixed = FailureTally()
    for i in range(100):
        mixed.add(StreamResult(f"s{i}", error="HTTP 401" if i % 2 else None))
    assert mixed.stop_reason is None  # half succeed: a measurement, not a wall of one error
    reasons = FailureTally()
    for i in range(100):
        reasons.add(StreamResult(f"s{i}", error=f"cannot connect to 127.0.0.1:{i}: refused" if i % 2 else "HTTP 503"))
    assert reasons.stop_reason is None  # two kinds of failure: no single cause to name


def test_each_stream_gets_its_own_valid_jwt() -> None:
    import jwt

    from tokenpath.load.worker import JWTMinter

    minter = JWTMinter("k" * 32, (("sub", "load"), ("tier", "gold")))
    token = minter.token()
    claims = jwt.decode(token, "k" * 32, algorithms=["HS256"])
    assert claims["sub"] == "load"
    assert claims["tier"] == "gold"
    assert claims["exp"] > claims["iat"]
    assert "k" * 32 not in repr(minter)


def test_a_websocket_only_api_over_sse_is_refused_before_anything_starts() -> None:
    from tokenpath.wire.apis import Api

    with pytest.raises(UsageError, match="WebSocket only"):
        LoadConfig(targets=("direct",), api=Api.REALTIME, transport="sse")
    assert LoadConfig(targets=("direct",), api=Api.REALTIME, transport="websocket").transport == "websocket"


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("runs", 1001, "`runs` 1001: at most 1000"),  # its plan was built whole: 24 GB before a stream ran
        ("stub_workers", 1025, "`stub_workers` 1025: at most 1024"),  # the stub refused it only once started
    ],
)
def test_runs_and_stub_workers_are_bounded_before_anything_starts(field: str, value: int, said: str) -> None:
    base = LoadConfig(targets=("direct",), levels=(1,), client_workers=1)
    over: dict[str, Any] = {field: value}
    with pytest.raises(UsageError, match=said):
        replace(base, **over)
    under: dict[str, Any] = {field: value - 1}
    assert getattr(replace(base, **under), field) == value - 1


def test_a_level_past_a_million_streams_is_refused_in_words() -> None:
    """It was refused by the open-file check, in a 21-digit number of files."""
    with pytest.raises(UsageError, match="at most 1,000,000 open streams a level"):
        LoadConfig(targets=("direct",), levels=(10**20,), client_workers=1)
    assert LoadConfig(targets=("direct",), levels=(1_000_000,), client_workers=1).levels == (1_000_000,)


def test_a_target_header_named_as_its_keys_beside_the_key_is_refused() -> None:
    with pytest.raises(UsageError, match="Authorization is given twice"):
        LoadConfig(targets=("direct",), levels=(1,), client_workers=1, target_headers=(("Authorization", "Bearer y"),),
                   target_api_key="sk-x")  # fmt: skip
    assert LoadConfig(targets=("direct",), levels=(1,), client_workers=1, target_headers=(("Authorization", "y"),))
