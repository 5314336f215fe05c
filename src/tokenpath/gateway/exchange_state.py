"""The decisions of one request through the gateway, as a pure state machine: events in, actions out, the clock
injected. No sockets, no tasks, no timers, no pool changes: the asyncio Exchange (exchange.py) performs the actions
(the pool's among them: a member's outstanding count, its successes and failures) and reports what happened, so
every outcome (fail over, retry on the same member, 502/503/504, the stream's error frame, whose fault a silence
was) is decided here and unit-tested without a network.

The transitions are data, ROWS below (h2's stream.py, h11's _state.py): for a phase and an event, the phases it may
lead to and the handler that decides which, with what actions. An event the table does not list for the phase is
late (a timer, a connection or a callback that lost a race with a failover or the end) and ignored; START, which
cannot be late, raises. This table is rendered from ROWS (render_table(), checked by a unit test):

    phase                         event             -> next phase         actions
    ROUTED                        start             -> CONNECTING | DONE  Arm(TOTAL), Connect(first member) | Reply 502
    CONNECTING                    connected         -> WAITING            Arm(FIRST_BYTE)
    DONE                          connected         -> DONE               Abort (it came too late)
    CONNECTING | WAITING          attempt failed    -> CONNECTING | DONE  (Abort), RecordFailure, Connect(same, fresh,
                                                                          once) | Connect(next) | Reply 502/503/504
    WAITING                       head < 500        -> STREAMING          RecordSuccess, Commit, Arm(IDLE),
                                                                          Arm(KEEPALIVE) (unless its interval is 0)
    WAITING                       head >= 500       -> CONNECTING | DONE  as attempt failed
    WAITING                       first-byte timer  -> CONNECTING | DONE  as attempt failed
    WAITING                       lost              -> CONNECTING | DONE  as attempt failed (stale: the same member,
                                                                          once more, fresh)
    STREAMING                     ended             -> DONE               Complete
    STREAMING                     cut               -> DONE               RecordFailure, Abort, End(upstream_truncated)
    STREAMING                     lost              -> DONE               RecordFailure, End(upstream_disconnected)
    STREAMING                     frame too large   -> DONE               Abort, End(event_too_large); member not blamed
    STREAMING                     framing broke     -> DONE               RecordFailure, Abort, End(upstream_malformed)
    STREAMING                     idle timer        -> STREAMING | DONE   Arm(IDLE) | End(upstream_idle_timeout) |
                                                                          End(client_stalled); member not blamed
    STREAMING                     keep-alive timer  -> STREAMING          KeepAlive, Arm(KEEPALIVE) (silent for its
                                                                          interval) | Arm(KEEPALIVE) | none (the format
                                                                          has no keep-alive)
    CONNECTING | WAITING          total timer       -> DONE               (Abort), Reply 504
    STREAMING                     total timer       -> DONE               Abort, End(total_timeout)
    any but DONE                  client gone       -> DONE               Abort (the member stops generating)
    ROUTED | CONNECTING | WAITING internal error    -> DONE               Abort, Reply 500; no member blamed
    STREAMING                     internal error    -> DONE               Abort, End(internal); no member blamed
    any but DONE                  shutdown          -> DONE               Abort, End(shutdown)

Leaving a member (a failure, an end) gives back its outstanding stream (Outstanding -1); every Connect to a new
member comes with Outstanding +1. `read`, `client_paused` and `client_resumed` are notes, not transitions: they
change no phase and decide nothing, they move the clock the idle timer reads (`read` is called once per relayed
read, and the shell inlines it). So is `keeps_alive`, which the shell sets when it forwards the head: the keep-alive
timer reads it. Keep-alives go out only after the head (the upstream's own, forwarded in the read that brought it):
the gateway never sends a head of its own to keep a client waiting, since that would end failover and hide the
status the member was about to give. (The member's head goes out the moment it is in, as the first seed article's
`flushHeaders` advises: no head is held for the first body byte, so keep-alives may start right after it.)
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from tokenpath.errors import LocalProtocolError
from tokenpath.gateway.config import Limits
from tokenpath.gateway.failures import Failure, FailureKind, Outcome
from tokenpath.gateway.pools import MemberState


class FastHashEnum(Enum):
    """An enum hashed by identity (its members are singletons, compared by identity anyway): Enum's own __hash__ is a
    Python call, and the machine's tables, keyed by phase, event and timer, are looked up a few times per request."""

    __hash__ = object.__hash__


