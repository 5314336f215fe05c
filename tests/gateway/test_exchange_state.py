"""The exchange's decisions, without a network: every row of exchange_state's table, with a fake clock, real pools
and members. The machine changes no pool: `step` applies its pool actions as the shell does (bookkeeping.apply_to_pool)
and hands back the rest. After every scenario no member is left with a stream counted as outstanding."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.gateway.test_pools import FakeClock
from tokenpath.gateway import exchange_state
from tokenpath.gateway.bookkeeping import apply_to_pool
from tokenpath.gateway.config import HealthConfig, Limits, Member, PoolConfig
from tokenpath.gateway.exchange_state import (
    Abort,
    Action,
    Arm,
    Commit,
    Complete,
    Connect,
    End,
    Event,
    ExchangeMachine,
    InvalidTransition,
    Outstanding,
    Phase,
    RecordFailure,
    RecordSuccess,
    Reply,
    Timer,
)
from tokenpath.gateway.failures import Failure, FailureKind, Outcome
from tokenpath.gateway.pools import MemberState, Pool
from tokenpath.gateway.streamformat import FAULTS

LIMITS = Limits(
    connect_timeout_s=5, first_byte_timeout_s=60, idle_timeout_s=10, total_timeout_s=900, keepalive_interval_s=5
)


def make(members: int = 2, eject_after: int = 3) -> tuple[ExchangeMachine, Pool, FakeClock]:
    clock = FakeClock()
    cfg = PoolConfig("p", tuple(Member(f"http://127.0.0.1:{9000 + i}") for i in range(members)))
    pool = Pool(cfg, HealthConfig(eject_after=eject_after, cooldown_s=10), clock=clock, rng=random.Random(1))
    return ExchangeMachine(pool, LIMITS, clock), pool, clock


def step(pool: Pool, actions: list[Action], ejected: list[MemberState] | None = None) -> list[Action]:
    """The pool actions applied to the pool, as the shell applies them (the members they eject added to `ejected`);
    the actions handed back without Outstanding, whose effect is what the tests read, on the members."""
    for action in actions:
        if isinstance(action, Outstanding | RecordSuccess | RecordFailure) and apply_to_pool(pool, action):
            assert ejected is not None, f"{action} ejected a member the test did not expect to"
            ejected.append(action.member)
    return [a for a in actions if not isinstance(a, Outstanding)]


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def connect_target(actions: list[Action]) -> MemberState:
    (connect,) = [a for a in actions if isinstance(a, Connect)]
    return connect.member


def no_outstanding(pool: Pool) -> bool:
    return all(m.outstanding == 0 for m in pool.members)


def refused(kind: FailureKind = FailureKind.CONNECT) -> Failure:
    return Failure(kind, "detail for the log")


def stream_to_head(machine: ExchangeMachine, pool: Pool) -> MemberState:
    first = connect_target(step(pool, machine.start()))
    machine.connected()
    return first


def test_start_arms_the_total_timer_and_connects() -> None:
    machine, pool, clock = make()
    actions = step(pool, machine.start())
    assert actions[0] == Arm(Timer.TOTAL, clock.now + 900)
    assert connect_target(actions).outstanding == 1
    assert machine.phase == Phase.CONNECTING
    assert machine.connected() == [Arm(Timer.FIRST_BYTE, clock.now + 60)]
    assert machine.phase.value == "waiting"  # (mypy narrows machine.phase after the first check)


def test_a_connect_failure_fails_over_to_the_next_member() -> None:
    machine, pool, _ = make()
    first = connect_target(step(pool, machine.start()))
    actions = step(pool, machine.attempt_failed(refused()))
    assert kinds(actions) == ["RecordFailure", "Connect"]
    assert connect_target(actions) is not first
    assert first.outstanding == 0
    assert first.consecutive_failures == 1


def test_every_member_failing_is_a_502_and_timeouts_only_a_504() -> None:
    machine, pool, _ = make()
    step(pool, machine.start())
    step(pool, machine.attempt_failed(refused()))
    actions = step(pool, machine.attempt_failed(refused(FailureKind.TLS)))
    assert isinstance(actions[-1], Reply)
    assert actions[-1].status == 502
    assert actions[-1].code == "upstream_unavailable"
    assert "127.0.0.1" not in actions[-1].message  # member addresses are for the log
    assert machine.phase is Phase.DONE
    assert machine.outcome == "all_members_failed"
    assert no_outstanding(pool)

    machine, pool, _ = make()
    step(pool, machine.start())
    step(pool, machine.attempt_failed(refused(FailureKind.CONNECT_TIMEOUT)))
    machine.connected()  # (a late connect for the second member)
    actions = step(pool, machine.timer(Timer.FIRST_BYTE))
    assert kinds(actions) == ["Abort", "RecordFailure", "Reply"]
    assert isinstance(actions[-1], Reply)
    assert actions[-1].status == 504
    assert actions[-1].code == "upstream_unavailable"
    assert no_outstanding(pool)


def test_a_stale_keep_alive_is_retried_once_on_the_same_member() -> None:
    machine, pool, _ = make()
    first = stream_to_head(machine, pool)
    closed = refused(FailureKind.UPSTREAM_CLOSED)
    actions = step(pool, machine.upstream_lost(closed, stale=True))
    assert kinds(actions) == ["Abort", "RecordFailure", "Connect"]
    assert actions[-1] == Connect(first, fresh=True)  # not another idle keep-alive: those may be stale too
    assert first.consecutive_failures == 0  # not held against it
    assert first.outstanding == 1  # still this exchange's
    machine.connected()
    actions = step(pool, machine.upstream_lost(closed, stale=True))  # twice is not staleness
    assert connect_target(actions) is not first
    assert first.consecutive_failures == 1
    assert machine.attempts == 3


def test_an_http2_refusal_goes_to_another_member_and_to_a_lone_one_on_a_new_connection() -> None:
    machine, pool, _ = make()
    first = stream_to_head(machine, pool)
    actions = step(pool, machine.upstream_lost(refused(FailureKind.REFUSED_STREAM)))
    assert connect_target(actions) is not first
    assert first.consecutive_failures == 0
    machine, pool, _ = make(members=1)
    first = stream_to_head(machine, pool)
    actions = step(pool, machine.upstream_lost(refused(FailureKind.REFUSED_STREAM)))
    assert connect_target(actions) is first
    assert Connect(first, fresh=True) in actions
    assert first.consecutive_failures == 0


def test_running_out_of_descriptors_is_a_503_and_nobody_is_blamed() -> None:
    machine, pool, _ = make(eject_after=1)
    first = connect_target(step(pool, machine.start()))
    actions = step(pool, machine.attempt_failed(refused(FailureKind.LOCAL_RESOURCES)))
    assert actions == [Reply(503, "gateway out of local resources; retry shortly", Outcome.LOCAL_RESOURCES)]
    assert isinstance(actions[0], Reply)
    assert (actions[0].code, machine.outcome) == ("overloaded", "local_resources")
    assert first.consecutive_failures == 0
    assert first.ejected_until == 0
    assert no_outstanding(pool)


def test_a_5xx_head_fails_over_and_a_good_head_commits() -> None:
    machine, pool, clock = make()
    first = stream_to_head(machine, pool)
    actions = step(pool, machine.head(503))
    assert kinds(actions) == ["Abort", "RecordFailure", "Connect"]
    second = connect_target(actions)
    machine.connected()
    actions = step(pool, machine.head(200))
    assert actions == [
        RecordSuccess(second),
        Commit(),
        Arm(Timer.IDLE, clock.now + 10),
        Arm(Timer.KEEPALIVE, clock.now + 5),
    ]
    assert machine.phase is Phase.STREAMING
    assert machine.head(200) == []  # one head per attempt
    assert first.outstanding == 0
    assert second.outstanding == 1
    assert step(pool, machine.upstream_ended()) == [Complete()]
    assert no_outstanding(pool)


def test_ejection_is_reported_with_the_record() -> None:
    machine, pool, _ = make(eject_after=1)
    first = connect_target(step(pool, machine.start()))
    ejected: list[MemberState] = []
    (record,) = [a for a in step(pool, machine.attempt_failed(refused()), ejected) if isinstance(a, RecordFailure)]
    assert record.member is first
    assert record.blame
    assert ejected == [first]  # the shell logs the ejection and sets the member's gauge
    assert not first.healthy(pool.clock())


def test_after_the_head_a_lost_upstream_ends_the_stream_and_counts_against_the_member() -> None:
    machine, pool, _ = make()
    first = stream_to_head(machine, pool)
    step(pool, machine.head(200))
    actions = step(pool, machine.upstream_lost(Failure(FailureKind.UPSTREAM_CLOSED, "reset by peer")))
    assert kinds(actions) == ["RecordFailure", "End"]
    end = actions[-1]
    assert isinstance(end, End)
    assert end.code == "upstream_disconnected"
    assert machine.outcome == "upstream_lost_mid_stream"  # the metric's label
    assert end.detail == "reset by peer"
    assert first.consecutive_failures == 1
    assert no_outstanding(pool)
    assert machine.upstream_ended() == []  # nothing after the end


def test_a_stream_whose_framing_breaks_ends_with_the_error_and_counts_against_the_member() -> None:
    machine, pool, _ = make(eject_after=1)
    assert machine.malformed_frame("bad prelude") == []  # before the head there is no stream to end
    first = stream_to_head(machine, pool)
    step(pool, machine.head(200))
    ejected: list[MemberState] = []
    actions = step(
        pool, machine.malformed_frame("an event-stream message's prelude CRC does not match its bytes"), ejected
    )
    assert kinds(actions) == ["RecordFailure", "Abort", "End"]
    record, end = actions[0], actions[-1]
    assert isinstance(record, RecordFailure)
    assert isinstance(end, End)
    assert record.failure.kind is FailureKind.MALFORMED
    assert ejected == [first]  # a member whose stream breaks its framing is as broken as one with a malformed head
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
    first = stream_to_head(machine, pool)
    step(pool, machine.head(200))
    actions = step(pool, machine.event_too_large(8 << 20, (8 << 20) + 1))
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
    first = connect_target(step(pool, machine.start()))
    if phase != "connecting":
        machine.connected()
    if phase == "streaming":
        step(pool, machine.head(200))
    bug = Failure(FailureKind.INTERNAL, "RuntimeError('planted')")
    actions = step(pool, machine.attempt_failed(bug) if phase == "connecting" else machine.upstream_lost(bug))
    last = actions[-1]
    if phase == "streaming":
        assert actions == [Abort(), End("internal gateway error", Outcome.INTERNAL)]
        assert isinstance(last, End)
        assert last.code == "internal"
    else:
        assert actions == [Abort(), Reply(500, "internal gateway error", Outcome.INTERNAL)]  # no failover
        assert isinstance(last, Reply)
        assert last.code == "internal_error"
    assert (machine.phase, machine.outcome) == (Phase.DONE, "internal")
    assert first.consecutive_failures == 0
    assert first.healthy(pool.clock())
    assert no_outstanding(pool)
    assert machine.internal_error() == []


@pytest.mark.parametrize("paused", [False, True])
def test_silence_is_the_upstreams_unless_the_client_stopped_reading(paused: bool) -> None:
    machine, pool, clock = make()
    first = stream_to_head(machine, pool)
    step(pool, machine.head(200))
    clock.now += 4
    machine.read()
    if paused:
        machine.client_paused()
    clock.now += 6  # the idle timer armed at the head fires: 6 s since the last read, not idle yet
    assert machine.timer(Timer.IDLE) == [Arm(Timer.IDLE, clock.now + 4)]
    clock.now += 4
    actions = step(pool, machine.timer(Timer.IDLE))
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
    machine, pool, clock = make()
    stream_to_head(machine, pool)
    step(pool, machine.head(200))
    machine.client_paused()
    clock.now += 9
    machine.client_resumed()
    clock.now += 1  # 10 s since the last read, but the upstream was paused by us for 9 of them
    assert kinds(machine.timer(Timer.IDLE)) == ["Arm"]


def test_the_total_timeout_while_waiting_gives_up_at_once() -> None:
    machine, pool, _ = make(members=3)
    stream_to_head(machine, pool)
    actions = step(pool, machine.timer(Timer.TOTAL))
    assert kinds(actions) == ["Abort", "Reply"]
    assert isinstance(actions[-1], Reply)
    assert actions[-1].status == 504  # no next member is tried after the total budget is spent
    assert (actions[-1].code, machine.outcome) == ("upstream_unavailable", "total_timeout")
    assert no_outstanding(pool)


def test_the_total_timeout_mid_stream_ends_it() -> None:
    machine, pool, _ = make()
    stream_to_head(machine, pool)
    step(pool, machine.head(200))
    actions = step(pool, machine.timer(Timer.TOTAL))
    assert kinds(actions) == ["Abort", "End"]
    assert isinstance(actions[-1], End)
    assert (actions[-1].code, machine.outcome) == ("total_timeout", "total_timeout")
    assert no_outstanding(pool)


def test_a_client_leaving_while_connecting_drops_the_late_connection() -> None:
    machine, pool, _ = make()
    step(pool, machine.start())
    assert step(pool, machine.client_gone()) == [Abort()]
    assert machine.phase is Phase.DONE
    assert machine.connected() == [Abort()]  # the connection that arrives afterwards is dropped
    assert machine.attempt_failed(refused()) == []
    assert no_outstanding(pool)


def test_a_client_leaving_mid_stream_aborts_without_blaming_the_member() -> None:
    machine, pool, _ = make()
    first = stream_to_head(machine, pool)
    step(pool, machine.head(200))
    assert step(pool, machine.client_gone()) == [Abort()]
    assert first.consecutive_failures == 0
    assert machine.outcome == "client_gone"
    assert machine.timer(Timer.IDLE) == []
    assert no_outstanding(pool)


def test_a_stale_first_byte_timer_does_not_touch_a_later_attempt() -> None:
    machine, pool, _ = make()
    stream_to_head(machine, pool)
    step(pool, machine.attempt_failed(refused(FailureKind.UPSTREAM_5XX)))
    assert machine.phase is Phase.CONNECTING
    assert machine.timer(Timer.FIRST_BYTE) == []  # the first attempt's timer, firing while connecting again


# new structure: the machine is pure, its table is data, its outcomes one enum ------------------------------------
def test_the_docstring_table_is_rendered_from_the_data() -> None:
    assert exchange_state.__doc__ is not None
    assert exchange_state.render_table() in exchange_state.__doc__, "paste render_table()'s output into the docstring"


def test_an_event_the_table_does_not_list_is_ignored_and_only_start_is_never_late() -> None:
    for phase in Phase:
        for event in Event:
            if (phase, event) in exchange_state.TABLE:
                continue
            machine, pool, _ = make()
            machine.phase = phase
            if event in exchange_state.NEVER_LATE:
                with pytest.raises(InvalidTransition):
                    machine._fire(event)
            else:
                assert machine._fire(event) == [], (phase, event)
            assert machine.phase is phase
    machine, pool, _ = make()
    step(pool, machine.start())
    with pytest.raises(InvalidTransition):
        machine.start()


def test_done_is_final_and_routed_is_left_at_once() -> None:
    for (phase, event), transition in exchange_state.TABLE.items():
        if phase is Phase.DONE:
            assert transition.targets == {Phase.DONE}, event
        assert Phase.ROUTED not in transition.targets, (phase, event)


def test_the_machine_changes_no_pool() -> None:
    """Every scenario with its actions left unapplied: the members are as they were (only the shell applies)."""
    machine, pool, clock = make(eject_after=1)
    before = [dataclasses.astuple(m) for m in pool.members]
    machine.start()
    machine.attempt_failed(refused())
    machine.connected()
    machine.head(200)
    clock.now += 11
    machine.timer(Timer.IDLE)
    assert [dataclasses.astuple(m) for m in pool.members] == before
    machine, pool, _ = make(members=1)
    before = [dataclasses.astuple(m) for m in pool.members]
    machine.start()
    machine.connected()
    machine.head(200)
    machine.malformed_frame("bad prelude")
    assert [dataclasses.astuple(m) for m in pool.members] == before


def test_one_outcome_names_the_metric_label_and_the_codes_the_client_reads() -> None:
    """Today's strings, pinned: tests, dashboards and clients read them (label, code before the head, code of the
    error frame after it)."""
    assert {o: (o.value, o.reply_code, o.end_code) for o in Outcome} == {
        Outcome.ALL_MEMBERS_FAILED: ("all_members_failed", "upstream_unavailable", "all_members_failed"),
        Outcome.LOCAL_RESOURCES: ("local_resources", "overloaded", "local_resources"),
        Outcome.TOTAL_TIMEOUT: ("total_timeout", "upstream_unavailable", "total_timeout"),
        Outcome.IDLE_TIMEOUT: ("idle_timeout", "upstream_idle_timeout", "upstream_idle_timeout"),
        Outcome.CLIENT_STALLED: ("client_stalled", "client_stalled", "client_stalled"),
        Outcome.UPSTREAM_LOST_MID_STREAM: (
            "upstream_lost_mid_stream",
            "upstream_disconnected",
            "upstream_disconnected",
        ),
        Outcome.UPSTREAM_TRUNCATED: ("upstream_truncated", "upstream_truncated", "upstream_truncated"),
        Outcome.EVENT_TOO_LARGE: ("event_too_large", "event_too_large", "event_too_large"),
        Outcome.UPSTREAM_MALFORMED: ("upstream_malformed", "upstream_malformed", "upstream_malformed"),
        Outcome.CLIENT_GONE: ("client_gone", "client_gone", "client_gone"),
        Outcome.INTERNAL: ("internal", "internal_error", "internal"),
        Outcome.SHUTDOWN: ("shutdown", "shutdown", "shutdown"),
        Outcome.OVERLOADED: ("overloaded", "overloaded", "overloaded"),
        Outcome.BODIES_IN_FLIGHT: ("bodies_in_flight", "overloaded", "bodies_in_flight"),
        Outcome.UNAUTHORIZED: ("unauthorized", "invalid_api_key", "unauthorized"),
        Outcome.JWKS_UNAVAILABLE: ("jwks_unavailable", "auth_unavailable", "jwks_unavailable"),
    }
    assert {o.end_code for o in Outcome} >= set(FAULTS)  # each code a format names a fault for
    assert f"{Outcome.IDLE_TIMEOUT}" == "idle_timeout"  # a metric label as it is
