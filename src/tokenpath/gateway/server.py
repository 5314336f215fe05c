"""The gateway's server: GatewayServer (one process's), and run(): it under serve.runner, one process or N
workers; metrics on their own port; SIGTERM drains open streams up to the configured deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from prometheus_client import CollectorRegistry

from tokenpath.errors import UsageError
from tokenpath.gateway import metrics
from tokenpath.gateway.app import GatewayApp
from tokenpath.gateway.auth import Authenticator
from tokenpath.gateway.config import GatewayConfig, check_pool_keys
from tokenpath.gateway.health import run_checks
from tokenpath.hostport import join_hostport, redacted
from tokenpath.jsonlog import batch_log_lines, configure_logging
from tokenpath.serve.h2 import finish_drain, start_drain
from tokenpath.serve.h2limits import H2Limits
from tokenpath.serve.http import bound_port, listen
from tokenpath.serve.listener import serve_factory
from tokenpath.serve.runner import Config, Server
from tokenpath.serve.tlsserver import server_context
from tokenpath.wire.limits import ServerLimits

log = logging.getLogger("tokenpath.gateway")
# The access log's lines (one per request) wait at most this long on the worker's timer wheel (plus its 0.1 s slot),
# then go out in one write: jsonlog.BatchedHandler.
LOG_FLUSH_S = 0.1


class GatewayServer:
    """The gateway as a library object: `await start()` binds and serves until `close()`."""

    def __init__(
        self, cfg: GatewayConfig, sock: socket.socket | None = None, registry: CollectorRegistry | None = None
    ) -> None:
        self.cfg = cfg
        self._sock = sock
        self.registry = registry or CollectorRegistry()
        self._server: asyncio.Server | None = None
        self._health: asyncio.Task[None] | None = None
        self.auth = Authenticator(cfg.auth, algorithms_written="algorithms" in cfg.written.auth)
        self.app = GatewayApp(cfg, self.auth, self.registry)

    @property
    def port(self) -> int:
        return bound_port(self._server)

    @property
    def url(self) -> str:
        scheme = "https" if self.cfg.tls_cert else "http"
        return f"{scheme}://{join_hostport(self.cfg.listen_host, self.port)}"

    def note(self) -> str:
        cfg = self.cfg
        metrics_note = f", metrics on {join_hostport(cfg.metrics_host, cfg.metrics_port)}" if cfg.metrics_port else ""
        protocols = "HTTP/1.1 and h2 by ALPN" if cfg.tls_cert else "HTTP/1.1 and h2c"
        return f"{len(cfg.pools)} pool(s), auth {cfg.auth.mode}, {protocols}{metrics_note}"

    async def start(self) -> int:
        if self.auth.jwks is not None:
            await self.auth.jwks.start()
            if not self.auth.jwks.keys:
                await self.auth.jwks.close()  # its refresh task, left pending, would be destroyed with a warning
                raise UsageError(f"could not fetch any key from {redacted(self.cfg.auth.jwks_url or '')}")
        loop = asyncio.get_running_loop()
        limits = self.cfg.limits
        app = self.app
        server_limits = ServerLimits(
            max_body_bytes=limits.max_body_bytes,
            max_head_bytes=limits.max_head_bytes,
            request_timeout_s=limits.header_timeout_s,
            write_buffer_high=limits.write_buffer_bytes,
            upgrades=frozenset({"websocket"}),  # to the handler: app.py carries it where the route has a WebSocket mode
        )

        # HTTP/1.1 and HTTP/2 on one port: by ALPN over TLS, by the client's first bytes in clear text (h2c)
        factory = serve_factory(app, server_limits, H2Limits(max_concurrent_streams=limits.h2_max_concurrent_streams))
        ctx = server_context(self.cfg.tls_cert, self.cfg.tls_key) if self.cfg.tls_cert and self.cfg.tls_key else None
        self._server = await listen(
            factory,
            self.cfg.listen_host,
            self.cfg.listen_port,
            self._sock,
            ctx,
            handshake_timeout_s=limits.header_timeout_s,
        )
        health = self.cfg.health
        if health.active_interval_s > 0:
            self._health = loop.create_task(
                run_checks(
                    self.app.pools,
                    health.active_path,
                    health.active_interval_s,
                    self.app.connection_pool,
                    self.app.set_health,
                )
            )
        wheel = self.app.timer_wheel
        batch_log_lines(lambda flush: wheel.arm(wheel.clock() + LOG_FLUSH_S, _flush_log, flush))
        return self.port

    async def close(self, drain_s: float | None = None) -> int:
        """Stop accepting, drain open streams (up to drain_s), close. Returns the streams cut off."""
        try:
            return await self._close(drain_s)
        finally:
            batch_log_lines(None)  # the last lines out now, however the close ended: the wheel stops with the loop

    async def _close(self, drain_s: float | None) -> int:
        if self._server is not None:
            self._server.close()
        if self._health is not None:
            self._health.cancel()
        start_drain(self.app)  # HTTP/2: new streams refused, GOAWAY once the open ones end (serve/h2.py)
        cut = await self.app.drain(self.cfg.limits.drain_s if drain_s is None else drain_s)
        await finish_drain(self.app)
        if self.auth.jwks is not None:
            await self.auth.jwks.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        if cut:
            log.warning(json.dumps({"event": "drain_deadline", "streams_cut": cut}))
        return cut


def _flush_log(flush: Callable[[], None]) -> None:
    flush()


def configure_gateway_logging(log_level: str) -> None:
    """JSON lines on stderr, the access log's batched (jsonlog.BatchedHandler): a gateway's process, or a worker."""
    configure_logging(log_level, batched=True)


def run(
    cfg: GatewayConfig, announce: Callable[[str], None], loop_name: str = "uvloop", log_level: str = "info"
) -> None:
    check_pool_keys(cfg)  # here, not in a worker: the user reads a usage error, not a worker that failed
    configure_gateway_logging(log_level)
    if cfg.auth.mode == "none":
        log.warning(
            json.dumps(
                {"event": "auth_disabled", "message": "--no-auth: every request is let through without authentication"}
            )
        )
    scheme = "https" if cfg.tls_cert else "http"
    config = Config("gateway", cfg.listen_host, cfg.listen_port, cfg.workers, loop_name, cfg.limits.drain_s, scheme)
    if cfg.workers == 1:
        registry = CollectorRegistry()
        if cfg.metrics_port is not None:
            metrics.serve(cfg.metrics_host, cfg.metrics_port, registry)
        Server(config, partial(_app, cfg, log_level, registry)).run(announce)
        return
    metrics.sweep_orphaned_dirs()
    multiproc_dir = Path(tempfile.mkdtemp(prefix=f"{metrics.MULTIPROC_PREFIX}{os.getpid()}-"))
    metrics.enable_multiprocess(multiproc_dir)  # inherited by the spawned workers

    def ready(line: str) -> None:  # every worker accepts: their metrics are served from here
        if cfg.metrics_port is not None:
            metrics.serve(cfg.metrics_host, cfg.metrics_port, None, multiproc_dir)
        announce(line)

    try:
        Server(config, partial(_app, cfg, log_level, None)).run(ready)
    finally:
        shutil.rmtree(multiproc_dir, ignore_errors=True)


def _app(
    cfg: GatewayConfig, log_level: str, registry: CollectorRegistry | None, sock: socket.socket | None
) -> GatewayServer:
    """One process's gateway; a spawned worker starts with no logging configured."""
    configure_gateway_logging(log_level)
    return GatewayServer(cfg, sock=sock, registry=registry)
