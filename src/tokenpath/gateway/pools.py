"""Backend pools: members with weights and health, the three picking strategies, and routing a request to a pool.
Pure logic with an injected clock and random source, so every decision is unit-testable."""

from __future__ import annotations

import fnmatch
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tokenpath.gateway.config import HealthConfig, Member, PoolConfig

EWMA_ALPHA = 0.3  # weight of the newest TTFT sample: reacts within a few streams, smooths single outliers


@dataclass
class MemberState:
    member: Member
    outstanding: int = 0  # streams in flight
    ewma_ttft_s: float | None = None
    consecutive_failures: int = 0
    ejected_until: float = 0.0
    ejections: int = 0

    @property
    def url(self) -> str:
        return self.member.url

    def healthy(self, now: float) -> bool:
        return now >= self.ejected_until

    def observe_ttft(self, seconds: float) -> None:
        prev = self.ewma_ttft_s
        self.ewma_ttft_s = seconds if prev is None else EWMA_ALPHA * seconds + (1 - EWMA_ALPHA) * prev

    def score(self) -> float:
        """p2c: expected wait ~ TTFT x (streams ahead + 1); unknown TTFT counts as 0 so new members get tried."""
        return (self.ewma_ttft_s or 0.0) * (self.outstanding + 1) / self.member.weight


@dataclass
class Pool:
    cfg: PoolConfig
    health: HealthConfig
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    members: list[MemberState] = field(init=False)
    _rr: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.members = [MemberState(m) for m in self.cfg.members]
        # smooth weighted round robin: each member appears `weight` times, interleaved
        self._ring = [i for i in _interleave([m.weight for m in self.cfg.members])]

    @property
    def name(self) -> str:
        return self.cfg.name

    def pick(self, exclude: Iterable[MemberState] = ()) -> MemberState | None:
        """A member for the next attempt, never one already tried for this request. If every untried member is
        ejected, the one whose ejection ends first is tried anyway: failing over to something beats a 502."""
        now = self.clock()
        tried = {id(m) for m in exclude}
        untried = [m for m in self.members if id(m) not in tried]
        if not untried:
            return None
        live = [m for m in untried if m.healthy(now)]
        if not live:
            return min(untried, key=lambda m: m.ejected_until)
        strategy = self.cfg.strategy
        if strategy == "least_outstanding":
            return min(live, key=lambda m: (m.outstanding / m.member.weight, self.rng.random()))
        if strategy == "p2c_ewma":
            if len(live) == 1:
                return live[0]
            a, b = self.rng.sample(live, 2)
            return a if a.score() <= b.score() else b
        return self._round_robin(live)

    def _round_robin(self, live: list[MemberState]) -> MemberState:
        ids = {id(m) for m in live}
        for _ in range(len(self._ring)):
            member = self.members[self._ring[self._rr % len(self._ring)]]
            self._rr += 1
            if id(member) in ids:
                return member
        return live[0]

    def record_success(self, member: MemberState) -> None:
        member.consecutive_failures = 0

    def record_failure(self, member: MemberState) -> bool:
        """Returns True when this failure ejected the member. A member already ejected (tried anyway because every
        member was out, or by an active check) that fails again stays out for a new cooldown, but is not ejected a
        second time: one ejection, one event."""
        now = self.clock()
        if not member.healthy(now):
            member.ejected_until = now + self.health.cooldown_s
            return False
        member.consecutive_failures += 1
        if member.consecutive_failures >= self.health.eject_after:
            member.ejected_until = now + self.health.cooldown_s
            member.consecutive_failures = 0
            member.ejections += 1
            return True
        return False


def _interleave(weights: list[int]) -> list[int]:
    """Smooth weighted round robin (as nginx does it): weights 5,1,1 give a a b a c a a, not a a a a a b c."""
    current = [0] * len(weights)
    total = sum(weights)
    order = []
    for _ in range(total):
        for i, w in enumerate(weights):
            current[i] += w
        best = max(range(len(weights)), key=lambda i: current[i])
        current[best] -= total
        order.append(best)
    return order


class Refused(LookupError):
    """No pool may serve the request's token (Router.refusal says why): answered 403, never routed."""


class Router:
    """Claims are access control, then routing: a pool that lists `claims` serves only tokens whose `pool_claim` is
    one of them (a string: a list, a bool or a number never matches), and no other token, whatever its model. Of
    the pools a token may use: the first that lists its claim value, then the first whose model patterns match, then
    the first of them (the catch-all). A token that may use none is refused (`refusal`, a 403 at admission)."""

    def __init__(self, pools: list[Pool], pool_claim: str | None) -> None:
        self.pools = pools
        self.pool_claim = pool_claim
        self._open = [p for p in pools if not p.cfg.claims]  # pools every token may use, in order
        self.guarded = len(self._open) < len(pools)  # some pool serves only its claims' tokens

    def claim_value(self, claims: dict[str, Any]) -> str | None:
        value = claims.get(self.pool_claim) if self.pool_claim is not None else None
        return value if isinstance(value, str) else None

    def allowed(self, claims: dict[str, Any]) -> list[Pool]:
        """The pools this token may be served by, in order."""
        value = self.claim_value(claims)
        if value is None:
            return self._open
        return [p for p in self.pools if not p.cfg.claims or value in p.cfg.claims]

    def refusal(self, claims: dict[str, Any]) -> str | None:
        """Why no pool may serve this token, or None. Names the claim, never its value (it may be sensitive)."""
        if self._open or self.allowed(claims):
            return None
        claim = self.pool_claim or "pool"
        return f"no pool serves this token: it carries no `{claim}` claim that a pool's `claims` lists"

    def route(self, model: str | None, claims: dict[str, Any]) -> Pool:
        if not self.guarded:  # every pool open to every token: the model's patterns, then the first (per request)
            if model is not None:
                for pool in self.pools:
                    if any(fnmatch.fnmatchcase(model, pattern) for pattern in pool.cfg.models):
                        return pool
            return self.pools[0]
        value = self.claim_value(claims)
        if value is not None:
            for pool in self.pools:
                if value in pool.cfg.claims:
                    return pool
        allowed = self.allowed(claims)
        if model is not None:
            for pool in allowed:
                if any(fnmatch.fnmatchcase(model, pattern) for pattern in pool.cfg.models):
                    return pool
        if not allowed:
            raise Refused(self.refusal(claims))
        return allowed[0]

    @property
    def needs_model(self) -> bool:
        """Whether routing depends on the model name (else the body need not be parsed)."""
        return len(self.pools) > 1 and any(p.cfg.models != ("*",) for p in self.pools)
