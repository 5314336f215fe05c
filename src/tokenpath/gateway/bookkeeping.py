"""The members' books: an ExchangeMachine's pool actions (exchange_state.PoolAction) performed on its Pool, with
what the operator sees of them (errors_total by failure kind, the member_ejected log line, the member_healthy
gauge). The only place an exchange changes a member's outstanding count or health."""

from __future__ import annotations

import json
import logging

from tokenpath.gateway.exchange_state import Outstanding, PoolAction, RecordFailure, RecordSuccess
from tokenpath.gateway.failures import FailureKind
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.pools import MemberState, Pool

log = logging.getLogger("tokenpath.gateway")


def apply_to_pool(pool: Pool, action: PoolAction) -> bool:
    """Perform one of the machine's pool actions on its pool; True when it ejected the member."""
    match action:
        case Outstanding(member, delta):
            member.outstanding += delta
        case RecordSuccess(member):
            pool.record_success(member)
        case RecordFailure(member, _, blame):
            return blame and pool.record_failure(member)
    return False


def book(pool: Pool, action: PoolAction, metrics: Metrics, before_head: bool) -> None:
    """Apply the action and show it. An attempt that failed before the head counts by its kind (a 5xx by its
    status, where the head arrives); a failure after it ends the request, counted once by the outcome, not here."""
    ejected = apply_to_pool(pool, action)
    if isinstance(action, Outstanding):
        return
    failure = action.failure if isinstance(action, RecordFailure) else None
    if failure is not None and failure.kind is not FailureKind.UPSTREAM_5XX and before_head:
        metrics.errors.labels(failure.kind.value).inc()
    if ejected:
        event = {"event": "member_ejected", "pool": pool.name, "member": action.member.url}
        reason = failure.kind.value if failure else None
        log.warning(json.dumps({**event, "reason": reason, "cooldown_s": pool.health.cooldown_s}))
    health_gauge(metrics, pool, action.member)


def health_gauge(metrics: Metrics, pool: Pool, member: MemberState) -> None:
    healthy = member.healthy(pool.clock())
    metrics.child(metrics.member_healthy, pool.name, member.url).set(1 if healthy else 0)
