"""A WebSocket upgrade through the gateway (the Responses WebSocket mode: `GET /v1/responses` + `Upgrade: websocket`,
HTTP/1.1 downstream). Admission has checked it as it checks a POST (route, limits, JWT: refused before any 101, in
the format's error shape); here the pool is chosen as for the SSE route, the gateway makes its own upgrade to a
member (wire/websocket.py's client over gateway/link.py: TLS as for SSE), failing over on what fails over there
(connect, TLS, no answer in the first-byte timeout, a 5xx), and only the member's 101 lets the client have its
own: a member that refuses gives the client an HTTP error in the format's shape, never a 101 followed by nothing.
Then the session is gateway/wsrelay.py's until both sides are closed.

Routing by model is not possible here (the model is in each response.create, after the upgrade): a pool is chosen by
claim, else the first pool. HTTP/2 members are not carried (RFC 8441's extended CONNECT is out of scope): 501."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from tokenpath.clock import monotonic_ns
from tokenpath.gateway.bookkeeping import book
from tokenpath.gateway.config import GatewayConfig
from tokenpath.gateway.connections import UpstreamPool
from tokenpath.gateway.exchange import Entry
from tokenpath.gateway.exchange_state import Outstanding, RecordFailure, RecordSuccess
from tokenpath.gateway.failures import Failure, FailureKind, Outcome, bug_text
from tokenpath.gateway.headers import Headers, client_request_id, new_request_id
from tokenpath.gateway.link import HTTP1, AttemptFailed, UpstreamLink, connect
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.pools import MemberState, Pool
from tokenpath.gateway.upstream import ConnectionPool
from tokenpath.gateway.wsrelay import WsRelay, WsSettings, WsTally
from tokenpath.gateway.wsupstream import UpstreamWs
from tokenpath.serve.http import Request, Response
from tokenpath.wire.websocket import CLOSED_UNANSWERED, Upgraded, UpgradeRefused, switching_protocols

__all__ = ["WsGateway", "WsUpgrade", "refusal_message", "ws_forward_headers"]

log = logging.getLogger("tokenpath.gateway")

# The offer's own fields: wsproto writes the gateway's (its key, version 13, no extension, no subprotocol).
WS_OWN = frozenset(
    {
        "content-length",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
    }
)
# A member's refusal the client gets as it is (its status); the member's 401/403 is about the gateway's key, not the
# client's token, and anything but a 4xx is the member's failure: 502.
PASSED_REFUSALS = frozenset(range(400, 500)) - {401, 403, 407}
REFUSAL_PREVIEW_CHARS = 200


class WsGateway(Protocol):
    """What an upgrade asks of the gateway that runs it (app.GatewayApp)."""

    cfg: GatewayConfig
    metrics: Metrics
    clock: Callable[[], float]

    def route(self, request: Request, entry: Entry) -> Pool: ...
    def upstream_headers(self, request: Request, request_id: str, entry: Entry, pool: Pool) -> Headers: ...
    def connection_pool(self, member: MemberState) -> UpstreamPool: ...
    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...
    def reply_error(self, response: Response, status: int, message: str, code: str) -> None: ...
    def finished(self, session: WsUpgrade) -> None: ...


def ws_forward_headers(headers: Headers) -> Headers:
    return [(k, v) for k, v in headers if k.lower() not in WS_OWN]


def refusal_message(refused: UpgradeRefused) -> str:
    """What the client reads of a member's refusal: its error's message when the body is a JSON error, else its
    first characters."""
    text = refused.body.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        text = error["message"]
    elif isinstance(error, str):
        text = error
    detail = f": {text[:REFUSAL_PREVIEW_CHARS]}" if text else ""
    return f"the upstream refused the WebSocket upgrade with {refused.status}{detail}"


class WsUpgrade:
    """One upgrade and, once both sides switched, its session; held in the app's active set until it ends."""

    def __init__(self, app: WsGateway, response: Response, entry: Entry, key: str) -> None:
        self.app = app
        self.response = response
        self.entry = entry
        self.key = key
        rid = client_request_id(response.request.header(app.cfg.request_id_header))
        self.request_id = rid or new_request_id()
        self.t_start = app.clock()
        self.pool: Pool | None = None
        self.member: MemberState | None = None
        self.attempts = 0
        self.failures: list[Failure] = []
        self.status = 0
        self.error: str | None = None
        self.upstream: UpstreamWs | None = None  # the attempt in flight, then the member's side of the session
        self.relay: WsRelay | None = None
        self.tally: WsTally | None = None
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.shutting_down = False
        response.on_abort = self.client_gone

    def start(self) -> None:
        self.task = self.app.spawn(self.run())

    async def run(self) -> None:
        try:
            upstream = await self._upgrade()
            if upstream is not None:
                self._switch(upstream)
                await self.ended
        except asyncio.CancelledError:
            if self.shutting_down:
                self._reply(503, "the gateway is shutting down", Outcome.SHUTDOWN.reply_code)
            self.error = self.error or "client disconnected"
            raise
        except Exception as exc:  # a bug costs this session, never the worker
            log.exception("websocket upgrade %s failed", self.request_id)
            self.error = f"internal error: {bug_text(exc)}"
            self.app.metrics.errors.labels(Outcome.INTERNAL).inc()
            if self.relay is not None:
                self.relay.shutdown("internal gateway error")
            else:
                self._reply(500, "internal gateway error", Outcome.INTERNAL.reply_code)
        finally:
            if self.relay is None and self.upstream is not None:
                self.upstream.abort()  # an attempt the client left (or the drain cut) before its 101
            if self.member is not None and self.pool is not None and self.relay is not None:
                book(self.pool, Outstanding(self.member, -1), self.app.metrics, before_head=False)
            self.response.on_abort = None
            self.app.finished(self)
            self._log()

    # the upgrade -------------------------------------------------------------------------------------------
    async def _upgrade(self) -> UpstreamWs | None:
        app = self.app
        request = self.response.request
        self.pool = pool = app.route(request, self.entry)
        if pool.cfg.protocol != "http1":
            message = f"pool {pool.name!r} speaks HTTP/2 to its members: WebSocket is carried over HTTP/1.1 only"
            self._reply(501, message)
            return None
        headers = ws_forward_headers(app.upstream_headers(request, self.request_id, self.entry, pool))
        tried: list[MemberState] = []
        while (member := pool.pick(tried)) is not None:
            if tried:
                app.metrics.failovers.labels(pool.name).inc()
            tried.append(member)
            self.member = member
            self.attempts += 1
            outcome = await self._attempt(member, headers)
            if isinstance(outcome, UpstreamWs):
                book(pool, RecordSuccess(member), app.metrics, before_head=True)
                return outcome
            if isinstance(outcome, UpgradeRefused):  # the member's answer, for the client to have
                book(pool, RecordSuccess(member), app.metrics, before_head=True)
                status = outcome.status if outcome.status in PASSED_REFUSALS else 502
                self._reply(status, refusal_message(outcome), "websocket_refused")
                return None
            self.failures.append(outcome)
            book(pool, RecordFailure(member, outcome, outcome.members_fault), app.metrics, before_head=True)
        timeouts = all(f.is_timeout for f in self.failures) and bool(self.failures)
        message = f"no member accepted the WebSocket upgrade (request id {self.request_id}, {self.attempts} attempt(s))"
        self._reply(504 if timeouts else 502, message, Outcome.ALL_MEMBERS_FAILED.reply_code)
        return None

    async def _attempt(self, member: MemberState, headers: Headers) -> UpstreamWs | UpgradeRefused | Failure:
        """One member: connect, offer, its answer within the first-byte timeout. A refusal with a 5xx, no valid
        answer or none in time is a Failure (failed over); another refusal is the client's answer."""
        limits = self.app.cfg.limits
        connections = self.app.connection_pool(member)
        assert isinstance(connections, ConnectionPool)  # HTTP/2 pools were answered 501
        settings = WsSettings.of(limits)

        def speaker(link: UpstreamLink) -> UpstreamWs:
            return UpstreamWs(link, settings.upstream, monotonic_ns)

        try:
            speaker_ = await connect(connections.origin, limits.connect_timeout_s, {HTTP1: speaker})
        except AttemptFailed as exc:
            return exc.failure
        assert isinstance(speaker_, UpstreamWs)
        self.upstream = upstream = speaker_
        if upstream.link.transport is not None:
            upstream.link.transport.set_write_buffer_limits(high=limits.write_buffer_bytes)
        m = member.member
        upstream.offer(m.authority, f"{m.base_path}{self.entry.target}", headers)
        where = connections.where
        try:
            answer = await asyncio.wait_for(asyncio.shield(upstream.answer), limits.first_byte_timeout_s)
        except TimeoutError:
            upstream.abort()
            return Failure(
                FailureKind.FIRST_BYTE_TIMEOUT,
                f"{where} did not answer the WebSocket upgrade within {limits.first_byte_timeout_s:g} s",
            )
        if isinstance(answer, Upgraded):
            return upstream
        upstream.abort()
        if answer.status >= 500:
            return Failure(FailureKind.UPSTREAM_5XX, f"{where} answered the WebSocket upgrade with {answer.status}")
        if answer.status < 400:
            detail = answer.body[:REFUSAL_PREVIEW_CHARS].decode("utf-8", "replace") or f"status {answer.status}"
            closed = answer.status == 0 and answer.body == CLOSED_UNANSWERED  # else a 101 wsproto refused, or a 1xx-3xx
            kind = FailureKind.UPSTREAM_CLOSED if closed else FailureKind.MALFORMED
            return Failure(kind, f"{where} answered the WebSocket upgrade without a valid 101: {detail}")
        return answer

    def _switch(self, upstream: UpstreamWs) -> None:
        """Both sides upgraded: the client's 101, and the connection is the relay's."""
        app = self.app
        if self.response.client_gone:
            upstream.abort()
            self.ended.set_result(None)
            return
        assert self.pool is not None
        assert self.member is not None
        relay = WsRelay(upstream, WsSettings.of(app.cfg.limits), monotonic_ns, self._relay_ended)
        self.relay = relay
        book(self.pool, Outstanding(self.member, 1), app.metrics, before_head=False)
        self.status = 101
        app.metrics.requests.labels("101").inc()
        head = switching_protocols(self.key, [(app.cfg.request_id_header, self.request_id)])
        self.response.switch_protocols(head, relay)

    def _relay_ended(self, tally: WsTally) -> None:
        self.tally = tally
        metrics = self.app.metrics
        metrics.frames.inc(tally.to_client)
        metrics.bytes.inc(tally.bytes_to_client)
        if tally.closed_by == "gateway" or (tally.closed_by == "upstream" and tally.upstream_close == 1006):
            self.error = f"websocket closed by the {tally.closed_by}: {tally.reason or tally.upstream_close}"
            metrics.errors.labels(f"websocket_{tally.closed_by}_close").inc()
        if not self.ended.done():
            self.ended.set_result(None)

    def _reply(self, status: int, message: str, code: str = "bad_gateway") -> None:
        self.status = status
        self.error = message
        self.app.reply_error(self.response, status, message, code)

    # the client, the gateway ----------------------------------------------------------------------------------
    def client_gone(self) -> None:
        """The client left before its 101: the attempt is dropped."""
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def shutdown(self) -> None:
        """The drain deadline: a session is closed 1001 on both sides; an upgrade still waiting is dropped."""
        if self.relay is not None:
            self.relay.shutdown()
        elif self.task is not None and not self.task.done():
            self.shutting_down = True
            self.task.cancel()

    def _log(self) -> None:
        ms = (self.app.clock() - self.t_start) * 1000
        request = self.response.request
        record: dict[str, object] = {
            "request_id": self.request_id,
            "method": request.method,
            "path": request.path,
            "status": self.status or None,
            "pool": self.pool.name if self.pool else None,
            "member": self.member.url if self.member else None,
            "attempts": self.attempts,
            "ms": round(ms, 2),
        }
        tally = self.tally
        if tally is not None:
            record["websocket"] = {
                "to_client": tally.to_client,
                "to_upstream": tally.to_upstream,
                "client_close": tally.client_close,
                "upstream_close": tally.upstream_close,
                "closed_by": tally.closed_by,
            }
        if self.failures:
            record["attempt_failures"] = [str(f) for f in self.failures]
        if self.error or self.failures:
            if self.error:
                record["error"] = self.error
            log.warning(json.dumps(record))
        elif log.isEnabledFor(logging.INFO):
            log.info(json.dumps(record))
