"""The gateway's request path: admit on the head (method, target, limits, credentials), route to a pool, and hand
the request to an Exchange (exchange.py), which picks a member, forwards, relays and fails over."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from prometheus_client import CollectorRegistry

from tokenpath.gateway.auth import Authenticator, AuthError, KeyNeeded
from tokenpath.gateway.bookkeeping import health_gauge
from tokenpath.gateway.config import GatewayConfig, check_pool_keys
from tokenpath.gateway.connections import UpstreamPool, open_member_pools
from tokenpath.gateway.exchange import Entry, Exchange
from tokenpath.gateway.failures import Outcome
from tokenpath.gateway.headers import (
    FORWARD_DROP,
    Forwarding,
    Headers,
    client_request_id,
    forwarded_target,
    new_request_id,
    upstream_headers,
)
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.pools import MemberState, Pool, Router
from tokenpath.gateway.routes import SERVED, RouteMatch, match_route
from tokenpath.gateway.target import BadTarget, origin_form
from tokenpath.gateway.wsupgrade import WsUpgrade
from tokenpath.serve.admission import Admission, Admitted, BodyBudget, Refusal
from tokenpath.serve.http import Request, Response
from tokenpath.serve.timerwheel import LoopWheel, TimerWheel
from tokenpath.wire import jsonbytes
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.errorshape import error_reply
from tokenpath.wire.websocket import OfferRefused, is_websocket_offer, websocket_key

log = logging.getLogger("tokenpath.gateway")

HEALTH_PATH = "/_tokenpath/health"
REFUSED_METHODS = frozenset({"TRACE", "TRACK", "CONNECT"})  # TRACE echoes credentials back (cross-site tracing)
# HTTP/2's WebSocket (RFC 8441 extended CONNECT) is not carried: the listener never offers it (no
# SETTINGS_ENABLE_CONNECT_PROTOCOL), and a CONNECT that tries it anyway is told where WebSocket mode is
CONNECT_NOTE = "; WebSocket is carried over HTTP/1.1 only (GET with Upgrade: websocket), not HTTP/2's extended CONNECT"
KEY_WAIT_S = 7.0  # a request waiting on a JWKS fetch gets its answer by then (the fetch's own deadline is 5 s)
ROUTED_TARGETS = 1024  # distinct request targets whose routing is remembered per worker (routed_target)
ROUTED_TARGET_CHARS = 512  # longer targets are checked each time: the memory stays under ~1 MiB


class GatewayApp:
    """The HTTP handler: `app(request, response)` for each request the downstream connection parses. `clock` times
    every exchange (its timers, on the worker's one timer wheel, and the metrics' seconds): a high-resolution
    monotonic clock."""

    def __init__(
        self,
        cfg: GatewayConfig,
        auth: Authenticator,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        check_pool_keys(cfg)
        self.cfg = cfg
        self.auth = auth
        self.clock = clock
        self.timer_wheel: TimerWheel = LoopWheel(clock)  # exchanges' timers, connections' head timers
        self.metrics = Metrics(registry or CollectorRegistry())
        self.pools = [Pool(p, cfg.health) for p in cfg.pools]
        self.router = Router(self.pools, cfg.auth.pool_claim)
        self.connections = open_member_pools(self.pools, self._count_handshake)
        self.forwarding = Forwarding(
            drop=FORWARD_DROP | {cfg.request_id_header.lower()},  # ours replaces the client's
            request_id_header=cfg.request_id_header,
            forwarded_proto="https" if cfg.tls_cert else "http",  # the scheme the client reached us by
            pass_client_credentials=not auth.enabled,
        )
        self.active: set[Exchange | WsUpgrade] = set()  # streams and WebSocket sessions
        self.draining = False
        limit = cfg.limits.max_body_bytes_in_flight
        self.body_budget = BodyBudget(  # the request bodies this worker holds, read by serve/http.py and serve/h2.py
            limit,
            Refusal(
                503,
                f"gateway holds its limit of {limit} bytes of request bodies; retry shortly",
                Outcome.BODIES_IN_FLIGHT.reply_code,
                (("Retry-After", str(cfg.limits.retry_after_s)),),
            ),
            self._body_refused,
        )
        self._idle = asyncio.Event()  # set whenever no exchange is active (drain waits on it)
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.routed: dict[str, tuple[str, RouteMatch | None]] = {}  # see routed_target
        for pool in self.pools:
            for member in pool.members:
                self.metrics.member_healthy.labels(pool.name, member.url).set(1)

    def _body_refused(self) -> None:
        self.metrics.errors.labels(Outcome.BODIES_IN_FLIGHT).inc()
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
                f"{head.method} is not allowed{CONNECT_NOTE if head.method == 'CONNECT' else ''}",
                "method_not_allowed",
                (("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),),
                self.error_api(head.path),
            )
        try:
            target, route = self.routed_target(head.target)
        except BadTarget as exc:
            return self._refuse(400, str(exc), "bad_request_target")
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

    def routed_target(self, raw: str) -> tuple[str, RouteMatch | None]:
        """The origin-form target and its route (BadTarget if refused), worked out once per distinct target: clients
        send the same few paths again and again. Only the first ROUTED_TARGETS distinct ones are remembered, so a
        client sending endless new paths costs the full check each time, never memory."""
        routed = self.routed.get(raw)
        if routed is None:
            target = origin_form(raw)
            routed = (target, match_route(target))
            if len(self.routed) < ROUTED_TARGETS and len(raw) <= ROUTED_TARGET_CHARS:
                self.routed[raw] = routed
        return routed

    async def _admit_after_key_fetch(
        self, head: Request, authorization: str | None, target: str, route: RouteMatch
    ) -> Admission:
        try:
            principal = await asyncio.wait_for(self.auth.authenticate(authorization), KEY_WAIT_S)
        except AuthError as exc:
            return self._unauthorized(head, str(exc), route.api)
        except TimeoutError:
            self.metrics.errors.labels(Outcome.JWKS_UNAVAILABLE).inc()
            return self._refuse(
                503,
                "signing keys are unavailable; retry shortly",
                Outcome.JWKS_UNAVAILABLE.reply_code,
                (("Retry-After", str(self.cfg.limits.retry_after_s)),),
                route.api,
            )
        return self._admitted(head, Entry(principal, target, route))

    def _admitted(self, head: Request, entry: Entry | None) -> Admission:
        """Admit a request; its body's bytes are held against the worker's body budget as they arrive (serve/http.py,
        serve/h2.py). One whose Content-Length alone would not fit in what the budget has left is refused now, before
        its body is sent (a body of unknown length, or one announced and never sent, costs nothing here)."""
        if entry is not None and self.router.guarded:  # a pool that lists `claims` serves only their tokens
            refused = self.router.refusal(entry.principal.claims)
            if refused is not None:
                return self._refused_token(
                    head, 403, f"forbidden: {refused}", refused, "forbidden", (), entry.route.api
                )
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
        self.metrics.errors.labels(Outcome.OVERLOADED).inc()
        retry_after = (("Retry-After", str(limits.retry_after_s)),)
        return self._refuse(503, f"gateway {reason}; retry shortly", Outcome.OVERLOADED.reply_code, retry_after, api)

    def _unauthorized(self, head: Request, reason: str, api: Api | None) -> Refusal:
        self.metrics.errors.labels(Outcome.UNAUTHORIZED).inc()
        challenge = 'Bearer realm="tokenpath"'
        if head.header("authorization"):
            challenge += ', error="invalid_token"'
        code = Outcome.UNAUTHORIZED.reply_code
        headers = (("WWW-Authenticate", challenge),)
        return self._refused_token(
            head, 401, f"unauthorized: {reason}", "invalid or missing bearer token", code, headers, api
        )

    def _refused_token(
        self,
        head: Request,
        status: int,
        logged: str,
        message: str,
        code: str,
        headers: tuple[tuple[str, str], ...],
        api: Api | None,
    ) -> Refusal:
        """A token refused (401) or one no pool serves (403): logged with the reason, which the client is never told,
        under a request id the client gets too (its header and the error's message), so an operator finds the line
        a client reports. The client's own id when it sent a valid one, as for a request that is served."""
        request_id = client_request_id(head.header(self.cfg.request_id_header)) or new_request_id()
        line = {"request_id": request_id, "method": head.method, "path": head.path, "status": status, "error": logged}
        log.warning(json.dumps(line))
        headers = ((self.cfg.request_id_header, request_id), *headers)
        return self._refuse(status, f"{message} (request id {request_id})", code, headers, api)

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
        # (An offer is never kept alive, wire/server.py: the common request pays no header scan for it.)
        if not request.keep_alive and is_websocket_offer(request.headers):
            self._websocket(request, response, entry)
            return
        exchange = Exchange(self, response, entry)
        self.active.add(exchange)
        self._idle.clear()
        self.metrics.streams_active.inc()
        exchange.start()

    def _websocket(self, request: Request, response: Response, entry: Entry) -> None:
        """An upgrade on a route with a WebSocket mode (admitted as a POST is): its offer checked, then a WsUpgrade
        (gateway/wsupgrade.py) makes the gateway's own upgrade to a member before the client gets its 101. Off a
        route with a WebSocket mode, the offer is a 400 in the route's shape (as every other upgrade is)."""
        api = entry.route.api
        if api is None or not SPECS[api].websocket:
            routes = ", ".join(s.route for s in SPECS.values() if s.websocket)
            message = f"protocol upgrade to websocket is not supported on {request.path}; WebSocket mode is on {routes}"
            self.reply_error(response, 400, message, "websocket_unsupported")
            return
        try:
            key = websocket_key(request.method, request.headers)
        except OfferRefused as exc:
            self.metrics.requests.labels(str(exc.status)).inc()
            extra = [("Sec-WebSocket-Version", "13")] if exc.status == 426 else []
            response.send_error(error_reply(entry.route.api, exc.status, str(exc), "bad_websocket_offer"), extra)
            return
        session = WsUpgrade(self, response, entry, key)
        self.active.add(session)
        self._idle.clear()
        self.metrics.streams_active.inc()
        session.start()

    # what an Exchange asks of its gateway (exchange.Gateway) -------------------------------------------------
    def route(self, request: Request, entry: Entry) -> Pool:
        model = request_model(request, entry.route) if self.router.needs_model else None
        return self.router.route(model, entry.principal.claims)

    def upstream_target(self, entry: Entry, pool: Pool) -> str:
        if not pool.cfg.api_key_env:  # the client's own key, if any, goes upstream for it to check
            return entry.target
        return forwarded_target(entry.target, entry.route.api, True)

    def upstream_headers(self, request: Request, request_id: str, entry: Entry, pool: Pool) -> Headers:
        env = pool.cfg.api_key_env
        key = (os.environ.get(env) or None) if env else None
        return upstream_headers(self.forwarding, request, request_id, entry.route.api, key)

    def connection_pool(self, member: MemberState) -> UpstreamPool:
        return self.connections[id(member)]

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task the app holds until it ends (the loop keeps only weak references)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def reply_error(self, response: Response, status: int, message: str, code: str) -> None:
        """An error answered before the response head, in the shape of the request's API format."""
        if response.finished or response.client_gone:
            return
        self.metrics.requests.labels(str(status)).inc()  # before the answer goes out, as in upstream_complete
        entry = response.context
        api = entry.route.api if isinstance(entry, Entry) else None
        response.send_error(error_reply(api, status, message, code))

    def set_health(self, pool: Pool, member: MemberState) -> None:
        """The member's gauge, after an active health check changed its health."""
        health_gauge(self.metrics, pool, member)

    def finished(self, exchange: Exchange | WsUpgrade) -> None:
        if exchange in self.active:
            self.active.discard(exchange)
            self.metrics.streams_active.dec()
            if not self.active:
                self._idle.set()

    async def drain(self, deadline_s: float) -> int:
        """Stop taking requests; wait for open streams up to the deadline. Returns how many were cut off."""
        self.draining = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), deadline_s)
        cut = len(self.active)
        for exchange in list(self.active):
            exchange.shutdown()
        for pool in self.connections.values():
            pool.close()
        return cut


def request_model(request: Request, route: RouteMatch) -> str | None:
    """The model a request names, for routing by model: in its path (Gemini, Bedrock) or its JSON body's `model`."""
    if route.model is not None:
        return route.model  # Gemini and Bedrock name it in the path (their bodies do not)
    if not request.body:
        return None
    try:
        body = jsonbytes.loads(request.body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes ([[[[...)
        return None  # malformed JSON: routed as a request without a model; the upstream answers its own 400
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None
