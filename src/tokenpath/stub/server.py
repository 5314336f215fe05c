"""The stub's server: StubServer (one process's), and run(): it under serve.runner, one process or N workers."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.hostport import join_hostport
from tokenpath.serve.http import HTTPConnection, bound_port, listen
from tokenpath.serve.listener import serve_factory
from tokenpath.serve.priority import raise_priority, tighten_timer_slack
from tokenpath.serve.runner import Config, Server
from tokenpath.stub.app import StubApp, load_recordings
from tokenpath.stub.audit import AuditStore
from tokenpath.stub.config import StubConfig
from tokenpath.stub.formats import check_start
from tokenpath.stub.pacing import Pacer
from tokenpath.stub.siblings import socket_path
from tokenpath.wire.limits import ServerLimits


class StubServer:
    """The stub as a library object: `await start()` binds and serves until `close()`. `priority`: the scheduling
    its process got (serve.priority), for its `listening on` line."""

    def __init__(
        self,
        cfg: StubConfig,
        clock: Clock = monotonic_ns,
        sock: socket.socket | None = None,
        priority: str = "normal",
    ) -> None:
        self.cfg = cfg
        self.priority = priority
        self.clock = clock
        self._sock = sock
        self._server: asyncio.Server | None = None
        self.app: StubApp | None = None
        self.audit = AuditStore()
        self._peer_server: asyncio.AbstractServer | None = None

    @property
    def port(self) -> int:
        return bound_port(self._server)

    @property
    def url(self) -> str:
        return f"http://{join_hostport(self.cfg.host, self.port)}"

    def note(self) -> str:
        return f"priority {self.priority}"

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self.app = StubApp(self.cfg, Pacer(loop, self.clock), self.audit, self.clock)
        app = self.app
        limits = ServerLimits(max_body_bytes=self.cfg.max_body_bytes, upgrades=frozenset({"websocket"}))

        def factory() -> HTTPConnection:
            return HTTPConnection(app, limits)

        # HTTP/1.1, and HTTP/2 with prior knowledge (h2c) on the same port, told apart by the client's first bytes
        self._server = await listen(serve_factory(app, limits), self.cfg.host, self.cfg.port, self._sock)
        if self.cfg.audit_dir:  # one of several workers: siblings ask us for our streams' audits here
            self._peer_server = await loop.create_unix_server(factory, socket_path(self.cfg.audit_dir))
        return self.port

    async def close(self) -> None:
        if self.app is not None:
            self.app.cancel_builds()
        if self._peer_server is not None:
            self._peer_server.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)


def run(cfg: StubConfig, announce: Callable[[str], None], loop_name: str = "uvloop") -> None:
    """Serve until SIGINT/SIGTERM. `announce` gets one line once every worker is accepting connections."""
    check_start(cfg)
    load_recordings(cfg)  # a bad recording is one line before anything listens
    config = Config("stub", cfg.host, cfg.port, cfg.workers, loop_name)
    if cfg.workers == 1:
        Server(config, partial(_app, cfg)).run(announce)
        return
    audit_dir = tempfile.mkdtemp(prefix="tokenpath-audit-")  # siblings answer each other's audit lookups here
    try:
        Server(config, partial(_app, replace(cfg, audit_dir=audit_dir))).run(announce)
    finally:
        shutil.rmtree(audit_dir, ignore_errors=True)


def _app(cfg: StubConfig, sock: socket.socket | None) -> StubServer:
    """One process's stub, at the instrument's scheduling (1 us timer slack, SCHED_FIFO when permitted)."""
    tighten_timer_slack()
    return StubServer(cfg, sock=sock, priority=raise_priority(cfg.priority))
