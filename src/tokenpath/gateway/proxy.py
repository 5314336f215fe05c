"""The gateway's request path: admit on the head (method, target, limits, credentials), route to a pool, pick a
member, forward, relay, fail over.

One Exchange per request. The control flow (attempts, failover, timeouts) is a coroutine; the relay itself is
callbacks from the upstream connection's `data_received`, which write each upstream read downstream at once:
payload bytes untouched, only the HTTP framing redone for the client's connection. Two exceptions, both about the
stream format's frames (SSE events, event-stream messages, NDJSON lines; gateway.streamformat picks the format at
the head, by route and Content-Type): the bytes of a frame an upstream read leaves unfinished wait for the read
that finishes it (so a stream cut mid-frame never hands the client half a frame, and its error frame parses whole),
and the first frames are classified until the first content frame, which is the upstream's TTFT."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Awaitable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry

from tokenpath.gateway.auth import Authenticator, AuthError, KeyNeeded, Principal
from tokenpath.gateway.config import GatewayConfig, PoolConfig
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
from tokenpath.gateway.h2upstream import H2UpstreamPool, H2UpstreamStream
from tokenpath.gateway.link import AttemptFailed
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.pools import MemberState, Pool, Router
from tokenpath.gateway.relay import Relay
from tokenpath.gateway.routes import SERVED, RouteMatch, match_route
from tokenpath.gateway.streamformat import CREDENTIAL_HEADERS, StreamFormat, for_response, upstream_credential
from tokenpath.gateway.target import BadTarget, origin_form
from tokenpath.gateway.tls import client_context
from tokenpath.gateway.upstream import ConnectionPool, UpstreamConnection
from tokenpath.serve.admission import Admission, Admitted, BodyBudget, Refusal
from tokenpath.serve.http import Request, Response
from tokenpath.wire.apis import Api
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.errorshape import error_reply
from tokenpath.wire.framing import Framing

log = logging.getLogger("tokenpath.gateway")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "host",
        "authorization",
        "proxy-authorization",
        "expect",
    }
)
FORWARD_DROP = HOP_BY_HOP | {"x-forwarded-for", "x-forwarded-proto"}  # rewritten: the chain plus this client
RESPONSE_DROP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "trailer", "upgrade"}
)
REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# What nginx forwards by default (ignore_invalid_headers on, underscores_in_headers off): other names are dropped.
HEADER_NAME_OK = re.compile(r"[A-Za-z0-9-]+\Z")
HEALTH_PATH = "/_tokenpath/health"
REFUSED_METHODS = frozenset({"TRACE", "TRACK", "CONNECT"})  # TRACE echoes credentials back (cross-site tracing)
KEY_WAIT_S = 7.0  # a request waiting on a JWKS fetch gets its answer by then (the fetch's own deadline is 5 s)


class Entry:
    """What admission decided about a request, handed to the handler with it."""

    __slots__ = ("principal", "route", "target")

    def __init__(self, principal: Principal, target: str, route: RouteMatch) -> None:
        self.principal = principal
        self.target = target  # origin-form, as routed: the only target ever forwarded
        self.route = route  # the API format its path is (None for other /v1/ paths), the model a path names


class GatewayApp:
    """The HTTP handler: `app(request, response)` for each request the downstream connection parses."""

    def __init__(self, cfg: GatewayConfig, auth: Authenticator, registry: CollectorRegistry | None = None) -> None:
        self.cfg = cfg
        self.auth = auth
        self.metrics = Metrics(registry or CollectorRegistry())
        self.pools = [Pool(p, cfg.health) for p in cfg.pools]
        self.router = Router(self.pools, cfg.auth.pool_claim)
        self.connections: dict[int, ConnectionPool | H2UpstreamPool] = {}
        self.forward_drop = FORWARD_DROP | {cfg.request_id_header.lower()}  # ours replaces the client's
        self.forwarded_proto = "https" if cfg.tls_cert else "http"  # the scheme the client reached us by
        self.active: set[Exchange] = set()
        self.draining = False
        limit = cfg.limits.max_body_bytes_in_flight
        self.body_budget = BodyBudget(  # the request bodies this worker holds, read by serve/http.py and serve/h2.py
            limit,
            Refusal(
                503,
                f"gateway holds its limit of {limit} bytes of request bodies; retry shortly",
                "overloaded",
                (("Retry-After", str(cfg.limits.retry_after_s)),),
            ),
            self._body_refused,
        )
        self._idle = asyncio.Event()  # set whenever no exchange is active (drain waits on it)
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        for pool in self.pools:
            tls = _tls_context(pool.cfg)
            on_handshake = functools.partial(self._count_handshake, pool.name)
            for m in pool.members:
                member = m.member
                kind = H2UpstreamPool if pool.cfg.protocol == "h2" else ConnectionPool
                self.connections[id(m)] = kind(member.host, member.port, tls if member.tls else None, on_handshake)
                self.metrics.member_healthy.labels(pool.name, m.url).set(1)

    def _body_refused(self) -> None:
        self.metrics.errors.labels("bodies_in_flight").inc()
        self.metrics.requests.labels("503").inc()

    def error_api(self, path: str) -> Api | None:
        """The API format a path is, for the shape of an error answered before its response head (serve/http.py,
        serve/h2.py ask it for the errors they answer themselves: a body over its limit, a malformed request)."""
        try:
            route = match_route(origin_form(path))
        except BadTarget:
            return None
        return route.api if route is not None else None

    def _count_handshake(self, pool: str, resumed: bool) -> None:
        self.metrics.tls_handshakes.labels(pool, "true" if resumed else "false").inc()

    # admission: on the request's head, before its body is read ---------------------------------------------
    def admit(self, head: Request) -> Admission | Awaitable[Admission]:
        if head.path == HEALTH_PATH and head.method == "GET":
            return self._admitted(head, None)
        if head.method in REFUSED_METHODS:
            return self._refuse(
                405,
                f"{head.method} is not allowed",
                "method_not_allowed",
                (("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),),
                self.error_api(head.path),
            )
        try:
            target = origin_form(head.target)
        except BadTarget as exc:
            return self._refuse(400, str(exc), "bad_request_target")
        route = match_route(target)
        if route is None:
            return self._refuse(404, f"no route: the gateway serves {SERVED}", "not_found")
        if self.draining or len(self.active) >= self.cfg.limits.max_streams:
            return self._overloaded(route.api)
        authorization = head.header("authorization")
        try:
            principal = self.auth.check(authorization)
        except AuthError as exc:
            return self._unauthorized(head, str(exc), route.api)
        except KeyNeeded:
            return self._admit_after_key_fetch(head, authorization, target, route)
        return self._admitted(head, Entry(principal, target, route))

    async def _admit_after_key_fetch(
        self, head: Request, authorization: str | None, target: str, route: RouteMatch
    ) -> Admission:
        try:
            principal = await asyncio.wait_for(self.auth.authenticate(authorization), KEY_WAIT_S)
        except AuthError as exc:
            return self._unauthorized(head, str(exc), route.api)
        except TimeoutError:
            self.metrics.errors.labels("jwks_unavailable").inc()
            return self._refuse(
                503,
                "signing keys are unavailable; retry shortly",
                "auth_unavailable",
                (("Retry-After", str(self.cfg.limits.retry_after_s)),),
                route.api,
            )
        return self._admitted(head, Entry(principal, target, route))

    def _admitted(self, head: Request, entry: Entry | None) -> Admission:
        """Admit a request; its body's bytes are held against the worker's body budget as they arrive (serve/http.py,
        serve/h2.py). One whose Content-Length alone would not fit in what the budget has left is refused now, before
        its body is sent (a body of unknown length, or one announced and never sent, costs nothing here)."""
        length = head.header("content-length")
        if length is not None and length.isdigit() and int(length) > self.body_budget.room():
            self._body_refused()
            return dataclasses.replace(self.body_budget.refusal, api=entry.route.api if entry is not None else None)
        return Admitted(entry)

    def _refuse(
        self,
        status: int,
        message: str,
        code: str,
        headers: tuple[tuple[str, str], ...] = (),
        api: Api | None = None,
    ) -> Refusal:
        self.metrics.requests.labels(str(status)).inc()
        return Refusal(status, message, code, headers, api)

    def _overloaded(self, api: Api | None) -> Refusal:
        limits = self.cfg.limits
        reason = "shutting down" if self.draining else f"at its limit of {limits.max_streams} streams"
        self.metrics.errors.labels("overloaded").inc()
        return self._refuse(
            503, f"gateway {reason}; retry shortly", "overloaded", (("Retry-After", str(limits.retry_after_s)),), api
        )

    def _unauthorized(self, head: Request, reason: str, api: Api | None) -> Refusal:
        self.metrics.errors.labels("unauthorized").inc()
        rid = head.header(self.cfg.request_id_header)
        log.warning(
            json.dumps(
                {
                    "request_id": rid if rid and REQUEST_ID_OK.match(rid) else None,
                    "method": head.method,
                    "path": head.path,
                    "status": 401,
                    "error": f"unauthorized: {reason}",
                }
            )
        )
        challenge = 'Bearer realm="tokenpath"'
        if head.header("authorization"):
            challenge += ', error="invalid_token"'
        return self._refuse(
            401, "invalid or missing bearer token", "invalid_api_key", (("WWW-Authenticate", challenge),), api
        )

    # the handler: a request whose head was admitted and whose body is in ------------------------------------
    def __call__(self, request: Request, response: Response) -> None:
        if request.path == HEALTH_PATH and request.method == "GET":
            health: dict[str, object] = {"status": "draining" if self.draining else "ok", "active": len(self.active)}
            if self.auth.jwks is not None:
                health["jwks"] = self.auth.jwks.state()
            response.send_json(503 if self.draining else 200, health)  # a load balancer stops sending here
            return
        entry = response.context
        assert isinstance(entry, Entry), "every request but the health check is admitted with an Entry"
        if self.draining or len(self.active) >= self.cfg.limits.max_streams:  # the body took a while to arrive
            refusal = self._overloaded(entry.route.api)
            response.send_error(error_reply(refusal.api, 503, refusal.message, refusal.code), refusal.headers)
            return
        exchange = Exchange(self, request, response, entry)
        self.active.add(exchange)
        self._idle.clear()
        self.metrics.streams_active.inc()
        task = asyncio.get_running_loop().create_task(exchange.run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def finished(self, exchange: Exchange) -> None:
        if exchange in self.active:
            self.active.discard(exchange)
            self.metrics.streams_active.dec()
            if not self.active:
                self._idle.set()

    def reply_error(self, response: Response, status: int, message: str, code: str) -> None:
        """An error answered before the response head, in the shape of the request's API format."""
        if response.finished or response.client_gone:
            return
        self.metrics.requests.labels(str(status)).inc()  # before the answer goes out, as in upstream_complete
        entry = response.context
        api = entry.route.api if isinstance(entry, Entry) else None
        response.send_error(error_reply(api, status, message, code))

    def connection_pool(self, member: MemberState) -> ConnectionPool | H2UpstreamPool:
        return self.connections[id(member)]

    def set_health(self, pool: Pool, member: MemberState) -> None:
        healthy = member.healthy(pool.clock())
        self.metrics.member_healthy.labels(pool.name, member.url).set(1 if healthy else 0)

    async def drain(self, deadline_s: float) -> int:
        """Stop taking requests; wait for open streams up to the deadline. Returns how many were cut off."""
        self.draining = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), deadline_s)
        cut = len(self.active)
        for exchange in list(self.active):
            exchange.fail_stream("the gateway is shutting down", "shutdown")
        for pool in self.connections.values():
            pool.close()
        return cut


