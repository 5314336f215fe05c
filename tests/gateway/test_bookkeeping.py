"""The members' books (gateway/bookkeeping.py): the machine's pool actions applied, and what the operator sees."""

from __future__ import annotations

import json
import logging
import random

import pytest
from prometheus_client import CollectorRegistry

from tests.gateway.test_pools import FakeClock
from tokenpath.gateway.bookkeeping import book
from tokenpath.gateway.config import HealthConfig, Member, PoolConfig
from tokenpath.gateway.exchange_state import Outstanding, RecordFailure, RecordSuccess
from tokenpath.gateway.failures import Failure, FailureKind
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.pools import Pool


def test_a_failure_is_counted_by_kind_before_the_head_and_an_ejection_is_logged_and_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    cfg = PoolConfig("p", (Member("http://127.0.0.1:9000"),))
    pool = Pool(cfg, HealthConfig(eject_after=2, cooldown_s=10), clock=FakeClock(), rng=random.Random(1))
    (member,) = pool.members

    def errors(reason: str) -> float:
        return registry.get_sample_value("tokenpath_gateway_errors_total", {"reason": reason}) or 0.0

    def healthy() -> float | None:
        return registry.get_sample_value("tokenpath_gateway_member_healthy", {"pool": "p", "member": member.url})

    book(pool, Outstanding(member, +1), metrics, before_head=True)
    assert member.outstanding == 1
    book(pool, RecordFailure(member, Failure(FailureKind.CONNECT, "refused"), True), metrics, before_head=True)
    book(pool, RecordFailure(member, Failure(FailureKind.UPSTREAM_5XX, "503"), True), metrics, before_head=True)
    assert (errors("connect"), errors("upstream_5xx")) == (1, 0)  # a 5xx is counted by its status, at the head
    assert healthy() == 0  # the second failure ejected it
    (line,) = [json.loads(r.getMessage()) for r in caplog.records if r.levelno == logging.WARNING]
    ejected = {"event": "member_ejected", "pool": "p", "member": member.url, "reason": "upstream_5xx", "cooldown_s": 10}
    assert line == ejected
    book(pool, RecordFailure(member, Failure(FailureKind.UPSTREAM_CLOSED, "reset"), True), metrics, before_head=False)
    assert errors("upstream_closed") == 0  # after the head the request's outcome is what is counted
    book(pool, RecordFailure(member, Failure(FailureKind.REFUSED_STREAM, "GOAWAY"), False), metrics, before_head=True)
    assert errors("refused_stream") == 1
    book(pool, RecordSuccess(member), metrics, before_head=True)
    assert member.consecutive_failures == 0
    book(pool, Outstanding(member, -1), metrics, before_head=False)
    assert member.outstanding == 0
