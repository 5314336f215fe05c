"""The exchange's decisions, without a network: every row of exchange_state's table, with a fake clock, real pools
and members. After every scenario no member is left with a stream counted as outstanding."""

from __future__ import annotations

import random

import pytest

from tests.gateway.test_pools import FakeClock
from tokenpath.gateway.config import HealthConfig, Limits, Member, PoolConfig
from tokenpath.gateway.exchange_state import (
    Abort,
    Action,
    Arm,
    Commit,
    Complete,
    Connect,
    End,
    ExchangeMachine,
    Phase,
    Record,
    Reply,
    Timer,
)
from tokenpath.gateway.failures import Failure, FailureKind
from tokenpath.gateway.pools import MemberState, Pool

LIMITS = Limits(connect_timeout_s=5, first_byte_timeout_s=60, idle_timeout_s=10, total_timeout_s=900)


def make(members: int = 2, eject_after: int = 3) -> tuple[ExchangeMachine, Pool, FakeClock]:
    clock = FakeClock()
    cfg = PoolConfig("p", tuple(Member(f"http://127.0.0.1:{9000 + i}") for i in range(members)))
    pool = Pool(cfg, HealthConfig(eject_after=eject_after, cooldown_s=10), clock=clock, rng=random.Random(1))
    return ExchangeMachine(pool, LIMITS, clock), pool, clock


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def connect_target(actions: list[Action]) -> MemberState:
    (connect,) = [a for a in actions if isinstance(a, Connect)]
    return connect.member


def no_outstanding(pool: Pool) -> bool:
    return all(m.outstanding == 0 for m in pool.members)


def refused(kind: FailureKind = FailureKind.CONNECT) -> Failure:
    return Failure(kind, "detail for the log")


def stream_to_head(machine: ExchangeMachine) -> MemberState:
    first = connect_target(machine.start())
    machine.connected()
    return first


def test_start_arms_the_total_timer_and_connects() -> None:
    machine, _, clock = make()
    actions = machine.start()
    assert actions[0] == Arm(Timer.TOTAL, clock.now + 900)
    assert connect_target(actions).outstanding == 1
    assert machine.phase == Phase.CONNECTING
    assert machine.connected() == [Arm(Timer.FIRST_BYTE, clock.now + 60)]
    assert machine.phase.value == "waiting"  # (mypy narrows machine.phase after the first check)


def test_a_connect_failure_fails_over_to_the_next_member() -> None:
    machine, _, _ = make()
    first = connect_target(machine.start())
    actions = machine.attempt_failed(refused())
    assert kinds(actions) == ["Record", "Connect"]
    assert connect_target(actions) is not first
    assert first.outstanding == 0
    assert first.consecutive_failures == 1


def test_every_member_failing_is_a_502_and_timeouts_only_a_504() -> None:
    machine, pool, _ = make()
    machine.start()
    machine.attempt_failed(refused())
    actions = machine.attempt_failed(refused(FailureKind.TLS))
    assert isinstance(actions[-1], Reply)
    assert actions[-1].status == 502
    assert "127.0.0.1" not in actions[-1].message  # member addresses are for the log
    assert machine.phase is Phase.DONE
    assert machine.outcome == "all_members_failed"
    assert no_outstanding(pool)

    machine, pool, _ = make()
    machine.start()
    machine.attempt_failed(refused(FailureKind.CONNECT_TIMEOUT))
    machine.connected()  # (a late connect for the second member)
    actions = machine.timer(Timer.FIRST_BYTE)
    assert kinds(actions) == ["Abort", "Record", "Reply"]
    assert isinstance(actions[-1], Reply)
    assert actions[-1].status == 504
    assert no_outstanding(pool)


def test_a_stale_keep_alive_is_retried_once_on_the_same_member() -> None:
    machine, _, _ = make()
    first = stream_to_head(machine)
    closed = refused(FailureKind.UPSTREAM_CLOSED)
    actions = machine.upstream_lost(closed, stale=True)
    assert kinds(actions) == ["Abort", "Record", "Connect"]
    assert actions[-1] == Connect(first, fresh=True)  # not another idle keep-alive: those may be stale too
    assert first.consecutive_failures == 0  # not held against it
    machine.connected()
    actions = machine.upstream_lost(closed, stale=True)  # twice is not staleness
    assert connect_target(actions) is not first
    assert first.consecutive_failures == 1
    assert machine.attempts == 3


