"""The decisions of one request through the gateway, as a pure state machine: events in, actions out, the clock
injected. No sockets, no tasks, no timers: the asyncio Exchange (proxy.py) performs the actions and reports what
happened, so every outcome (fail over, retry on the same member, 502/503/504, the stream's error frame, whose fault a
silence was) is decided here, by one table, and unit-tested without a network.

    phase          event                          -> next phase    actions
    ROUTED         start                          -> CONNECTING    Arm(TOTAL), Connect(first member) | Reply 502
    CONNECTING     connected                      -> WAITING       Arm(FIRST_BYTE)
    CONNECTING     attempt failed (connect, TLS)  -> CONNECTING    Record; Connect(same, once) | Connect(next) |
                                                                   Reply 502/503/504 -> DONE
                   (an HTTP/2 refusal: Connect(next), else Connect(same, on a new connection) once)
    WAITING        head < 500                     -> STREAMING     Record(ok), Commit, Arm(IDLE)
    WAITING        head >= 500, lost, timeout     -> CONNECTING    as "attempt failed", after Abort
    STREAMING      end                            -> DONE          Complete
    STREAMING      end, the format's end missing  -> DONE          Record(failure), Abort, End(upstream_truncated)
    STREAMING      lost                           -> DONE          Record(failure), End(upstream_disconnected)
    STREAMING      a frame too large to hold      -> DONE          Abort, End(event_too_large), member not blamed
    STREAMING      a frame's framing broke        -> DONE          Record(failure), Abort, End(upstream_malformed)
    STREAMING      idle timer, client reading     -> DONE          End(upstream_idle_timeout)
    STREAMING      idle timer, client stalled     -> DONE          End(client_stalled), member not blamed
    any but DONE   total timer                    -> DONE          End or Reply 504
    any but DONE   client gone                    -> DONE          Abort (the member stops generating)
    any but DONE   internal error (a bug of ours) -> DONE          Abort, Reply 500 | End(internal); no member blamed
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from tokenpath.gateway.config import Limits
from tokenpath.gateway.failures import Failure, FailureKind
from tokenpath.gateway.pools import MemberState, Pool


class Phase(Enum):
    ROUTED = "routed"
    CONNECTING = "connecting"  # acquiring a connection (and TLS handshake) to a member
    WAITING = "waiting"  # the request is sent; no head yet
    STREAMING = "streaming"  # the client has the head: no more failover
    DONE = "done"


class Timer(Enum):
    FIRST_BYTE = "first_byte"
    IDLE = "idle"
    TOTAL = "total"


# actions ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Connect:
    member: MemberState
    fresh: bool = False  # a new connection, not an idle keep-alive one (after a stale one failed)


@dataclass(frozen=True, slots=True)
class Abort:
    """Drop the current upstream connection or stream (the member stops generating)."""


@dataclass(frozen=True, slots=True)
class Record:
    """The attempt's outcome for the member's health: None is a success."""

    member: MemberState
    failure: Failure | None
    ejected: bool = False


@dataclass(frozen=True, slots=True)
class Commit:
    """Forward the head: from now on the client has bytes and there is no failover."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer with an error before anything was sent."""

    status: int
    message: str
    code: str


@dataclass(frozen=True, slots=True)
class End:
    """End a committed stream with an explicit error frame (in its format's shape) and close the client's connection."""

    message: str
    code: str
    detail: str | None = None
    client_reads: bool = True  # False: the client stopped reading, writing it an event is pointless


@dataclass(frozen=True, slots=True)
class Complete:
    """The upstream response ended: end the client's response normally."""


@dataclass(frozen=True, slots=True)
class Arm:
    timer: Timer
    at: float  # on the injected clock


Action = Connect | Abort | Record | Commit | Reply | End | Complete | Arm