class Phase(FastHashEnum):
    ROUTED = "routed"
    CONNECTING = "connecting"  # acquiring a connection (and TLS handshake) to a member
    WAITING = "waiting"  # the request is sent; no head yet
    STREAMING = "streaming"  # the client has the head: no more failover
    DONE = "done"


class Event(FastHashEnum):
    START = "start"
    CONNECTED = "connected"
    ATTEMPT_FAILED = "attempt failed"
    HEAD_OK = "head < 500"
    HEAD_5XX = "head >= 500"
    FIRST_BYTE_TIMER = "first-byte timer"
    LOST = "lost"
    ENDED = "ended"
    CUT = "cut"  # the body ended without its format's end
    TOO_LARGE = "frame too large"
    MALFORMED = "framing broke"
    IDLE_TIMER = "idle timer"
    KEEPALIVE_TIMER = "keep-alive timer"
    TOTAL_TIMER = "total timer"
    CLIENT_GONE = "client gone"
    INTERNAL = "internal error"  # a bug of ours
    SHUTDOWN = "shutdown"


NEVER_LATE = frozenset({Event.START})  # unlisted for the phase: a bug, not a race


class Timer(FastHashEnum):
    FIRST_BYTE = "first_byte"
    IDLE = "idle"
    KEEPALIVE = "keepalive"
    TOTAL = "total"


class InvalidTransition(LocalProtocolError):
    """An event that cannot arrive late arrived in a phase that does not take it: a bug in the shell."""


# actions ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Connect:
    member: MemberState
    fresh: bool = False  # a new connection, not an idle keep-alive one (after a stale one failed)


@dataclass(frozen=True, slots=True)
class Abort:
    """Drop the current upstream connection or stream (the member stops generating)."""


@dataclass(frozen=True, slots=True)
class Outstanding:
    """The member's count of streams in flight (what least_outstanding and p2c pick by) changes by `delta`."""

    member: MemberState
    delta: int


@dataclass(frozen=True, slots=True)
class RecordSuccess:
    """The member answered with a head: its run of consecutive failures ends."""

    member: MemberState


@dataclass(frozen=True, slots=True)
class RecordFailure:
    """An attempt at the member failed: logged and counted, and held against the member's health when `blame`."""

    member: MemberState
    failure: Failure
    blame: bool


@dataclass(frozen=True, slots=True)
class Commit:
    """Forward the head: from now on the client has bytes and there is no failover."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer with an error before anything was sent."""

    status: int
    message: str
    outcome: Outcome

    @property
    def code(self) -> str:
        return self.outcome.reply_code


@dataclass(frozen=True, slots=True)
class End:
    """End a committed stream with an explicit error frame (in its format's shape) and close the client's connection."""

    message: str
    outcome: Outcome
    detail: str | None = None
    client_reads: bool = True  # False: the client stopped reading, writing it an event is pointless

    @property
    def code(self) -> str:
        return self.outcome.end_code


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Write the stream format's keep-alive to the client, if it may go now (relay.Relay.keepalive: between whole
    frames only); counted when written."""


@dataclass(frozen=True, slots=True)
class Complete:
    """The upstream response ended: end the client's response normally."""


@dataclass(frozen=True, slots=True)
class Arm:
    timer: Timer
    at: float  # on the injected clock


PoolAction = Outstanding | RecordSuccess | RecordFailure
Action = Connect | Abort | Commit | Reply | End | Complete | KeepAlive | Arm | PoolAction
Step = tuple[Phase, list[Action]]  # what a handler decided: the next phase, and the actions to get there


