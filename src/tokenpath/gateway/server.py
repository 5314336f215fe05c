"""Runs the gateway: one process on an event loop, or N SO_REUSEPORT workers; metrics on their own port; SIGTERM
drains open streams up to the configured deadline."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

from prometheus_client import CollectorRegistry

from tokenpath.errors import UsageError
from tokenpath.gateway import metrics
from tokenpath.gateway.auth import Authenticator
from tokenpath.gateway.config import GatewayConfig
from tokenpath.gateway.health import run_checks
from tokenpath.gateway.proxy import GatewayApp
from tokenpath.http_server import HTTPConnection, bound_port, listen
from tokenpath.jsonlog import configure_logging
from tokenpath.loops import new_event_loop
from tokenpath.wire.limits import LISTEN_BACKLOG, ServerLimits
from tokenpath.workers import claim_port, reuseport_socket, run_worker_group

log = logging.getLogger("tokenpath.gateway")


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
        self.auth = Authenticator(cfg.auth)
        self.app = GatewayApp(cfg, self.auth, self.registry)

    @property
    def port(self) -> int:
        return bound_port(self._server)

    @property
    def url(self) -> str:
        host = self.cfg.listen_host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    async def start(self) -> int:
        if self.auth.jwks is not None:
            await self.auth.jwks.start()
            if not self.auth.jwks.keys:
                raise UsageError(f"could not fetch any key from {self.cfg.auth.jwks_url}")
        loop = asyncio.get_running_loop()
        limits = self.cfg.limits
        app = self.app
        server_limits = ServerLimits(
            max_body_bytes=limits.max_body_bytes, max_head_bytes=limits.max_head_bytes,
            request_timeout_s=limits.header_timeout_s, write_buffer_high=limits.write_buffer_bytes,
        )  # fmt: skip

        def factory() -> HTTPConnection:
            return HTTPConnection(app, server_limits)

        self._server = await listen(factory, self.cfg.listen_host, self.cfg.listen_port, self._sock)
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
        return self.port

    async def close(self, drain_s: float | None = None) -> int:
        """Stop accepting, drain open streams (up to drain_s), close. Returns the streams cut off."""
        if self._server is not None:
            self._server.close()
        if self._health is not None:
            self._health.cancel()
        cut = await self.app.drain(self.cfg.limits.drain_s if drain_s is None else drain_s)
        if self.auth.jwks is not None:
            await self.auth.jwks.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        return cut


def run(
    cfg: GatewayConfig, announce: Callable[[str], None], loop_name: str = "uvloop", log_level: str = "info"
) -> None:
    configure_logging(log_level)
    if cfg.auth.mode == "none":
        log.warning(json.dumps({"event": "auth_disabled", "message": "--no-auth: every request is let through "
                                "without authentication"}))  # fmt: skip
    if cfg.workers == 1:
        registry = CollectorRegistry()
        if cfg.metrics_port is not None:
            metrics.serve(cfg.metrics_host, cfg.metrics_port, registry)
        _serve_forever(cfg, announce, loop_name, None, registry)
        return
    _run_workers(cfg, announce, loop_name, log_level)


def _serve_forever(
    cfg: GatewayConfig,
    announce: Callable[[str], None],
    loop_name: str,
    sock: socket.socket | None,
    registry: CollectorRegistry | None,
) -> None:
    loop = new_event_loop(loop_name)
    asyncio.set_event_loop(loop)
    server = GatewayServer(cfg, sock=sock, registry=registry)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def main() -> None:
        await server.start()
        # Everything allocated so far (modules, config, keys) lives as long as the process: move it out of the
        # collector's view, so a full collection walks only per-request objects (short pauses, not whole-heap ones).
        gc.collect()
        gc.freeze()
        metrics_note = f", metrics on {cfg.metrics_host}:{cfg.metrics_port}" if cfg.metrics_port else ""
        announce(f"listening on {server.url} ({len(cfg.pools)} pool(s), auth {cfg.auth.mode}{metrics_note})")
        await stop.wait()
        cut = await server.close()
        if cut:
            log.warning(json.dumps({"event": "drain_deadline", "streams_cut": cut}))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _run_workers(cfg: GatewayConfig, announce: Callable[[str], None], loop_name: str, log_level: str) -> None:
    holder = claim_port(cfg.listen_host, cfg.listen_port)  # fixes the port for --listen :0
    port = holder.getsockname()[1]
    metrics.sweep_orphaned_dirs()
    multiproc_dir = Path(tempfile.mkdtemp(prefix=f"{metrics.MULTIPROC_PREFIX}{os.getpid()}-"))
    metrics.enable_multiprocess(multiproc_dir)  # inherited by the spawned workers

    def ready(messages: list[str]) -> None:
        if cfg.metrics_port is not None:
            metrics.serve(cfg.metrics_host, cfg.metrics_port, None, multiproc_dir)
        host = f"[{cfg.listen_host}]" if ":" in cfg.listen_host else cfg.listen_host
        announce(f"listening on http://{host}:{port} ({cfg.workers} workers, auth {cfg.auth.mode})")

    try:
        run_worker_group("gateway", _worker_main, (replace(cfg, listen_port=port), loop_name, log_level),
                         cfg.workers, ready, join_timeout_s=cfg.limits.drain_s + 5)  # fmt: skip
    finally:
        holder.close()
        shutil.rmtree(multiproc_dir, ignore_errors=True)


def _worker_main(cfg: GatewayConfig, loop_name: str, log_level: str, pipe: Connection) -> None:
    configure_logging(log_level)
    try:
        sock = reuseport_socket(cfg.listen_host, cfg.listen_port)
        sock.listen(LISTEN_BACKLOG)
    except (OSError, UsageError) as exc:
        pipe.send(f"cannot listen on {cfg.listen_host}:{cfg.listen_port}: {exc}")
        return
    try:
        _serve_forever(cfg, lambda line: pipe.send("ready " + line), loop_name, sock, None)
    except UsageError as exc:
        pipe.send(str(exc))
