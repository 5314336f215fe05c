"""Runs the stub: one process on an event loop, or N worker processes sharing a port with SO_REUSEPORT."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.http_server import HTTPConnection, bound_port, listen
from tokenpath.loops import new_event_loop
from tokenpath.priority import raise_priority, tighten_timer_slack
from tokenpath.stub.app import StubApp
from tokenpath.stub.audit import AuditStore
from tokenpath.stub.config import StubConfig
from tokenpath.stub.frames import check_frame_bytes
from tokenpath.stub.pacing import Pacer
from tokenpath.stub.siblings import socket_path
from tokenpath.wire.limits import LISTEN_BACKLOG, ServerLimits
from tokenpath.workers import claim_port, reuseport_socket, run_worker_group


class StubServer:
    """The stub as a library object: `await start()` binds and serves until `close()`."""

    def __init__(self, cfg: StubConfig, clock: Clock = monotonic_ns, sock: socket.socket | None = None) -> None:
        self.cfg = cfg
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
        return f"http://{_url_host(self.cfg.host)}:{self.port}"

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self.app = StubApp(self.cfg, Pacer(loop, self.clock), self.audit, self.clock)
        app = self.app
        limits = ServerLimits(max_body_bytes=self.cfg.max_body_bytes)

        def factory() -> HTTPConnection:
            return HTTPConnection(app, limits)

        self._server = await listen(factory, self.cfg.host, self.cfg.port, self._sock)
        if self.cfg.audit_dir:  # one of several workers: siblings ask us for our streams' audits here
            self._peer_server = await loop.create_unix_server(factory, socket_path(self.cfg.audit_dir))
        return self.port

    async def close(self) -> None:
        if self._peer_server is not None:
            self._peer_server.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)


def run(cfg: StubConfig, announce: Callable[[str], None], loop_name: str = "uvloop") -> None:
    """Serve until SIGINT/SIGTERM. `announce` gets one line once every worker is accepting connections."""
    check_frame_bytes(cfg)
    if cfg.workers == 1:
        _serve_forever(cfg, announce, loop_name, None)
        return
    _run_workers(cfg, announce, loop_name)


def _serve_forever(
    cfg: StubConfig, announce: Callable[[str], None], loop_name: str, sock: socket.socket | None
) -> None:
    tighten_timer_slack()
    priority = raise_priority(cfg.priority)
    loop = new_event_loop(loop_name)
    asyncio.set_event_loop(loop)
    server = StubServer(cfg, sock=sock)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def main() -> None:
        await server.start()
        announce(f"listening on {server.url} (priority {priority})")
        await stop.wait()
        await server.close()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _run_workers(cfg: StubConfig, announce: Callable[[str], None], loop_name: str) -> None:
    # The parent holds the port (bound, never listening, so the kernel hands it no connections) so that
    # --port 0 gives every worker the same port; each worker then listens on its own SO_REUSEPORT socket.
    holder = claim_port(cfg.host, cfg.port)
    port = holder.getsockname()[1]
    audit_dir = tempfile.mkdtemp(prefix="tokenpath-audit-")
    wcfg = replace(cfg, port=port, audit_dir=audit_dir)

    def ready(messages: list[str]) -> None:
        priority = messages[-1].rsplit("priority ", 1)[-1].rstrip(")")
        announce(f"listening on http://{_url_host(cfg.host)}:{port} ({cfg.workers} workers, priority {priority})")

    try:
        run_worker_group("stub", _worker_main, (wcfg, loop_name), cfg.workers, ready)
    finally:
        holder.close()
        shutil.rmtree(audit_dir, ignore_errors=True)


def _worker_main(cfg: StubConfig, loop_name: str, pipe: Connection) -> None:
    try:
        sock = reuseport_socket(cfg.host, cfg.port)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        pipe.send(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}")
        return
    _serve_forever(cfg, lambda line: pipe.send("ready " + line), loop_name, sock)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
