"""The gateway's request path: authenticate, route to a pool, pick a member, forward, relay, fail over.

One Exchange per request. The control flow (auth, attempts, failover, timeouts) is a coroutine; the relay itself
is callbacks from the upstream connection's `data_received`, which write each upstream read downstream at once:
payload bytes untouched (no SSE or JSON parsing), only the HTTP framing redone for the client's connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import time
from typing import Any

from prometheus_client import CollectorRegistry

from tokenpath.errors import PeerError
from tokenpath.gateway.auth import Authenticator, AuthError
from tokenpath.gateway.config import GatewayConfig
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.pools import MemberState, Pool, Router
from tokenpath.gateway.upstream import ConnectionPool, UpstreamConnection
from tokenpath.http_server import Request, Response, error_body
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import Framing, chunk, request_head
from tokenpath.wire.sse import EventCounter

log = logging.getLogger("tokenpath.gateway")

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    "content-length", "host", "authorization", "proxy-authorization", "expect",
})  # fmt: skip
FORWARD_DROP = HOP_BY_HOP | {"x-forwarded-for", "x-forwarded-proto"}  # rewritten: the chain plus this client
RESPONSE_DROP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection",
                           "trailer", "upgrade"})  # fmt: skip
REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
API_PREFIX = "/v1/"
HEALTH_PATH = "/_tokenpath/health"


class GatewayApp:
    """The HTTP handler: `app(request, response)` for each request the downstream connection parses."""

    def __init__(self, cfg: GatewayConfig, auth: Authenticator, registry: CollectorRegistry | None = None) -> None:
        self.cfg = cfg
        self.auth = auth
        self.metrics = Metrics(registry or CollectorRegistry())
        self.pools = [Pool(p, cfg.health) for p in cfg.pools]
        self.router = Router(self.pools, cfg.auth.pool_claim)
        self.connections: dict[int, ConnectionPool] = {}
        self.forward_drop = FORWARD_DROP | {cfg.request_id_header.lower()}  # ours replaces the client's
        self.active: set[Exchange] = set()
        self.draining = False
        self._idle = asyncio.Event()  # set whenever no exchange is active (drain waits on it)
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        for pool in self.pools:
            for m in pool.members:
                self.connections[id(m)] = ConnectionPool(m.member.host, m.member.port)
                self.metrics.member_healthy.labels(pool.name, m.url).set(1)

    def __call__(self, request: Request, response: Response) -> None:
        if request.path == HEALTH_PATH and request.method == "GET":
            health: dict[str, object] = {"status": "draining" if self.draining else "ok", "active": len(self.active)}
            if self.auth.jwks is not None:
                health["jwks"] = self.auth.jwks.state()
            response.send_json(200, health)
            return
        if not request.path.startswith(API_PREFIX):
            self.reply_error(response, 404, f"no route for {request.path}: the gateway serves /v1/*", "not_found")
            return
        limits = self.cfg.limits
        if self.draining or len(self.active) >= limits.max_streams:
            reason = "shutting down" if self.draining else f"at its limit of {limits.max_streams} streams"
            self.metrics.errors.labels("overloaded").inc()
            self.reply_error(response, 503, f"gateway {reason}; retry shortly", "overloaded",
                             [("Retry-After", str(limits.retry_after_s))])  # fmt: skip
            return
        exchange = Exchange(self, request, response)
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

    def reply_error(
        self, response: Response, status: int, message: str, code: str, headers: list[tuple[str, str]] | None = None
    ) -> None:
        if response.finished or response.client_gone:
            return
        kind = "invalid_request_error" if status < 500 else "server_error"
        self.metrics.requests.labels(str(status)).inc()  # before the answer goes out, as in upstream_complete
        response.send_json(status, error_body(message, kind, code), headers)

    def connection_pool(self, member: MemberState) -> ConnectionPool:
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


class Exchange:
    """One request through the gateway. Implements upstream.Sink."""

    def __init__(self, app: GatewayApp, request: Request, response: Response) -> None:
        self.app = app
        self.request = request
        self.response = response
        self.loop = asyncio.get_running_loop()
        rid = request.header(app.cfg.request_id_header)
        self.request_id = rid if rid and REQUEST_ID_OK.match(rid) else secrets.token_hex(8)
        self.conn: UpstreamConnection | None = None
        self.pool: Pool | None = None
        self.member: MemberState | None = None
        self.head_waiter: asyncio.Future[str | None] | None = None  # None: committed; str: why this attempt failed
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.committed = False  # the client has the head: no more failover
        self.aborted = False
        self.framing = Framing.CHUNKED  # how the body is framed to the client (decided by the server core)
        self.chunked = True
        self.bodiless = False
        self.sse = False
        self.events = EventCounter()
        self.out: list[bytes] = []
        self.frames = 0
        self.bytes = 0
        self.status = 0
        self.attempts = 0
        self.error: str | None = None
        self.t_start = time.perf_counter()
        self.t_sent = 0.0
        self.t_first_in: float | None = None
        self.added_observed = False
        self.last_read = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._total_timer: asyncio.TimerHandle | None = None
        response.on_abort = self.client_gone
        response.on_pause = self._pause_upstream
        response.on_resume = self._resume_upstream

    # control flow ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        app = self.app
        try:
            try:
                principal = await app.auth.authenticate(self.request.header("authorization"))
            except AuthError as exc:
                self._unauthorized(str(exc))
                return
            if self.aborted:
                return
            pool = app.router.route(self._model(), principal.claims)
            self.pool = pool
            limits = app.cfg.limits
            self._total_timer = self.loop.call_later(limits.total_timeout_s, self._total_timeout)
            failures = await self._attempts(pool)
            if self.committed:
                await self.done
            elif not self.aborted:
                timed_out = bool(failures) and all("timed out" in f or "timeout" in f for f in failures)
                status = 504 if timed_out else 502
                self.error = "; ".join(failures) or "no member"
                app.metrics.errors.labels("all_members_failed").inc()
                app.reply_error(self.response, status, f"no upstream in pool {pool.name!r} answered: {self.error}",
                                "upstream_unavailable")  # fmt: skip
                self.status = status
        except Exception:  # a bug costs this request, never the worker
            log.exception("request %s failed", self.request_id)
            self.error = "internal error"
            if not self.committed:
                app.reply_error(self.response, 500, "internal gateway error", "internal_error")
            else:
                self.fail_stream("internal gateway error", "internal")
        finally:
            self._stop_timers()
            app.finished(self)
            self._log()
            self._break_cycles()

    async def _attempts(self, pool: Pool) -> list[str]:
        failures: list[str] = []
        tried: list[MemberState] = []
        headers = self._upstream_headers()
        while not self.aborted:
            member = pool.pick(tried)
            if member is None:
                break
            if tried:
                self.app.metrics.failovers.labels(pool.name).inc()
            tried.append(member)
            outcome = await self._attempt(pool, member, headers)
            if outcome == "stale":  # a keep-alive connection the upstream had closed: retry once, fresh
                outcome = await self._attempt(pool, member, headers)
            if outcome is None or self.aborted:
                return failures
            failures.append(f"{member.url}: {outcome}")
            if pool.record_failure(member):
                log.warning(json.dumps({"event": "member_ejected", "pool": pool.name, "member": member.url,
                                        "cooldown_s": pool.health.cooldown_s}))  # fmt: skip
            self.app.set_health(pool, member)
        return failures

    async def _attempt(self, pool: Pool, member: MemberState, headers: list[tuple[str, str]]) -> str | None:
        limits = self.app.cfg.limits
        self.attempts += 1
        try:
            conn = await self.app.connection_pool(member).acquire(limits.connect_timeout_s)
        except PeerError as exc:
            self.app.metrics.errors.labels("connect").inc()
            return str(exc)
        if self.aborted:
            conn.abort()
            return "client gone"
        self.conn, self.member = conn, member
        member.outstanding += 1
        waiter: asyncio.Future[str | None] = self.loop.create_future()
        self.head_waiter = waiter
        m = member.member
        target = f"{m.base_path}{self.request.target}"
        head = request_head(self.request.method, target, [("Host", f"{m.host}:{m.port}"), *headers])
        self.t_sent = time.perf_counter()
        conn.send(self, head + self.request.body, self.request.method)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(waiter), limits.first_byte_timeout_s)
        except TimeoutError:
            outcome = f"no response within the first-byte timeout ({limits.first_byte_timeout_s:g} s)"
            self.app.metrics.errors.labels("first_byte_timeout").inc()
        if outcome is not None:
            self._finish_member(ok=False)
            stale = conn.reused and not conn.got_bytes and outcome.startswith("upstream closed")
            conn.abort()
            self.conn = None
            if stale and not self.aborted:
                return "stale"
            return outcome
        pool.record_success(member)
        self.app.set_health(pool, member)
        return None

    def _upstream_headers(self) -> list[tuple[str, str]]:
        """Headers sent upstream: the client's, minus hop-by-hop and (when the gateway checked them) its
        credentials, plus ours."""
        drop = self.app.forward_drop
        headers = [(k, v) for k, v in self.request.headers if k.lower() not in drop]
        if self.request.peer:
            seen = self.request.header("x-forwarded-for")
            headers.append(("X-Forwarded-For", f"{f'{seen}, ' if seen else ''}{self.request.peer}"))
            headers.append(("X-Forwarded-Proto", "http"))
        headers.append(("Content-Length", str(len(self.request.body))))
        headers.append((self.app.cfg.request_id_header, self.request_id))
        key = self._upstream_key()
        client_credentials = self.request.header("authorization")
        if key:
            headers.append(("Authorization", f"Bearer {key}"))
        elif client_credentials and not self.app.auth.enabled:  # --no-auth: the upstream checks the client's key
            headers.append(("Authorization", client_credentials))
        return headers

    def _upstream_key(self) -> str | None:
        env = self.pool.cfg.api_key_env if self.pool else None
        if not env:
            return None
        return os.environ.get(env) or None

    def _model(self) -> str | None:
        if not self.app.router.needs_model or not self.request.body:
            return None
        try:
            body = json.loads(self.request.body)
        except ValueError:
            return None  # the upstream answers malformed JSON with its own 400
        model = body.get("model") if isinstance(body, dict) else None
        return model if isinstance(model, str) else None

    # upstream.Sink: called from the upstream connection's data_received -----------------------------------
    def upstream_head(self, head: ResponseHead) -> None:
        waiter = self.head_waiter
        status = head.status
        if status >= 500 and waiter is not None and not waiter.done():  # before any byte to the client: fail over
            self.app.metrics.errors.labels(f"upstream_{status}").inc()
            waiter.set_result(f"upstream answered {status}")
            return
        self.committed = True
        self.status = status
        if self.member is not None and self.pool is not None:
            self.member.observe_ttft(time.perf_counter() - self.t_sent)
            self.app.metrics.upstream_ttft.labels(self.pool.name).observe(time.perf_counter() - self.t_sent)
        out_headers: list[tuple[str, str]] = []
        length: int | None = None
        for name, value in head.headers:
            lname = name.lower()
            if lname == "content-length":
                length = int(value)
            elif lname == "content-type" and value.startswith("text/event-stream"):
                self.sse = True
            if lname not in RESPONSE_DROP:
                out_headers.append((name, value))
        out_headers.append((self.app.cfg.request_id_header, self.request_id))
        response = self.response
        if head.framing is Framing.NONE:
            if length is not None:  # HEAD: the length of the body a GET would get
                out_headers.append(("Content-Length", str(length)))
            self.out.append(response.start_without_body(status, out_headers))
        else:
            self.out.append(response.start(status, out_headers, length))
        self.framing = response.framing or Framing.NONE
        self.chunked = self.framing is Framing.CHUNKED
        self.bodiless = self.framing is Framing.NONE
        self.last_read = self.loop.time()
        self._arm_idle()
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def upstream_body(self, data: bytes) -> None:
        # The hot path: once per upstream read. Framing decided at the head (wire.framing), kept as two bools.
        if not self.committed or self.bodiless:
            return  # the body of a 5xx we are failing over from, or bytes a bodiless response must not carry
        if self.t_first_in is None:
            self.t_first_in = time.perf_counter()
        self.bytes += len(data)
        if self.sse:
            self.frames += self.events.feed(data)
        self.out.append(chunk(data) if self.chunked else data)  # one chunk per upstream read

    def upstream_read_done(self) -> None:
        if self.out:
            self._flush()
        self.last_read = self.loop.time()

    def upstream_complete(self) -> None:
        if not self.committed:
            return
        self.out.append(self.response.end_bytes())
        # Counted before the last bytes go out: a client that has read its whole answer finds it in /metrics.
        self.app.metrics.requests.labels(str(self.status)).inc()
        self._flush()
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.release()
        self._finish_member(ok=True)
        if self.framing is Framing.CLOSE:
            self.response.close_connection()
        else:
            self.response.write(b"", last=True)
        self._resolve_done()

    def upstream_lost(self, reason: str) -> None:
        waiter = self.head_waiter
        if not self.committed:
            if waiter is not None and not waiter.done():
                waiter.set_result(reason)
            return
        self.app.metrics.errors.labels("upstream_lost_mid_stream").inc()
        if self.pool is not None and self.member is not None and self.pool.record_failure(self.member):
            self.app.set_health(self.pool, self.member)
        self.fail_stream(f"upstream failed mid-response: {reason}", "upstream_disconnected")

    # failures after the head ----------------------------------------------------------------------------
    def fail_stream(self, message: str, code: str) -> None:
        """After the first byte there is no failover: end the stream with an explicit SSE error event (never a
        fake finish_reason or [DONE]) and close the client's connection."""
        if self.done.done():
            return
        self.error = message
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.abort()
        self._finish_member(ok=False)
        if not self.committed:
            self.app.reply_error(self.response, 502, message, code)
        elif not self.response.client_gone:
            if self.sse:
                event = b"event: error\ndata: " + json.dumps(error_body(message, "server_error", code)).encode()
                event = (b"" if self.events.at_boundary else b"\n\n") + event + b"\n\n"
                self.out.append(self.response.frame(event) + self.response.end_bytes())
            self._flush()
            self.response.close_connection()
        self._resolve_done()

    def client_gone(self) -> None:
        """The client left: abort the upstream request now, so the model stops generating."""
        self.aborted = True
        self.error = self.error or "client disconnected"
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.abort()
        self.app.metrics.errors.labels("client_gone").inc()
        if self.head_waiter is not None and not self.head_waiter.done():
            self.head_waiter.set_result("client gone")
        self._finish_member(ok=True)  # not the member's fault
        self._resolve_done()

    # internals ---------------------------------------------------------------------------------------------
    def _flush(self) -> None:
        data = b"".join(self.out) if len(self.out) > 1 else self.out[0] if self.out else b""
        self.out.clear()
        if data:
            self.response.write(data)
        if not self.added_observed and self.t_first_in is not None:
            self.added_observed = True
            self.app.metrics.added_ttft.observe(time.perf_counter() - self.t_first_in)

    def _finish_member(self, ok: bool) -> None:
        member, self.member = self.member, None
        if member is not None:
            member.outstanding -= 1

    def _break_cycles(self) -> None:
        """Exchange <-> Response <-> connection refer to each other through callbacks. Cutting the links when the
        request ends lets reference counting free them at once, instead of leaving garbage for the cyclic
        collector, whose full passes over a busy heap are the millisecond pauses a p99 would show."""
        self.response.on_abort = self.response.on_pause = self.response.on_resume = None
        self.conn = None
        self.head_waiter = None

    def _resolve_done(self) -> None:
        self._stop_timers()
        if not self.done.done():
            self.done.set_result(None)
        metrics = self.app.metrics
        if self.frames:
            metrics.frames.inc(self.frames)
        if self.bytes:
            metrics.bytes.inc(self.bytes)
        self.frames = self.bytes = 0

    def _pause_upstream(self) -> None:
        if self.conn is not None:
            self.conn.pause()

    def _resume_upstream(self) -> None:
        if self.conn is not None:
            self.conn.resume()

    def _arm_idle(self) -> None:
        self._idle_timer = self.loop.call_at(self.last_read + self.app.cfg.limits.idle_timeout_s, self._idle_check)

    def _idle_check(self) -> None:
        """One timer per stream, re-armed from the last read only when it fires: no timer churn per read."""
        if self.done.done():
            return
        idle = self.app.cfg.limits.idle_timeout_s
        if self.loop.time() - self.last_read >= idle:
            self.app.metrics.errors.labels("idle_timeout").inc()
            self.fail_stream(f"upstream silent for {idle:g} s (idle timeout)", "upstream_idle_timeout")
        else:
            self._arm_idle()

    def _total_timeout(self) -> None:
        total = self.app.cfg.limits.total_timeout_s
        self.app.metrics.errors.labels("total_timeout").inc()
        waiter = self.head_waiter
        if not self.committed and waiter is not None and not waiter.done():
            waiter.set_result(f"total timeout ({total:g} s)")
            return
        self.fail_stream(f"response exceeded the total timeout ({total:g} s)", "total_timeout")

    def _stop_timers(self) -> None:
        for timer in (self._idle_timer, self._total_timer):
            if timer is not None:
                timer.cancel()

    def _unauthorized(self, reason: str) -> None:
        self.error = f"unauthorized: {reason}"
        self.status = 401
        self.app.metrics.errors.labels("unauthorized").inc()
        challenge = 'Bearer realm="tokenpath"'
        if self.request.header("authorization"):
            challenge += ', error="invalid_token"'
        self.app.reply_error(self.response, 401, "invalid or missing bearer token", "invalid_api_key",
                             [("WWW-Authenticate", challenge)])  # fmt: skip

    def _log(self) -> None:
        record: dict[str, Any] = {
            "request_id": self.request_id, "method": self.request.method, "path": self.request.path,
            "status": self.status or None, "pool": self.pool.name if self.pool else None, "attempts": self.attempts,
            "ms": round((time.perf_counter() - self.t_start) * 1000, 2),
        }  # fmt: skip
        if self.error:
            record["error"] = self.error
            log.warning(json.dumps(record))
        elif log.isEnabledFor(logging.INFO):
            log.info(json.dumps(record))