class Members(Protocol):
    """What the machine reads of its pool (a pools.Pool): it never changes it, its actions say how to."""

    @property
    def name(self) -> str: ...
    @property
    def members(self) -> list[MemberState]: ...
    def pick(self, exclude: Iterable[MemberState] = ()) -> MemberState | None: ...


class ExchangeMachine:
    def __init__(self, pool: Members, limits: Limits, clock: Callable[[], float]) -> None:
        self.pool = pool
        self.limits = limits
        self.clock = clock
        self.phase = Phase.ROUTED
        self.member: MemberState | None = None  # the member of the current attempt, its stream counted outstanding
        self.tried: list[MemberState] = []
        self.failures: list[Failure] = []  # every failed attempt, in order (the log shows them)
        self.retried_here = False
        self.last_read = 0.0
        self.paused_at: float | None = None  # the client's buffer is full since then
        # The committed stream's format has a keep-alive (its ApiSpec.keepalive): set by the shell when it forwards
        # the head (the format is the head's Content-Type), before the keep-alive timer armed with it can fire.
        self.keeps_alive = False
        self.last_keepalive = 0.0
        self.outcome: Outcome | None = None  # why it ended, when not normally

    @property
    def attempts(self) -> int:
        return len(self.tried) + (1 if self.retried_here else 0)

    def _fire(self, event: Event, *args: object) -> list[Action]:
        """The one place the phase changes: ROWS says which handler decides, and which phases it may choose."""
        transition = TABLE.get((self.phase, event))
        if transition is None:
            if event in NEVER_LATE:
                raise InvalidTransition(f"{event.value} in phase {self.phase.value}")
            return []
        phase, actions = transition.handler(self, *args)
        assert phase in transition.targets, f"{self.phase} --{event.value}--> {phase}: not in the table"
        self.phase = phase
        return actions

    # events -----------------------------------------------------------------------------------------------
    def start(self) -> list[Action]:
        return self._fire(Event.START)

    def connected(self) -> list[Action]:
        return self._fire(Event.CONNECTED)

    def attempt_failed(self, failure: Failure, stale: bool = False) -> list[Action]:
        """Connecting failed, or the upstream failed before the head (`stale`: on a reused keep-alive connection
        that returned nothing, i.e. the member had closed it)."""
        return self._fire(Event.ATTEMPT_FAILED, failure, stale)

    def head(self, status: int) -> list[Action]:
        return self._fire(Event.HEAD_5XX if status >= 500 else Event.HEAD_OK, status)

    def read(self) -> None:
        """An upstream read was relayed (no actions: called per read, kept to one assignment)."""
        self.last_read = self.clock()

    def upstream_ended(self) -> list[Action]:
        return self._fire(Event.ENDED)

    def upstream_cut(self, detail: str) -> list[Action]:
        """The body ended without the format's end (inside a frame, or before its final event): the upstream cut
        the stream, as a lost connection does, however cleanly its transport ended (a close-delimited body's end
        is a close). The whole frames went out; the client gets the error frame, never a clean end."""
        return self._fire(Event.CUT, detail)

    def upstream_lost(self, failure: Failure, stale: bool = False) -> list[Action]:
        if failure.kind is FailureKind.INTERNAL:
            return self._fire(Event.INTERNAL, failure)
        return self._fire(Event.LOST, failure, stale)

    def event_too_large(self, limit: int, size: int) -> list[Action]:
        """The upstream's current frame grew past `limit` bytes without ending: the relay holds a frame until
        it is whole, and will hold no more. The events before it went out whole; the client gets the error event
        next. The member answered (its health stands, as with a silence); this response is what was wrong."""
        return self._fire(Event.TOO_LARGE, limit, size)

    def malformed_frame(self, detail: str) -> list[Action]:
        """The upstream's stream broke its own framing (an event-stream prelude whose CRC fails): nothing after it
        can be cut into frames. The frames before it went out whole; the client gets the error frame next. Unlike
        a frame that is merely large, broken framing is the member's fault (as a malformed head is)."""
        return self._fire(Event.MALFORMED, detail)

    def client_gone(self) -> list[Action]:
        return self._fire(Event.CLIENT_GONE)

    def internal_error(self, failure: Failure | None = None) -> list[Action]:
        """A bug in the gateway's own code: the request fails as ours (a 500 before the head, the error event
        after), and no member is blamed, ejected or tried instead."""
        return self._fire(Event.INTERNAL, failure)

    def shutdown(self) -> list[Action]:
        """The gateway's drain deadline passed with this request still open."""
        return self._fire(Event.SHUTDOWN)

    def timer(self, which: Timer) -> list[Action]:
        return self._fire(TIMER_EVENTS[which])

    # notes: no phase changes, no actions
    def client_paused(self) -> None:
        self.paused_at = self.clock()

    def client_resumed(self) -> None:
        self.paused_at = None
        self.last_read = self.clock()  # the upstream's silence counts from now, not from the pause

    # handlers (ROWS): each returns the phase it chose and the actions ---------------------------------------
    def _start(self) -> Step:
        phase, actions = self._next_member()
        return phase, [Arm(Timer.TOTAL, self.clock() + self.limits.total_timeout_s), *actions]

    def _connected(self) -> Step:
        return Phase.WAITING, [Arm(Timer.FIRST_BYTE, self.clock() + self.limits.first_byte_timeout_s)]

    def _connected_late(self) -> Step:
        return Phase.DONE, [Abort()]  # the client left (or time ran out) while connecting

    def _attempt_failed(self, failure: Failure, stale: bool = False) -> Step:
        if failure.kind is FailureKind.INTERNAL:
            return self._internal_before_head(failure)
        member = self.member
        assert member is not None
        actions: list[Action] = [Abort()] if self.phase is Phase.WAITING else []
        self.failures.append(failure)
        # An HTTP/2 refusal (REFUSED_STREAM, GOAWAY) was not processed: sent to another member as a refused
        # connection would be, and to the same member (on a new connection) only when none is left to try.
        refused = failure.kind is FailureKind.REFUSED_STREAM and len(self.tried) >= len(self.pool.members)
        retry_here = (failure.kind is FailureKind.UPSTREAM_CLOSED and stale) or refused
        if retry_here and not self.retried_here:  # the request never reached the model: once more, fresh
            self.retried_here = True
            return Phase.CONNECTING, [*actions, RecordFailure(member, failure, False), Connect(member, fresh=True)]
        if failure.kind is FailureKind.LOCAL_RESOURCES:  # every member would fail the same way
            phase, given_up = self._give_up()
            return phase, actions + given_up
        actions.append(RecordFailure(member, failure, failure.members_fault))
        actions += self._let_go()
        phase, next_actions = self._next_member()
        return phase, actions + next_actions

    def _head_ok(self, status: int) -> Step:
        assert self.member is not None
        self.last_read = self.clock()
        actions: list[Action] = [
            RecordSuccess(self.member),
            Commit(),
            Arm(Timer.IDLE, self.last_read + self.limits.idle_timeout_s),
        ]
        if self.limits.keepalive_interval_s:
            actions.append(Arm(Timer.KEEPALIVE, self.last_read + self.limits.keepalive_interval_s))
        return Phase.STREAMING, actions

    def _head_5xx(self, status: int) -> Step:
        return self._attempt_failed(Failure(FailureKind.UPSTREAM_5XX, f"upstream answered {status}"))

    def _first_byte_timeout(self) -> Step:
        url = self.member.url if self.member else "?"
        why = f"{url}: no response within the first-byte timeout ({self.limits.first_byte_timeout_s:g} s)"
        return self._attempt_failed(Failure(FailureKind.FIRST_BYTE_TIMEOUT, why))

    def _ended(self) -> Step:
        return Phase.DONE, [*self._let_go(), Complete()]

    def _cut(self, detail: str) -> Step:
        failure = Failure(FailureKind.UPSTREAM_CLOSED, detail)
        end = End("upstream ended the stream before its end", Outcome.UPSTREAM_TRUNCATED, detail)
        return Phase.DONE, [*self._blame(failure), *self._end(end.outcome), Abort(), end]

    def _lost_mid_stream(self, failure: Failure, stale: bool = False) -> Step:
        message = f"upstream failed mid-response ({failure.kind.value})"
        end = End(message, Outcome.UPSTREAM_LOST_MID_STREAM, failure.detail)
        return Phase.DONE, [*self._blame(failure), *self._end(end.outcome), end]

    def _too_large(self, limit: int, size: int) -> Step:
        message = f"upstream sent a frame larger than {limit} bytes"
        end = End(message, Outcome.EVENT_TOO_LARGE, f"{size} bytes held without an end")
        return Phase.DONE, [*self._end(end.outcome), Abort(), end]

    def _malformed(self, detail: str) -> Step:
        failure = Failure(FailureKind.MALFORMED, detail)
        end = End("upstream sent a stream that breaks its format's framing", Outcome.UPSTREAM_MALFORMED, detail)
        return Phase.DONE, [*self._blame(failure), *self._end(end.outcome), Abort(), end]

    def _idle_timer(self) -> Step:
        """One idle timer per stream, re-armed from the last read only when it fires."""
        now, idle = self.clock(), self.limits.idle_timeout_s
        if self.paused_at is not None:
            if now - self.paused_at >= idle:  # we paused the upstream for this client: the silence is the client's
                end = End(f"the client read nothing for {idle:g} s", Outcome.CLIENT_STALLED, client_reads=False)
                return Phase.DONE, [*self._end(end.outcome), Abort(), end]
            return Phase.STREAMING, [Arm(Timer.IDLE, self.paused_at + idle)]
        if now - self.last_read >= idle:
            end = End(f"upstream silent for {idle:g} s (idle timeout)", Outcome.IDLE_TIMEOUT)
            return Phase.DONE, [*self._end(end.outcome), Abort(), end]
        return Phase.STREAMING, [Arm(Timer.IDLE, self.last_read + idle)]

    def _keepalive_timer(self) -> Step:
        """One keep-alive timer per stream, re-armed only when it fires, from the later of the last read and the last
        keep-alive (a read costs the assignment `read` makes, nothing more). Due after keepalive_interval_s of silence;
        not while the client is not reading (it would not read it: the idle timer decides about it), and never again
        for a stream whose format has none."""
        if not self.keeps_alive:
            return Phase.STREAMING, []
        now, every = self.clock(), self.limits.keepalive_interval_s
        if self.paused_at is not None:
            return Phase.STREAMING, [Arm(Timer.KEEPALIVE, now + every)]
        quiet_since = max(self.last_read, self.last_keepalive)
        if now - quiet_since >= every:
            self.last_keepalive = now
            return Phase.STREAMING, [KeepAlive(), Arm(Timer.KEEPALIVE, now + every)]
        return Phase.STREAMING, [Arm(Timer.KEEPALIVE, quiet_since + every)]

    def _total_before_head(self) -> Step:
        total = self.limits.total_timeout_s
        actions: list[Action] = [Abort()] if self.phase is Phase.WAITING else []
        self.failures.append(Failure(FailureKind.TOTAL_TIMEOUT, f"total timeout ({total:g} s)"))
        self.outcome = Outcome.TOTAL_TIMEOUT
        phase, given_up = self._give_up()
        return phase, actions + given_up

    def _total_mid_stream(self) -> Step:
        end = End(f"response exceeded the total timeout ({self.limits.total_timeout_s:g} s)", Outcome.TOTAL_TIMEOUT)
        return Phase.DONE, [*self._end(end.outcome), Abort(), end]

    def _client_gone(self) -> Step:
        return Phase.DONE, [*self._end(Outcome.CLIENT_GONE), Abort()]  # not the member's fault

    def _internal_before_head(self, failure: Failure | None = None) -> Step:
        if failure is not None:
            self.failures.append(failure)  # for the log
        reply = Reply(500, "internal gateway error", Outcome.INTERNAL)
        return Phase.DONE, [*self._end(reply.outcome), Abort(), reply]

    def _internal_mid_stream(self, failure: Failure | None = None) -> Step:
        if failure is not None:
            self.failures.append(failure)
        return Phase.DONE, [*self._end(Outcome.INTERNAL), Abort(), End("internal gateway error", Outcome.INTERNAL)]

    def _shutdown(self) -> Step:
        end = End("the gateway is shutting down", Outcome.SHUTDOWN)
        return Phase.DONE, [*self._end(end.outcome), Abort(), end]

    # internals ---------------------------------------------------------------------------------------------
    def _next_member(self) -> Step:
        member = self.pool.pick(self.tried)
        if member is None:
            return self._give_up()
        self.tried.append(member)
        self.member = member
        return Phase.CONNECTING, [Outstanding(member, +1), Connect(member)]

    def _give_up(self) -> Step:
        """Every attempt failed before the first byte. The client learns the outcome; which members and why are
        the operator's (the failures go to the log)."""
        actions = self._let_go()
        failures = self.failures
        if failures and failures[-1].kind is FailureKind.LOCAL_RESOURCES:
            self.outcome = Outcome.LOCAL_RESOURCES
            return Phase.DONE, [*actions, Reply(503, "gateway out of local resources; retry shortly", self.outcome)]
        outcome = self.outcome = self.outcome or Outcome.ALL_MEMBERS_FAILED
        if failures and all(f.is_timeout for f in failures):
            reply = Reply(504, f"no upstream in pool {self.pool.name!r} answered in time", outcome)
        else:
            reply = Reply(502, f"no upstream in pool {self.pool.name!r} answered", outcome)
        return Phase.DONE, [*actions, reply]

    def _blame(self, failure: Failure) -> list[Action]:
        assert self.member is not None
        return [RecordFailure(self.member, failure, True)]

    def _end(self, outcome: Outcome) -> list[Action]:
        """The exchange is over with this outcome: its member's stream is no longer outstanding."""
        self.outcome = outcome
        return self._let_go()

    def _let_go(self) -> list[Action]:
        member, self.member = self.member, None
        return [Outstanding(member, -1)] if member is not None else []


