"""Pools: strategies, passive health, routing. Pure logic with a fake clock and a seeded random source."""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

import pytest

from tokenpath.gateway.config import HealthConfig, Member, PoolConfig
from tokenpath.gateway.pools import Pool, Refused, Router


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pool(*weights: int, strategy: str = "round_robin", clock: FakeClock | None = None, **kw: object) -> Pool:
    members = tuple(Member(f"http://127.0.0.1:{9000 + i}", w) for i, w in enumerate(weights))
    cfg = PoolConfig("p", members, strategy, **kw)  # type: ignore[arg-type]
    return Pool(cfg, HealthConfig(eject_after=2, cooldown_s=10), clock=clock or FakeClock(), rng=random.Random(7))


def test_weighted_round_robin_is_smooth_and_proportional() -> None:
    p = pool(5, 1, 1)
    picks = [p.pick() for _ in range(14)]
    ports = [m.url[-1] for m in picks if m is not None]
    assert Counter(ports) == {"0": 10, "1": 2, "2": 2}
    assert ports[:7] != ["0"] * 5 + ["1", "2"]  # interleaved, not bunched
    assert max(len(run) for run in re.findall("0+", "".join(ports))) <= 4  # never five of the heavy one in a row


def test_least_outstanding_prefers_the_idle_member() -> None:
    p = pool(1, 1, 1, strategy="least_outstanding")
    p.members[0].outstanding = 3
    p.members[1].outstanding = 1
    p.members[2].outstanding = 2
    assert p.pick() is p.members[1]


def test_p2c_picks_the_lower_expected_wait_of_two() -> None:
    p = pool(1, 1, strategy="p2c_ewma")
    slow, fast = p.members
    for _ in range(5):
        slow.observe_ttft(0.5)
        fast.observe_ttft(0.05)
    assert all(p.pick() is fast for _ in range(20))
    fast.outstanding = 20  # busy enough that the slow one is now the shorter wait
    assert p.pick() is slow


def test_ewma_moves_towards_new_samples() -> None:
    p = pool(1)
    m = p.members[0]
    m.observe_ttft(1.0)
    m.observe_ttft(0.0)
    assert m.ewma_ttft_s is not None
    assert 0.6 < m.ewma_ttft_s < 0.8


def test_consecutive_failures_eject_for_the_cooldown_then_readmit() -> None:
    clock = FakeClock()
    p = pool(1, 1, clock=clock)
    bad, good = p.members
    assert p.record_failure(bad) is False
    p.record_success(bad)  # a success resets the count
    assert p.record_failure(bad) is False
    assert p.record_failure(bad) is True
    assert all(p.pick() is good for _ in range(6))
    clock.now += 10.5
    assert {id(p.pick()) for _ in range(4)} == {id(bad), id(good)}


def test_a_request_never_retries_a_member_it_tried_and_all_ejected_still_gets_one() -> None:
    clock = FakeClock()
    p = pool(1, 1, clock=clock)
    a, b = p.members
    assert p.pick(exclude=[a]) is b
    assert p.pick(exclude=[a, b]) is None
    for m in (a, b):
        p.record_failure(m)
        p.record_failure(m)
        clock.now += 1
    assert p.pick() is a  # every member is out: the one back soonest is tried rather than a 502


def test_router_claim_then_model_pattern_then_first_pool() -> None:
    health = HealthConfig()
    m = (Member("http://127.0.0.1:1"),)
    pools = [
        Pool(PoolConfig("default", m), health),
        Pool(PoolConfig("big", m, models=("gpt-4*", "llama-70b")), health),
        Pool(PoolConfig("paid", m, models=("nothing",), claims=("pro", "enterprise")), health),
    ]
    router = Router(pools, pool_claim="tier")
    assert router.route("gpt-4o", {}).name == "default"  # "*" of the first pool matches first
    pools[0] = Pool(PoolConfig("default", m, models=("small-*",)), health)
    router = Router(pools, pool_claim="tier")
    assert router.needs_model
    assert router.route("gpt-4o", {}).name == "big"
    assert router.route("llama-70b", {"tier": "free"}).name == "big"
    assert router.route("gpt-4o", {"tier": "pro"}).name == "paid"
    assert router.route("unknown", {}).name == "default"
    assert router.route(None, {}).name == "default"


def test_a_member_already_ejected_that_fails_again_stays_out_but_is_not_ejected_twice() -> None:
    clock = FakeClock()
    p = pool(1, 1, clock=clock)
    bad, _ = p.members
    assert [p.record_failure(bad) for _ in range(2)] == [False, True]  # ejected: one event
    clock.now += 5
    # tried anyway (every other member out, or an active check) and failing again: no second ejection event,
    # but a new cooldown from now, since it is still failing
    assert [p.record_failure(bad) for _ in range(4)] == [False] * 4
    assert bad.ejections == 1
    clock.now += 9
    assert not bad.healthy(clock())
    clock.now += 1.5
    assert bad.healthy(clock())
    assert [p.record_failure(bad) for _ in range(2)] == [False, True]  # back, and failing: a new ejection


def test_a_pool_with_claims_serves_only_tokens_that_carry_one() -> None:
    """Claims are access control: the `pro` pool (its own upstream key) matched `pro-*` models, and was the
    catch-all, for a token with no tier or tier "enterprise" too. Now such a request goes on to the next pool that
    may take it, or, when there is none, is refused (Router.refusal: a 403 at admission, naming the claim only)."""
    health = HealthConfig()
    m = (Member("http://127.0.0.1:1"),)
    pro = Pool(PoolConfig("pro", m, models=("pro-*",), claims=("pro",)), health)
    rest = Pool(PoolConfig("rest", m), health)
    router = Router([pro, rest], pool_claim="tier")
    for claims in ({}, {"tier": "enterprise"}, {"tier": ["pro"]}, {"tier": None}):
        assert router.route("pro-large", claims).name == "rest", claims
        assert router.refusal(claims) is None
    assert router.route("pro-large", {"tier": "pro"}).name == "pro"
    assert router.route("other", {"tier": "pro"}).name == "pro"  # its claim first, as before

    only_pro = Router([pro], pool_claim="tier")  # the pro pool first and catch-all: no one else's
    assert only_pro.route(None, {"tier": "pro"}).name == "pro"
    refused: list[dict[str, Any]] = [{}, {"tier": "enterprise"}, {"tier": "PRO"}, {"tier": 1}]
    for claims in refused:
        says = only_pro.refusal(claims)
        assert says is not None
        assert "`tier`" in says
        assert "enterprise" not in says
        with pytest.raises(Refused):
            only_pro.route("pro-large", claims)
        with pytest.raises(Refused):
            only_pro.route(None, claims)


def test_a_claim_value_that_is_not_a_string_never_matches() -> None:
    """str() made true match "True" and ["pro"] match "['pro']"."""
    health = HealthConfig()
    m = (Member("http://127.0.0.1:1"),)
    pools = [Pool(PoolConfig(name, m, claims=(name,)), health) for name in ("True", "1", "['pro']", "None")]
    router = Router([*pools, Pool(PoolConfig("rest", m), health)], pool_claim="tier")
    for value in (True, 1, 1.0, ["pro"], None, {"a": 1}):
        assert router.route(None, {"tier": value}).name == "rest", value
    assert Router(pools, pool_claim="tier").refusal({"tier": True}) is not None