def test_an_http2_refusal_goes_to_another_member_and_to_a_lone_one_on_a_new_connection() -> None:
    machine, _, _ = make()
    first = stream_to_head(machine)
    actions = machine.upstream_lost(refused(FailureKind.REFUSED_STREAM))
    assert connect_target(actions) is not first
    assert first.consecutive_failures == 0
    machine, _, _ = make(members=1)
    first = stream_to_head(machine)
    actions = machine.upstream_lost(refused(FailureKind.REFUSED_STREAM))
    assert connect_target(actions) is first
    assert Connect(first, fresh=True) in actions
    assert first.consecutive_failures == 0


def test_running_out_of_descriptors_is_a_503_and_nobody_is_blamed() -> None:
    machine, pool, _ = make(eject_after=1)
    first = connect_target(machine.start())
    actions = machine.attempt_failed(refused(FailureKind.LOCAL_RESOURCES))
    assert actions == [Reply(503, "gateway out of local resources; retry shortly", "overloaded")]
    assert first.consecutive_failures == 0
    assert first.ejected_until == 0
    assert no_outstanding(pool)


def test_a_5xx_head_fails_over_and_a_good_head_commits() -> None:
    machine, pool, clock = make()
    first = stream_to_head(machine)
    actions = machine.head(503)
    assert kinds(actions) == ["Abort", "Record", "Connect"]
    second = connect_target(actions)
    machine.connected()
    actions = machine.head(200)
    assert actions == [Record(second, None), Commit(), Arm(Timer.IDLE, clock.now + 10)]
    assert machine.phase is Phase.STREAMING
    assert machine.head(200) == []  # one head per attempt
    assert first.outstanding == 0
    assert second.outstanding == 1
    assert machine.upstream_ended() == [Complete()]
    assert no_outstanding(pool)


def test_ejection_is_reported_with_the_record() -> None:
    machine, pool, _ = make(eject_after=1)
    first = connect_target(machine.start())
    (record,) = [a for a in machine.attempt_failed(refused()) if isinstance(a, Record)]
    assert record.member is first
    assert record.ejected
    assert not first.healthy(pool.clock())


def test_after_the_head_a_lost_upstream_ends_the_stream_and_counts_against_the_member() -> None:
    machine, pool, _ = make()
    first = stream_to_head(machine)
    machine.head(200)
    actions = machine.upstream_lost(Failure(FailureKind.UPSTREAM_CLOSED, "reset by peer"))
    assert kinds(actions) == ["Record", "End"]
    end = actions[-1]
    assert isinstance(end, End)
    assert end.code == "upstream_disconnected"
    assert end.detail == "reset by peer"
    assert first.consecutive_failures == 1
    assert no_outstanding(pool)
    assert machine.upstream_ended() == []  # nothing after the end


def test_a_stream_whose_framing_breaks_ends_with_the_error_and_counts_against_the_member() -> None:
    machine, pool, _ = make(eject_after=1)
    assert machine.malformed_frame("bad prelude") == []  # before the head there is no stream to end
    first = stream_to_head(machine)
    machine.head(200)
    actions = machine.malformed_frame("an event-stream message's prelude CRC does not match its bytes")
    assert kinds(actions) == ["Record", "Abort", "End"]
    record, end = actions[0], actions[-1]
    assert isinstance(record, Record)
    assert isinstance(end, End)
    assert record.failure is not None
    assert record.failure.kind is FailureKind.MALFORMED
    assert record.ejected  # a member whose stream breaks its framing is as broken as one with a malformed head
    assert (end.code, end.client_reads, machine.outcome) == ("upstream_malformed", True, "upstream_malformed")
    assert end.detail is not None
    assert "prelude CRC" in end.detail
    assert machine.phase is Phase.DONE
    assert no_outstanding(pool)
    assert first not in pool.members or not first.healthy(pool.clock())
    assert machine.upstream_ended() == []


def test_an_sse_event_too_large_to_hold_ends_the_stream_without_ejecting_the_member() -> None:
    machine, pool, _ = make()
    assert machine.event_too_large(8 << 20, 9 << 20) == []  # before the head there is no stream to end
    first = stream_to_head(machine)
    machine.head(200)
    actions = machine.event_too_large(8 << 20, (8 << 20) + 1)
    assert kinds(actions) == ["Abort", "End"]
    end = actions[-1]
    assert isinstance(end, End)
    assert (end.code, end.client_reads, machine.outcome) == ("event_too_large", True, "event_too_large")
    assert str(8 << 20) in end.message
    assert machine.phase is Phase.DONE
    assert first.consecutive_failures == 0
    assert no_outstanding(pool)
    assert machine.upstream_ended() == []