def connection_tokens(headers: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The header names every Connection header lists (RFC 9110 7.6.1: hop-by-hop, never forwarded)."""
    return frozenset(t.strip().lower() for k, v in headers if k.lower() == "connection" for t in v.split(","))


def _tls_context(pool: PoolConfig) -> Any:
    if not any(m.tls for m in pool.members):
        return None
    alpn = ["h2", "http/1.1"] if pool.protocol == "h2" else ["http/1.1"]
    return client_context(pool.ca_file, pool.client_cert, pool.client_key, alpn)


class Exchange:
    """One request through the gateway: the asyncio shell of an ExchangeMachine (exchange_state.py), which decides
    every outcome; this class performs its actions (connect, send, forward, reply, end, arm timers) and reports
    what happened. Implements upstream.Sink; the relay itself (upstream_body) never goes through the machine."""

    def __init__(self, app: GatewayApp, request: Request, response: Response, entry: Entry) -> None:
        self.app = app
        self.request = request
        self.response = response
        self.entry = entry
        self.loop = asyncio.get_running_loop()
        rid = request.header(app.cfg.request_id_header)
        self.request_id = rid if rid and REQUEST_ID_OK.match(rid) else secrets.token_hex(8)
        self.machine: ExchangeMachine | None = None
        self.conn: UpstreamConnection | H2UpstreamStream | None = None
        self.pool: Pool | None = None
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.committed = False  # the client has the head: no more failover
        self.pending_head: ResponseHead | None = None  # the head the machine is deciding on
        self.framing = Framing.CHUNKED  # how the body is framed to the client (decided by the server core)
        self.upstream_framing = Framing.CHUNKED  # how the upstream framed it (HTTP/2: CLOSE never, END_STREAM ends)
        self.bodiless = False
        self.stream: StreamFormat | None = None  # the response's stream format (None: not a token stream)
        # The relay rules (gateway.relay: framing, whole frames only, counting, first token), set at the head.
        self.relay: Relay | None = None
        self.out: list[bytes] = []
        self.status = 0
        self.error: str | None = None
        self.end_counted = False  # an abnormal end is counted in the metrics once (_count_end)
        self.headers: list[tuple[str, str]] = []
        self.t_start = time.perf_counter()
        self.t_sent = 0.0
        self.t_first_in: float | None = None  # the first body byte from the upstream
        self.added_observed = False
        self.ttft_observed = False
        self.failure_reported = False
        self.timers: dict[Timer, asyncio.TimerHandle] = {}
        self.members: list[MemberState] = []  # connected to, in order (a new one after the first is a failover)
        response.on_abort = self.client_gone
        response.on_pause = self._pause_upstream
        response.on_resume = self._resume_upstream

    # control flow ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        app = self.app
        try:
            pool = app.router.route(self._model(), self.entry.principal.claims)
            self.pool = pool
            self.headers = self._upstream_headers()
            self.machine = ExchangeMachine(pool, app.cfg.limits, self.loop.time)
            self._do(self.machine.start())
            await self.done
        except Exception as exc:  # a bug costs this request, never the worker, and never counts against a member
            log.exception("request %s failed", self.request_id)
            self._fail_internally(Failure(FailureKind.INTERNAL, f"internal error: {exc!r}"))
        finally:
            self._stop_timers()
            app.finished(self)
            self._log()
            self._break_cycles()

    def _do(self, actions: list[Action]) -> None:
        """Perform what the machine decided, in order."""
        machine = self.machine
        if machine is not None and machine.phase is Phase.DONE and not self.done.done():
            self._count_end(machine.outcome)  # before these actions write the last bytes
        for action in actions:
            kind = type(action)
            if kind is Connect:
                assert isinstance(action, Connect)
                if self.members and action.member not in self.members and self.pool is not None:
                    self.app.metrics.failovers.labels(self.pool.name).inc()
                self.members.append(action.member)
                task = self.loop.create_task(self._connect(action.member, action.fresh))
                self.app._tasks.add(task)
                task.add_done_callback(self.app._tasks.discard)
                task.add_done_callback(self._connect_done)
            elif kind is Abort:
                self._abort_upstream()
            elif kind is Record:
                assert isinstance(action, Record)
                self._record(action)
            elif kind is Commit:
                assert self.pending_head is not None
                self._forward_head(self.pending_head)
            elif kind is Arm:
                assert isinstance(action, Arm)
                old = self.timers.pop(action.timer, None)
                if old is not None:
                    old.cancel()
                self.timers[action.timer] = self.loop.call_at(action.at, self._timer_fired, action.timer)
            elif kind is Reply:
                assert isinstance(action, Reply)
                self._reply(action)
            elif kind is End:
                assert isinstance(action, End)
                self._end_stream(action)
            elif kind is Complete:
                self._complete()
        machine = self.machine
        if machine is not None and machine.phase is Phase.DONE and not self.done.done():
            self._count_end(machine.outcome)  # when these actions were the ones that ended it
            if machine.outcome is not None:
                self.error = self.error or machine.outcome.replace("_", " ")
            self._resolve_done()

    def _connect_done(self, task: asyncio.Task[None]) -> None:
        """_connect handles the member's failures (AttemptFailed); anything else it raised is a bug of ours, which
        would otherwise leave the request waiting for its total timeout."""
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            log.error(
                json.dumps({"event": "internal_error", "request_id": self.request_id, "error": repr(exc)}), exc_info=exc
            )
            self._fail_internally(Failure(FailureKind.INTERNAL, f"internal error: {exc!r}"))

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
        self.app.metrics.errors.labels("internal").inc()  # the machine had ended it: its outcome is counted apart
        if not self.committed:
            self.app.reply_error(self.response, 500, "internal gateway error", "internal_error")
        elif not self.response.finished:
            self._end_stream(End("internal gateway error", "internal"))
        self._abort_upstream()
        if not self.done.done():
            self._resolve_done()

    def _count_end(self, outcome: str | None) -> None:
        """Once per request, when it ends other than normally: one `errors_total` reason (the outcome), and, when
        the client already has the head, its status in `requests_total` (before the head, reply_error counts the
        error status; a normal end is counted by _complete). Before the last bytes go out: a client that has read
        its answer finds it in /metrics."""
        if self.end_counted:
            return
        self.end_counted = True
        if outcome is None:
            return
        metrics = self.app.metrics
        metrics.errors.labels(outcome).inc()
        if self.committed:
            metrics.requests.labels(str(self.status)).inc()

    async def _connect(self, member: MemberState, fresh: bool) -> None:
        machine = self.machine
        assert machine is not None
        try:
            conn = await self.app.connection_pool(member).acquire(self.app.cfg.limits.connect_timeout_s, fresh)
        except AttemptFailed as exc:
            self._do(machine.attempt_failed(exc.failure))
            return
        actions = machine.connected()
        if machine.phase is not Phase.WAITING:  # the client left, or time ran out, while we connected
            conn.abort()
            return
        self.conn = conn
        m = member.member
        self.t_sent = time.perf_counter()
        conn.send_request(
            self, self.request.method, m.authority, f"{m.base_path}{self.entry.target}", self.headers, self.request.body
        )
        self._do(actions)

    def _record(self, record: Record) -> None:
        pool = self.pool
        assert pool is not None
        failure = record.failure
        # An attempt that failed before the head counts by its kind (a 5xx by its status, in upstream_head); a
        # failure after it ends the request, counted once by the outcome (_count_end), not twice.
        if failure is not None and failure.kind is not FailureKind.UPSTREAM_5XX and not self.committed:
            self.app.metrics.errors.labels(failure.kind.value).inc()
        if record.ejected:
            reason = failure.kind.value if failure else None
            event = {
                "event": "member_ejected",
                "pool": pool.name,
                "member": record.member.url,
                "reason": reason,
                "cooldown_s": pool.health.cooldown_s,
            }
            log.warning(json.dumps(event))
        self.app.set_health(pool, record.member)

    def _reply(self, reply: Reply) -> None:
        machine = self.machine
        assert machine is not None
        self.error = "; ".join(str(f) for f in machine.failures) or "no member"
        message = f"{reply.message} (request id {self.request_id}, {machine.attempts} attempt(s))"
        self.app.reply_error(self.response, reply.status, message, reply.code)
        self.status = reply.status

    def _abort_upstream(self) -> None:
        timer = self.timers.pop(Timer.FIRST_BYTE, None)
        if timer is not None:
            timer.cancel()
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.abort()

    def _timer_fired(self, which: Timer) -> None:
        self.timers.pop(which, None)
        if self.machine is not None:
            self._do(self.machine.timer(which))

    def _upstream_headers(self) -> list[tuple[str, str]]:
        """Headers sent upstream: the client's, minus hop-by-hop (and those its Connection headers name), names
        nginx ignores (anything but letters, digits and '-': `X_Forwarded_For` would reach a CGI-style backend as
        X-Forwarded-For) and (when the gateway checked them) its credentials, plus ours. The pool's key goes in the
        header the route's API takes it in; it replaces every credential header the client sent."""
        key = self._upstream_key()
        drop = self.app.forward_drop | connection_tokens(self.request.headers)
        if key:
            drop |= CREDENTIAL_HEADERS  # the client's x-api-key must not ride along beside the pool's own
        headers = [(k, v) for k, v in self.request.headers if k.lower() not in drop and HEADER_NAME_OK.match(k)]
        if self.request.peer:
            seen = self.request.header("x-forwarded-for")
            headers.append(("X-Forwarded-For", f"{f'{seen}, ' if seen else ''}{self.request.peer}"))
            headers.append(("X-Forwarded-Proto", self.app.forwarded_proto))
        headers.append(("Content-Length", str(len(self.request.body))))
        headers.append((self.app.cfg.request_id_header, self.request_id))
        client_credentials = self.request.header("authorization")
        if key:
            headers.append(upstream_credential(self.entry.route.api, key))
        elif client_credentials and not self.app.auth.enabled:  # --no-auth: the upstream checks the client's key
            headers.append(("Authorization", client_credentials))
        return headers

    def _upstream_key(self) -> str | None:
        env = self.pool.cfg.api_key_env if self.pool else None
        if not env:
            return None
        return os.environ.get(env) or None

    def _model(self) -> str | None:
        if not self.app.router.needs_model:
            return None
        if self.entry.route.model is not None:
            return self.entry.route.model  # Gemini and Bedrock name it in the path (their bodies do not)
        if not self.request.body:
            return None
        try:
            body = json.loads(self.request.body)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes ([[[[...)
            return None  # malformed JSON: routed as a request without a model; the upstream answers its own 400
        model = body.get("model") if isinstance(body, dict) else None
        return model if isinstance(model, str) else None

    # upstream.Sink: called from the upstream connection's data_received -----------------------------------
    def upstream_head(self, head: ResponseHead) -> None:
        machine = self.machine
        if machine is None:
            return
        if head.status >= 500 and machine.phase is Phase.WAITING:
            self.app.metrics.errors.labels(f"upstream_{head.status}").inc()
        if self.pool is not None:
            self.app.metrics.upstream_head.labels(self.pool.name).observe(time.perf_counter() - self.t_sent)
        self.pending_head = head
        self._do(machine.head(head.status))  # Commit forwards it; a 5xx fails over before any byte goes out
        self.pending_head = None

    def _forward_head(self, head: ResponseHead) -> None:
        self.committed = True
        self.upstream_framing = head.framing
        self._drop_body()
        self.status = head.status
        out_headers: list[tuple[str, str]] = []
        length: int | None = None
        encoded = False
        drop = RESPONSE_DROP | connection_tokens(head.headers)  # hop-by-hop, also those the upstream names
        for name, value in head.headers:
            lname = name.lower()
            if lname == "content-length" and head.framing in (Framing.LENGTH, Framing.NONE):  # else not the length
                length = int(value)
            elif lname == "content-type":
                self.stream = for_response(self.entry.route.api, value)
            elif lname == "content-encoding" and value.strip().lower() != "identity":
                encoded = True
            if lname not in drop:
                out_headers.append((name, value))
        out_headers.append((self.app.cfg.request_id_header, self.request_id))
        if encoded:
            # Frames are in the decoded bytes; the relay passes the encoded ones on untouched, read by read. A cut at
            # "frame boundaries" of gzip bytes would hold a stream until its end (or past the frame limit).
            self.stream = None
        if self.stream is not None and head.framing is Framing.LENGTH:
            # A token stream is re-framed (chunked; close-delimited for an HTTP/1.0 client), never announced with the
            # upstream's length: a failure mid-stream ends it with an error frame, which must not make the client read
            # more bytes than a Content-Length said.
            length = None
        response = self.response
        if head.framing is Framing.NONE:
            if length is not None:  # HEAD: the length of the body a GET would get
                out_headers.append(("Content-Length", str(length)))
            self.out.append(response.start_without_body(head.status, out_headers))
        else:
            self.out.append(response.start(head.status, out_headers, length))
        self.framing = response.framing or Framing.NONE
        self.bodiless = self.framing is Framing.NONE
        self.relay = Relay(self.stream, self.framing is Framing.CHUNKED)

    def _drop_body(self) -> None:
        """The client is getting the head: no failover can resend the body now, so its memory and its share of the
        worker's body budget are given back at once, not when the stream ends (a long stream would hold both)."""
        if self.request.body:
            self.request = dataclasses.replace(self.request, body=b"")
            self.response.request = self.request
        self.response.release_admission()

    def upstream_body(self, data: bytes) -> None:
        # The hot path: once per upstream read. The relay decides; news (first byte, first token, a frame it cannot
        # hold) is one flag, handled off this path.
        relay = self.relay
        if relay is None or self.bodiless:
            return  # the body of a 5xx we are failing over from, or bytes a bodiless response must not carry
        out = relay.feed(data)
        if out:
            self.out.append(out)
        if relay.news:
            self._relay_news(relay)

    def _relay_news(self, relay: Relay) -> None:
        relay.news = False
        now = time.perf_counter()
        if self.t_first_in is None:
            self.t_first_in = now
        if relay.first_token and not self.ttft_observed:
            self.ttft_observed = True
            self._observe_ttft(now)
        failure = relay.failure
        if failure is not None and self.machine is not None and not self.failure_reported:
            # An upstream frame outgrew what the relay holds, or its framing broke (an event-stream prelude whose
            # CRC fails): the client gets every whole frame before it, then the error frame (it would have had to
            # hold the frame whole too; the gateway will not hold it forever).
            self.failure_reported = True
            if failure.broken is not None:
                self._do(self.machine.malformed_frame(failure.broken))
            else:
                self._do(self.machine.event_too_large(failure.max_bytes, failure.held))

    def upstream_read_done(self) -> None:
        out = self.out
        if out:
            if len(out) == 1 and self.added_observed:  # the token-stream read: one piece, nothing to observe
                self.response.write(out.pop())
            else:
                self._flush()
        machine = self.machine
        if machine is not None:
            machine.last_read = self.loop.time()  # ExchangeMachine.read(), inlined: once per read

    def upstream_complete(self) -> None:
        machine = self.machine
        if machine is None:
            return
        relay = self.relay
        if relay is not None and machine.phase is Phase.STREAMING:
            rest, cut = relay.finish(self.upstream_framing is Framing.CLOSE)
            if cut is not None:
                self._do(machine.upstream_cut(cut))
                return
            if rest:  # a last NDJSON line the body's end completes
                self.out.append(rest)
        self._do(machine.upstream_ended())

    def _complete(self) -> None:
        self.out.append(self.response.end_bytes())
        # Counted before the last bytes go out: a client that has read its whole answer finds it in /metrics.
        self.app.metrics.requests.labels(str(self.status)).inc()
        self._flush()
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.release()
        if self.framing is Framing.CLOSE:
            self.response.close_connection()
        else:
            self.response.write(b"", last=True)

    def upstream_lost(self, failure: Failure) -> None:
        if failure.kind is FailureKind.INTERNAL:
            self._fail_internally(failure)
            return
        conn = self.conn
        stale = conn is not None and conn.reused and not conn.got_bytes
        if self.machine is not None:
            self._do(self.machine.upstream_lost(failure, stale))

    # the client side ------------------------------------------------------------------------------------------
    def _end_stream(self, end: End) -> None:
        """After the first byte there is no failover: end the stream with an explicit error frame in the format's
        own shape (never a fake finish_reason, [DONE] or message_stop) and close the client's connection. The
        bytes of an unfinished frame are dropped, so the error frame is the next thing the client parses, whole."""
        self.error = f"{end.message}: {end.detail}" if end.detail else end.message
        self._abort_upstream()
        relay = self.relay
        if relay is not None:
            relay.drop_held()
        if not self.committed:
            self.app.reply_error(self.response, 502, end.message, end.code)
        elif not self.response.client_gone:
            # The error event only where the body's end is ours to say (chunked, or close-delimited): never past an
            # announced Content-Length. A body of announced length is cut short instead, as nginx does: the client
            # sees fewer bytes than announced, then the close.
            ours = self.framing in (Framing.CHUNKED, Framing.CLOSE)
            if relay is not None and relay.stream is not None and end.client_reads and ours:
                event = relay.error_frame(end.message, end.code)
                self.out.append(self.response.frame(event) + self.response.end_bytes())
            self._flush()
            self.response.close_connection()

    def fail_stream(self, message: str, code: str) -> None:
        """The gateway is shutting down (drain deadline): end what is still open."""
        if self.done.done():
            return
        machine = self.machine
        if machine is not None and machine.phase is not Phase.DONE:
            machine.phase = Phase.DONE
            machine.outcome = code
        self._count_end(code)
        self._end_stream(End(message, code))
        self._resolve_done()

    def client_gone(self) -> None:
        """The client left: abort the upstream request now, so the model stops generating."""
        self.error = self.error or "client disconnected"
        if self.machine is not None:
            self._do(self.machine.client_gone())
        else:
            self._resolve_done()

    # internals ---------------------------------------------------------------------------------------------
    def _observe_ttft(self, at: float) -> None:
        seconds = at - self.t_sent
        member = self.machine.member if self.machine is not None else None
        if member is not None:
            member.observe_ttft(seconds)  # p2c_ewma routes on the time to the first token
        if self.pool is not None:
            self.app.metrics.upstream_ttft.labels(self.pool.name).observe(seconds)

    def _flush(self) -> None:
        data = b"".join(self.out) if len(self.out) > 1 else self.out[0] if self.out else b""
        self.out.clear()
        if data:
            self.response.write(data)
        if not self.added_observed and self.t_first_in is not None:
            self.added_observed = True
            self.app.metrics.added_ttft.observe(time.perf_counter() - self.t_first_in)

    def _break_cycles(self) -> None:
        """Exchange <-> Response <-> connection refer to each other through callbacks. Cutting the links when the
        request ends lets reference counting free them at once, instead of leaving garbage for the cyclic
        collector, whose full passes over a busy heap are the millisecond pauses a p99 would show."""
        self.response.on_abort = self.response.on_pause = self.response.on_resume = None
        self.conn = None
        self.pending_head = None

    def _resolve_done(self) -> None:
        self._stop_timers()
        if not self.done.done():
            self.done.set_result(None)
        relay = self.relay
        if relay is not None:
            metrics = self.app.metrics
            if relay.frames:
                metrics.frames.inc(relay.frames)
            if relay.bytes:
                metrics.bytes.inc(relay.bytes)
            relay.frames = relay.bytes = 0

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

    def _stop_timers(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()

    def _log(self) -> None:
        machine = self.machine
        record: dict[str, Any] = {
            "request_id": self.request_id,
            "method": self.request.method,
            "path": self.request.path,
            "status": self.status or None,
            "pool": self.pool.name if self.pool else None,
            "member": self.members[-1].url if self.members else None,  # the one that served (or was tried last)
            "attempts": machine.attempts if machine else 0,
            "ms": round((time.perf_counter() - self.t_start) * 1000, 2),
        }
        failures = [str(f) for f in machine.failures] if machine else []
        if failures:
            record["attempt_failures"] = failures  # logged even when a later attempt succeeded
        if self.error or failures:
            if self.error:
                record["error"] = self.error
            log.warning(json.dumps(record))
        elif log.isEnabledFor(logging.INFO):
            log.info(json.dumps(record))