# the table -----------------------------------------------------------------------------------------------------------
Handler = Callable[..., Step]  # an ExchangeMachine method, unbound, taking the event's arguments


@dataclass(frozen=True, slots=True)
class Transition:
    targets: frozenset[Phase]
    handler: Handler


@dataclass(frozen=True, slots=True)
class Row:
    phases: tuple[Phase, ...]
    event: Event
    targets: tuple[Phase, ...]
    handler: Handler
    actions: str  # what the handler does, for the table in the docstring


P = Phase
BEFORE_HEAD = (P.CONNECTING, P.WAITING)
LIVE = (P.ROUTED, P.CONNECTING, P.WAITING, P.STREAMING)
FAILED_OVER = (P.CONNECTING, P.DONE)
M = ExchangeMachine
ROWS = (
    Row((P.ROUTED,), Event.START, FAILED_OVER, M._start, "Arm(TOTAL), Connect(first member) | Reply 502"),
    Row((P.CONNECTING,), Event.CONNECTED, (P.WAITING,), M._connected, "Arm(FIRST_BYTE)"),
    Row((P.DONE,), Event.CONNECTED, (P.DONE,), M._connected_late, "Abort (it came too late)"),
    Row(
        BEFORE_HEAD,
        Event.ATTEMPT_FAILED,
        FAILED_OVER,
        M._attempt_failed,
        "(Abort), RecordFailure, Connect(same, fresh, once) | Connect(next) | Reply 502/503/504",
    ),
    Row(
        (P.WAITING,),
        Event.HEAD_OK,
        (P.STREAMING,),
        M._head_ok,
        "RecordSuccess, Commit, Arm(IDLE), Arm(KEEPALIVE) (unless its interval is 0)",
    ),
    Row((P.WAITING,), Event.HEAD_5XX, FAILED_OVER, M._head_5xx, "as attempt failed"),
    Row((P.WAITING,), Event.FIRST_BYTE_TIMER, FAILED_OVER, M._first_byte_timeout, "as attempt failed"),
    Row(
        (P.WAITING,),
        Event.LOST,
        FAILED_OVER,
        M._attempt_failed,
        "as attempt failed (stale: the same member, once more, fresh)",
    ),
    Row((P.STREAMING,), Event.ENDED, (P.DONE,), M._ended, "Complete"),
    Row((P.STREAMING,), Event.CUT, (P.DONE,), M._cut, "RecordFailure, Abort, End(upstream_truncated)"),
    Row((P.STREAMING,), Event.LOST, (P.DONE,), M._lost_mid_stream, "RecordFailure, End(upstream_disconnected)"),
    Row(
        (P.STREAMING,),
        Event.TOO_LARGE,
        (P.DONE,),
        M._too_large,
        "Abort, End(event_too_large); member not blamed",
    ),
    Row((P.STREAMING,), Event.MALFORMED, (P.DONE,), M._malformed, "RecordFailure, Abort, End(upstream_malformed)"),
    Row(
        (P.STREAMING,),
        Event.IDLE_TIMER,
        (P.STREAMING, P.DONE),
        M._idle_timer,
        "Arm(IDLE) | End(upstream_idle_timeout) | End(client_stalled); member not blamed",
    ),
    Row(
        (P.STREAMING,),
        Event.KEEPALIVE_TIMER,
        (P.STREAMING,),
        M._keepalive_timer,
        "KeepAlive, Arm(KEEPALIVE) (silent for its interval) | Arm(KEEPALIVE) | none (the format has no keep-alive)",
    ),
    Row(BEFORE_HEAD, Event.TOTAL_TIMER, (P.DONE,), M._total_before_head, "(Abort), Reply 504"),
    Row((P.STREAMING,), Event.TOTAL_TIMER, (P.DONE,), M._total_mid_stream, "Abort, End(total_timeout)"),
    Row(LIVE, Event.CLIENT_GONE, (P.DONE,), M._client_gone, "Abort (the member stops generating)"),
    Row(
        (P.ROUTED, *BEFORE_HEAD),
        Event.INTERNAL,
        (P.DONE,),
        M._internal_before_head,
        "Abort, Reply 500; no member blamed",
    ),
    Row((P.STREAMING,), Event.INTERNAL, (P.DONE,), M._internal_mid_stream, "Abort, End(internal); no member blamed"),
    Row(LIVE, Event.SHUTDOWN, (P.DONE,), M._shutdown, "Abort, End(shutdown)"),
)
TABLE = {(phase, row.event): Transition(frozenset(row.targets), row.handler) for row in ROWS for phase in row.phases}
assert len(TABLE) == sum(len(row.phases) for row in ROWS), "a (phase, event) pair listed twice"
del P, M
TIMER_EVENTS = {
    Timer.FIRST_BYTE: Event.FIRST_BYTE_TIMER,
    Timer.IDLE: Event.IDLE_TIMER,
    Timer.KEEPALIVE: Event.KEEPALIVE_TIMER,
    Timer.TOTAL: Event.TOTAL_TIMER,
}


def render_table(rows: Sequence[Row] = ROWS) -> str:
    """The transition table as the module docstring shows it, rendered from the data (lines of 120 at most)."""
    phase_w, event_w, next_w = 30, 17, 18
    actions_at = phase_w + event_w + len(" -> ") + next_w + 1
    lines = [f"{'phase':<{phase_w}}{'event':<{event_w}} -> {'next phase':<{next_w}} actions"]
    for row in rows:
        said = textwrap.wrap(row.actions, 116 - actions_at)
        targets = " | ".join(p.name for p in row.targets)
        lines.append(f"{_phases(row.phases):<{phase_w}}{row.event.value:<{event_w}} -> {targets:<{next_w}} {said[0]}")
        lines += [" " * actions_at + more for more in said[1:]]
    return textwrap.indent("\n".join(lines), "    ")


def _phases(phases: tuple[Phase, ...]) -> str:
    if set(phases) == set(Phase) - {Phase.DONE}:
        return "any but DONE"
    return " | ".join(p.name for p in phases)