@pytest.mark.parametrize("phase", ["connecting", "waiting", "streaming"])
def test_a_bug_of_ours_fails_the_request_as_internal_and_blames_no_member(phase: str) -> None:
    machine, pool, _ = make(eject_after=1)
    first = connect_target(machine.start())
    if phase != "connecting":
        machine.connected()
    if phase == "streaming":
        machine.head(200)
    bug = Failure(FailureKind.INTERNAL, "RuntimeError('planted')")
    actions = machine.attempt_failed(bug) if phase == "connecting" else machine.upstream_lost(bug)
    if phase == "streaming":
        assert actions == [Abort(), End("internal gateway error", "internal")]
    else:
        assert actions == [Abort(), Reply(500, "internal gateway error", "internal_error")]  # no failover
    assert (machine.phase, machine.outcome) == (Phase.DONE, "internal")
    assert first.consecutive_failures == 0
    assert first.healthy(pool.clock())
    assert no_outstanding(pool)
    assert machine.internal_error() == []


@pytest.mark.parametrize("paused", [False, True])
def test_silence_is_the_upstreams_unless_the_client_stopped_reading(paused: bool) -> None:
    machine, pool, clock = make()
    first = stream_to_head(machine)
    machine.head(200)
    clock.now += 4
    machine.read()
    if paused:
        machine.client_paused()
    clock.now += 6  # the idle timer armed at the head fires: 6 s since the last read, not idle yet
    assert machine.timer(Timer.IDLE) == [Arm(Timer.IDLE, clock.now + 4)]
    clock.now += 4
    actions = machine.timer(Timer.IDLE)
    assert kinds(actions) == ["Abort", "End"]
    end = actions[-1]
    assert isinstance(end, End)
    if paused:
        assert (end.code, end.client_reads, machine.outcome) == ("client_stalled", False, "client_stalled")
    else:
        assert (end.code, end.client_reads, machine.outcome) == ("upstream_idle_timeout", True, "idle_timeout")
    assert first.consecutive_failures == 0  # a timeout mid-stream does not eject; a stalled client never does
    assert no_outstanding(pool)


def test_a_client_resuming_restarts_the_upstreams_idle_window() -> None:
    machine, _, clock = make()
    stream_to_head(machine)
    machine.head(200)
    machine.client_paused()
    clock.now += 9
    machine.client_resumed()
    clock.now += 1  # 10 s since the last read, but the upstream was paused by us for 9 of them
    assert kinds(machine.timer(Timer.IDLE)) == ["Arm"]


def test_the_total_timeout_while_waiting_gives_up_at_once() -> None:
    machine, pool, _ = make(members=3)
    stream_to_head(machine)
    actions = machine.timer(Timer.TOTAL)
    assert kinds(actions) == ["Abort", "Reply"]
    assert isinstance(actions[-1], Reply)
    assert actions[-1].status == 504  # no next member is tried after the total budget is spent
    assert no_outstanding(pool)


def test_the_total_timeout_mid_stream_ends_it() -> None:
    machine, pool, _ = make()
    stream_to_head(machine)
    machine.head(200)
    actions = machine.timer(Timer.TOTAL)
    assert kinds(actions) == ["Abort", "End"]
    assert no_outstanding(pool)


def test_a_client_leaving_while_connecting_drops_the_late_connection() -> None:
    machine, pool, _ = make()
    machine.start()
    assert machine.client_gone() == [Abort()]
    assert machine.phase is Phase.DONE
    assert machine.connected() == [Abort()]  # the connection that arrives afterwards is dropped
    assert machine.attempt_failed(refused()) == []
    assert no_outstanding(pool)


def test_a_client_leaving_mid_stream_aborts_without_blaming_the_member() -> None:
    machine, pool, _ = make()
    first = stream_to_head(machine)
    machine.head(200)
    assert machine.client_gone() == [Abort()]
    assert first.consecutive_failures == 0
    assert machine.outcome == "client_gone"
    assert machine.timer(Timer.IDLE) == []
    assert no_outstanding(pool)


def test_a_stale_first_byte_timer_does_not_touch_a_later_attempt() -> None:
    machine, _, _ = make()
    stream_to_head(machine)
    machine.attempt_failed(refused(FailureKind.UPSTREAM_5XX))
    assert machine.phase is Phase.CONNECTING
    assert machine.timer(Timer.FIRST_BYTE) == []  # the first attempt's timer, firing while connecting again