class ExchangeMachine:
    def __init__(self, pool: Pool, limits: Limits, clock: Callable[[], float]) -> None:
        self.pool = pool
        self.limits = limits
        self.clock = clock
        self.phase = Phase.ROUTED
        self.member: MemberState | None = None
        self.tried: list[MemberState] = []
        self.failures: list[Failure] = []  # every failed attempt, in order (the log shows them)
        self.retried_here = False
        self.last_read = 0.0
        self.paused_at: float | None = None  # the client's buffer is full since then
        self.outcome: str | None = None  # why it ended, when not normally

    @property
    def attempts(self) -> int:
        return len(self.tried) + (1 if self.retried_here else 0)

    # events -----------------------------------------------------------------------------------------------
    def start(self) -> list[Action]:
        assert self.phase is Phase.ROUTED
        actions: list[Action] = [Arm(Timer.TOTAL, self.clock() + self.limits.total_timeout_s)]
        return actions + self._next_member()

    def connected(self) -> list[Action]:
        if self.phase is not Phase.CONNECTING:
            return [Abort()]  # the client left (or time ran out) while connecting
        self.phase = Phase.WAITING
        return [Arm(Timer.FIRST_BYTE, self.clock() + self.limits.first_byte_timeout_s)]

    def attempt_failed(self, failure: Failure, stale: bool = False) -> list[Action]:
        """Connecting failed, or the upstream failed before the head (`stale`: on a reused keep-alive connection
        that returned nothing, i.e. the member had closed it)."""
        if self.phase not in (Phase.CONNECTING, Phase.WAITING):
            return []
        if failure.kind is FailureKind.INTERNAL:
            return self.internal_error(failure)
        member = self.member
        assert member is not None
        actions: list[Action] = [Abort()] if self.phase is Phase.WAITING else []
        self.failures.append(failure)
        member.outstanding -= 1
        self.phase = Phase.CONNECTING
        # An HTTP/2 refusal (REFUSED_STREAM, GOAWAY) was not processed: sent to another member as a refused
        # connection would be, and to the same member (on a new connection) only when none is left to try.
        refused = failure.kind is FailureKind.REFUSED_STREAM and len(self.tried) >= len(self.pool.members)
        retry_here = (failure.kind is FailureKind.UPSTREAM_CLOSED and stale) or refused
        if retry_here and not self.retried_here:  # the request never reached the model: once more, fresh
            self.retried_here = True
            member.outstanding += 1
            return [*actions, Record(member, failure), Connect(member, fresh=True)]
        if failure.kind is FailureKind.LOCAL_RESOURCES:  # every member would fail the same way
            return [*actions, *self._give_up()]
        ejected = self.pool.record_failure(member) if failure.members_fault else False
        actions.append(Record(member, failure, ejected))
        return actions + self._next_member()

    def head(self, status: int) -> list[Action]:
        if self.phase is not Phase.WAITING:
            return []
        if status >= 500:
            return self.attempt_failed(Failure(FailureKind.UPSTREAM_5XX, f"upstream answered {status}"))
        assert self.member is not None
        self.pool.record_success(self.member)
        self.phase = Phase.STREAMING
        self.last_read = self.clock()
        return [Record(self.member, None), Commit(), Arm(Timer.IDLE, self.last_read + self.limits.idle_timeout_s)]

    def read(self) -> None:
        """An upstream read was relayed (no actions: called per read, kept to one assignment)."""
        self.last_read = self.clock()

    def upstream_ended(self) -> list[Action]:
        if self.phase is not Phase.STREAMING:
            return []
        self._finish_member()
        self.phase = Phase.DONE
        return [Complete()]

    def upstream_cut(self, detail: str) -> list[Action]:
        """The body ended without the format's end (inside a frame, or before its final event): the upstream cut
        the stream, as a lost connection does, however cleanly its transport ended (a close-delimited body's end
        is a close). The whole frames went out; the client gets the error frame, never a clean end."""
        if self.phase is not Phase.STREAMING:
            return []
        member = self.member
        assert member is not None
        ejected = self.pool.record_failure(member)
        self._end("upstream_truncated")
        message = "upstream ended the stream before its end"
        failure = Failure(FailureKind.UPSTREAM_CLOSED, detail)
        return [Record(member, failure, ejected), Abort(), End(message, "upstream_truncated", detail)]

    def upstream_lost(self, failure: Failure, stale: bool = False) -> list[Action]:
        if failure.kind is FailureKind.INTERNAL:
            return self.internal_error(failure)
        if self.phase is Phase.WAITING:
            return self.attempt_failed(failure, stale)
        if self.phase is not Phase.STREAMING:
            return []
        member = self.member
        assert member is not None
        ejected = self.pool.record_failure(member)
        self._end("upstream_lost_mid_stream")
        message = f"upstream failed mid-response ({failure.kind.value})"
        return [Record(member, failure, ejected), End(message, "upstream_disconnected", failure.detail)]

    def event_too_large(self, limit: int, size: int) -> list[Action]:
        """The upstream's current frame grew past `limit` bytes without ending: the relay holds a frame until
        it is whole, and will hold no more. The events before it went out whole; the client gets the error event
        next. The member answered (its health stands, as with a silence); this response is what was wrong."""
        if self.phase is not Phase.STREAMING:
            return []
        self._end("event_too_large")
        message = f"upstream sent a frame larger than {limit} bytes"
        return [Abort(), End(message, "event_too_large", f"{size} bytes held without an end")]

    def malformed_frame(self, detail: str) -> list[Action]:
        """The upstream's stream broke its own framing (an event-stream prelude whose CRC fails): nothing after it
        can be cut into frames. The frames before it went out whole; the client gets the error frame next. Unlike
        a frame that is merely large, broken framing is the member's fault (as a malformed head is)."""
        if self.phase is not Phase.STREAMING:
            return []
        member = self.member
        assert member is not None
        failure = Failure(FailureKind.MALFORMED, detail)
        ejected = self.pool.record_failure(member)
        self._end("upstream_malformed")
        message = "upstream sent a stream that breaks its format's framing"
        return [Record(member, failure, ejected), Abort(), End(message, "upstream_malformed", detail)]

    def client_gone(self) -> list[Action]:
        if self.phase is Phase.DONE:
            return []
        self._end("client_gone")  # not the member's fault
        return [Abort()]

    def internal_error(self, failure: Failure | None = None) -> list[Action]:
        """A bug in the gateway's own code: the request fails as ours (a 500 before the head, the error event
        after), and no member is blamed, ejected or tried instead."""
        if self.phase is Phase.DONE:
            return []
        streaming = self.phase is Phase.STREAMING
        if failure is not None:
            self.failures.append(failure)  # for the log
        self._end("internal")
        if streaming:
            return [Abort(), End("internal gateway error", "internal")]
        return [Abort(), Reply(500, "internal gateway error", "internal_error")]

    def client_paused(self) -> None:
        self.paused_at = self.clock()

    def client_resumed(self) -> None:
        self.paused_at = None
        self.last_read = self.clock()  # the upstream's silence counts from now, not from the pause

    def timer(self, which: Timer) -> list[Action]:
        now = self.clock()
        if self.phase is Phase.DONE:
            return []
        limits = self.limits
        if which is Timer.TOTAL:
            total = limits.total_timeout_s
            if self.phase is Phase.STREAMING:
                self._end("total_timeout")
                return [Abort(), End(f"response exceeded the total timeout ({total:g} s)", "total_timeout")]
            failure = Failure(FailureKind.TOTAL_TIMEOUT, f"total timeout ({total:g} s)")
            actions: list[Action] = [Abort()] if self.phase is Phase.WAITING else []
            if self.member is not None:
                self.member.outstanding -= 1
                self.member = None
            self.failures.append(failure)
            self.outcome = "total_timeout"
            return actions + self._give_up()
        if which is Timer.FIRST_BYTE:
            if self.phase is not Phase.WAITING:
                return []
            s = limits.first_byte_timeout_s
            url = self.member.url if self.member else "?"
            why = f"{url}: no response within the first-byte timeout ({s:g} s)"
            return self.attempt_failed(Failure(FailureKind.FIRST_BYTE_TIMEOUT, why))
        # IDLE: one timer per stream, re-armed from the last read only when it fires
        if self.phase is not Phase.STREAMING:
            return []
        idle = limits.idle_timeout_s
        if self.paused_at is not None:
            if now - self.paused_at >= idle:  # we paused the upstream for this client: the silence is the client's
                self._end("client_stalled")
                return [Abort(), End(f"the client read nothing for {idle:g} s", "client_stalled", client_reads=False)]
            return [Arm(Timer.IDLE, self.paused_at + idle)]
        if now - self.last_read >= idle:
            self._end("idle_timeout")
            return [Abort(), End(f"upstream silent for {idle:g} s (idle timeout)", "upstream_idle_timeout")]
        return [Arm(Timer.IDLE, self.last_read + idle)]

    # internals ---------------------------------------------------------------------------------------------
    def _next_member(self) -> list[Action]:
        member = self.pool.pick(self.tried)
        if member is None:
            return self._give_up()
        self.tried.append(member)
        self.member = member
        member.outstanding += 1
        self.phase = Phase.CONNECTING
        return [Connect(member)]

    def _give_up(self) -> list[Action]:
        """Every attempt failed before the first byte. The client learns the outcome; which members and why are
        the operator's (the failures go to the log)."""
        self.phase = Phase.DONE
        self.member = None
        failures = self.failures
        if failures and failures[-1].kind is FailureKind.LOCAL_RESOURCES:
            self.outcome = "local_resources"
            return [Reply(503, "gateway out of local resources; retry shortly", "overloaded")]
        self.outcome = self.outcome or "all_members_failed"
        if failures and all(f.is_timeout for f in failures):
            return [Reply(504, f"no upstream in pool {self.pool.name!r} answered in time", "upstream_unavailable")]
        return [Reply(502, f"no upstream in pool {self.pool.name!r} answered", "upstream_unavailable")]

    def _end(self, outcome: str) -> None:
        """The exchange is over with this outcome; the member's outstanding count goes back."""
        self._finish_member()
        self.phase = Phase.DONE
        self.outcome = outcome

    def _finish_member(self) -> None:
        if self.member is not None:
            self.member.outstanding -= 1
            self.member = None
