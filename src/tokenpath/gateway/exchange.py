"""One request through the gateway: Exchange, the asyncio shell of an ExchangeMachine (exchange_state.py), which
decides every outcome. The shell performs the machine's actions (connect and send, the pool's books, timers,
replies, and on the client's side, through its Downstream (downstream.py): forward the head, end normally or with
the format's error frame) and reports events back: connected, attempt failed, head, body ended, lost, timers, the
client gone or paused. The relay itself (Downstream.upstream_body) never goes through the machine.

One clock, the gateway's, injected, times everything here: the machine's timers and the metrics' seconds."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from tokenpath.gateway.accesslog import log_request
from tokenpath.gateway.auth import Principal
from tokenpath.gateway.bookkeeping import book
from tokenpath.gateway.config import GatewayConfig
from tokenpath.gateway.connections import AttemptFailed, ConnectionPool, UpstreamPool, UpstreamStream
from tokenpath.gateway.downstream import Downstream
from tokenpath.gateway.exchange_state import (
    Abort,
    Action,
    Arm,
    Commit,
    Complete,
    Connect,
    End,
    ExchangeMachine,
    KeepAlive,
    Outstanding,
    Phase,
    RecordFailure,
    RecordSuccess,
    Reply,
    Timer,
)
from tokenpath.gateway.failures import Failure, FailureKind, Outcome, bug_text
from tokenpath.gateway.headers import Headers, client_request_id, new_request_id
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.pools import MemberState, Pool
from tokenpath.gateway.relay import RelayFailure
from tokenpath.gateway.routes import RouteMatch
from tokenpath.serve.http import Request, Response
from tokenpath.serve.timerwheel import TimerWheel, WheelTimer
from tokenpath.wire.client import ResponseHead

log = logging.getLogger("tokenpath.gateway")


class Entry:
    """What admission decided about a request, handed to the handler with it."""

    __slots__ = ("principal", "route", "target")

    def __init__(self, principal: Principal, target: str, route: RouteMatch) -> None:
        self.principal = principal
        self.target = target  # origin-form, as routed: the only target ever forwarded
        self.route = route  # the API format its path is (None for other /v1/ paths), the model a path names


class Gateway(Protocol):
    """What an exchange asks of the gateway that runs it (app.GatewayApp)."""

    cfg: GatewayConfig
    metrics: Metrics
    clock: Callable[[], float]
    timer_wheel: TimerWheel  # on `clock`: every exchange's timers, and the client connections' head timers

    def route(self, request: Request, entry: Entry) -> Pool: ...
    def upstream_headers(self, request: Request, request_id: str, entry: Entry, pool: Pool) -> Headers: ...
    def upstream_target(self, entry: Entry, pool: Pool) -> str: ...
    def connection_pool(self, member: MemberState) -> UpstreamPool: ...
    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...
    def reply_error(self, response: Response, status: int, message: str, code: str) -> None: ...
    def finished(self, exchange: Exchange) -> None: ...


class Exchange:
    """Implements downstream.Control: what the client's side (the upstream connection's Sink) reports."""

    def __init__(self, app: Gateway, response: Response, entry: Entry) -> None:
        self.app = app
        self.response = response  # response.request is the request (its body dropped once the head is forwarded)
        self.entry = entry
        self.clock = app.clock
        self.t_start = self.clock()
        rid = client_request_id(response.request.header(app.cfg.request_id_header))
        self.request_id = rid or new_request_id()
        self.down = Downstream(self, response, entry.route.api, app.metrics, self.clock)
        self.machine: ExchangeMachine | None = None
        self.conn: UpstreamStream | None = None
        self.pool: Pool | None = None
        self.headers: Headers = []
        self.forwarded = entry.target  # the target as it goes upstream (app.upstream_target: a client key left out)
        self.over = False  # the machine is done with it (or it failed as ours): finished once (_finish)
        self.pending_head: ResponseHead | None = None  # the head the machine is deciding on
        self.error: str | None = None
        self.timers = Timers(app.timer_wheel)
        self.members: list[MemberState] = []  # connected to, in order (a new one after the first is a failover)
        response.on_abort = self.client_gone
        response.on_pause = self._pause_upstream
        response.on_resume = self._resume_upstream

    def start(self) -> None:
        """Route, build the upstream request and start the machine, in the call that dispatched the request: the
        rest happens in callbacks (connection, upstream, timers, the client), with no task of its own, so a request
        costs the event loop no iteration to start or to end."""
        app = self.app  # (no local for the request: its body is let go of once the head is forwarded)
        try:
            self.pool = pool = app.route(self.response.request, self.entry)
            self.headers = app.upstream_headers(self.response.request, self.request_id, self.entry, pool)
            self.forwarded = app.upstream_target(self.entry, pool)
            self.machine = self.down.machine = ExchangeMachine(pool, app.cfg.limits, self.clock)
            self._do(self.machine.start())
        except Exception as exc:  # a bug costs this request, never the worker, and never counts against a member
            log.exception("request %s failed", self.request_id)
            self._fail_internally(Failure(FailureKind.INTERNAL, f"internal error: {bug_text(exc)}"))
            self._resolve_done()

    def _finish(self) -> None:
        """Once, when the exchange is over: its books closed, its log line, its reference cycles cut."""
        self.app.finished(self)
        self._log()
        # Exchange, Downstream, Response and the connection refer to each other through callbacks: cut, so that
        # reference counting frees them at once, not the cyclic collector (whose full passes a p99 would show).
        self.response.on_abort = self.response.on_pause = self.response.on_resume = None
        self.conn = self.pending_head = self.down.control = None

    def _do(self, actions: list[Action]) -> None:
        """Perform what the machine decided, in order."""
        machine = self.machine
        if machine is not None and machine.phase is Phase.DONE and not self.over:
            self.down.count_end(machine.outcome)  # before these actions write the last bytes
        for action in actions:
            match action:  # the most frequent first (per streamed request: 4 Arm, 2 Outstanding, then one each)
                case Arm(timer, at):
                    self.timers.arm(timer, at, self._timer_fired)
                case Connect(member, fresh):
                    self._connect_to(member, fresh)
                case Outstanding() | RecordSuccess() | RecordFailure():
                    assert self.pool is not None
                    book(self.pool, action, self.app.metrics, before_head=not self.down.committed)
                case Abort():
                    self._abort_upstream()
                case Commit():
                    assert self.pending_head is not None
                    self.down.forward_head(self.pending_head, self.app.cfg.request_id_header, self.request_id)
                case Reply():
                    self._reply(action)
                case End():
                    self._end_stream(action)
                case KeepAlive():
                    self.down.keep_alive()
                case Complete():
                    self.down.finish_body()
                    conn, self.conn = self.conn, None
                    if conn is not None:
                        conn.release()  # before the last write, which may start the connection's next request
                    self.down.close()
        if machine is not None and machine.phase is Phase.DONE and not self.over:
            self.down.count_end(machine.outcome)  # when these actions were the ones that ended it
            if machine.outcome is not None:
                self.error = self.error or machine.outcome.replace("_", " ")
            self._resolve_done()

    # attempts ----------------------------------------------------------------------------------------------
    def _connect_to(self, member: MemberState, fresh: bool) -> None:
        if self.members and member not in self.members and self.pool is not None:
            self.app.metrics.failovers.labels(self.pool.name).inc()
        self.members.append(member)
        pool = self.app.connection_pool(member)
        idle = pool.take_idle(fresh) if isinstance(pool, ConnectionPool) else None
        if idle is not None:  # a keep-alive connection: used now, no task and no loop iteration to connect
            try:
                self._connected(member, idle)
            except Exception as exc:  # a bug of ours, as _connect_done handles it for a task
                self._internal_error(exc)
            return
        self.app.spawn(self._connect(pool, member, fresh)).add_done_callback(self._connect_done)

    async def _connect(self, pool: UpstreamPool, member: MemberState, fresh: bool) -> None:
        machine = self.machine
        assert machine is not None
        try:
            conn = await pool.acquire(self.app.cfg.limits.connect_timeout_s, fresh)
        except AttemptFailed as exc:
            self._do(machine.attempt_failed(exc.failure))
            return
        self._connected(member, conn)

    def _connected(self, member: MemberState, conn: UpstreamStream) -> None:
        machine = self.machine
        assert machine is not None
        actions = machine.connected()
        if machine.phase is not Phase.WAITING:  # the client left, or time ran out, while we connected
            conn.abort()
            return
        self.conn = conn
        m, request = member.member, self.response.request
        self.down.t_sent = self.clock()
        target = f"{m.base_path}{self.forwarded}"
        conn.send_request(self.down, request.method, m.authority, target, self.headers, request.body)
        self._do(actions)

    def _connect_done(self, task: asyncio.Task[None]) -> None:
        """_connect handles the member's failures (AttemptFailed); anything else it raised is a bug of ours, which
        would otherwise leave the request waiting for its total timeout."""
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            self._internal_error(exc)

    def _internal_error(self, exc: BaseException) -> None:
        event = {"event": "internal_error", "request_id": self.request_id, "error": bug_text(exc)}
        log.error(json.dumps(event), exc_info=exc)
        self._fail_internally(Failure(FailureKind.INTERNAL, f"internal error: {bug_text(exc)}"))

    def _fail_internally(self, failure: Failure) -> None:
        """A bug in our own code (here, or raised by a Sink method inside the upstream connection's callbacks):
        the request fails as the gateway's (500 before the head, the error event after), counted once under
        `internal`, and no member is blamed. After the machine had already decided (a bug while completing), the
        client's response is still ended."""
        self.error = f"internal error ({failure.detail})"
        actions = self.machine.internal_error(failure) if self.machine is not None else []
        if actions:
            self._do(actions)
            return
        self.app.metrics.errors.labels(Outcome.INTERNAL).inc()  # the machine had ended it: counted apart
        if not self.down.committed:
            self.app.reply_error(self.response, 500, "internal gateway error", Outcome.INTERNAL.reply_code)
        elif not self.response.finished:
            self._end_stream(End("internal gateway error", Outcome.INTERNAL))
        self._abort_upstream()
        if not self.over:
            self._resolve_done()

    def _reply(self, reply: Reply) -> None:
        machine = self.machine
        assert machine is not None
        self.error = "; ".join(str(f) for f in machine.failures) or "no member"
        message = f"{reply.message} (request id {self.request_id}, {machine.attempts} attempt(s))"
        self.app.reply_error(self.response, reply.status, message, reply.code)
        self.down.status = reply.status

    def _end_stream(self, end: End) -> None:
        self.error = f"{end.message}: {end.detail}" if end.detail else end.message
        self._abort_upstream()
        if self.down.committed:
            self.down.end_with_error(end)
        else:  # the drain deadline, before the head
            self.app.reply_error(self.response, 502, end.message, end.outcome.reply_code)

    def _abort_upstream(self) -> None:
        self.timers.cancel(Timer.FIRST_BYTE)
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.abort()

    # what the client's side reports (downstream.Control) ---------------------------------------------------
    def upstream_head(self, head: ResponseHead) -> None:
        if self.machine is not None:
            self.pending_head = head
            self._do(self.machine.head(head.status))  # Commit forwards it; a 5xx fails over before any byte goes out
            self.pending_head = None

    def upstream_complete(self) -> None:
        machine = self.machine
        if machine is not None:
            cut = self.down.body_ended() if machine.phase is Phase.STREAMING else None
            self._do(machine.upstream_cut(cut) if cut is not None else machine.upstream_ended())

    def upstream_lost(self, failure: Failure) -> None:
        if failure.kind is FailureKind.INTERNAL:
            self._fail_internally(failure)
            return
        conn = self.conn
        stale = conn is not None and conn.reused and not conn.got_bytes
        if self.machine is not None:
            self._do(self.machine.upstream_lost(failure, stale))

    def relay_failed(self, failure: RelayFailure) -> None:
        """An upstream frame outgrew what the relay holds, or its framing broke (an event-stream prelude whose CRC
        fails): the client gets every whole frame before it, then the error frame (it would have had to hold the
        frame whole too; the gateway will not hold it forever)."""
        if self.machine is not None:
            if failure.broken is not None:
                self._do(self.machine.malformed_frame(failure.broken))
            else:
                self._do(self.machine.event_too_large(failure.max_bytes, failure.held))

    # the client ----------------------------------------------------------------------------------------------
    def client_gone(self) -> None:
        """The client left: abort the upstream request now, so the model stops generating."""
        self.error = self.error or "client disconnected"
        if self.machine is not None:
            self._do(self.machine.client_gone())
        else:
            self._resolve_done()

    def shutdown(self) -> None:
        """The gateway's drain deadline passed: end what is still open."""
        if self.over:
            return
        actions = self.machine.shutdown() if self.machine is not None else []
        if actions:
            self._do(actions)
            return
        self.down.count_end(Outcome.SHUTDOWN)  # not started, or ended by the machine but not yet resolved
        self._end_stream(End("the gateway is shutting down", Outcome.SHUTDOWN))
        self._resolve_done()

    def _pause_upstream(self) -> None:
        if self.machine is not None:
            self.machine.client_paused()
        if self.conn is not None:
            self.conn.pause()

    def _resume_upstream(self) -> None:
        if self.machine is not None:
            self.machine.client_resumed()
        if self.conn is not None:
            self.conn.resume()

    # timers and the end --------------------------------------------------------------------------------------
    def _timer_fired(self, which: Timer) -> None:
        self.timers.fired(which)
        if self.machine is not None:
            self._do(self.machine.timer(which))

    def _resolve_done(self) -> None:
        self.timers.stop()
        first, self.over = not self.over, True
        self.down.count_relayed()
        if first:
            self._finish()

    def _log(self) -> None:
        ms = (self.clock() - self.t_start) * 1000
        request, status = self.response.request, self.down.status
        log_request(self.request_id, request, status, self.pool, self.members, self.machine, self.error, ms)


class Timers:
    """The machine's timers (its Arm actions) on the worker's timer wheel: one of each kind at a time, `at` on the
    exchange's clock (the wheel's). Only an armed timer refers to the callback (cancelled, it lets go of it)."""

    __slots__ = ("armed", "wheel")

    def __init__(self, wheel: TimerWheel) -> None:
        self.wheel = wheel
        self.armed: dict[Timer, WheelTimer] = {}

    def arm(self, which: Timer, at: float, fire: Callable[[Timer], None]) -> None:
        old = self.armed.get(which)
        if old is not None:
            self.wheel.cancel(old)
        self.armed[which] = self.wheel.arm(at, fire, which)

    def fired(self, which: Timer) -> None:
        self.armed.pop(which, None)

    def cancel(self, which: Timer) -> None:
        timer = self.armed.pop(which, None)
        if timer is not None:
            self.wheel.cancel(timer)

    def stop(self) -> None:
        for timer in self.armed.values():
            self.wheel.cancel(timer)
        self.armed.clear()
