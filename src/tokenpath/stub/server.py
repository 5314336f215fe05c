"""Runs the stub: one process on an event loop, or N worker processes sharing a port with SO_REUSEPORT."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.errors import UsageError
from tokenpath.http_server import HTTPConnection, bound_port, listen
from tokenpath.loops import new_event_loop
from tokenpath.stub.app import StubApp
from tokenpath.stub.audit import AuditStore
from tokenpath.stub.config import REALTIME_PRIORITY, Priority, StubConfig
from tokenpath.stub.frames import check_frame_bytes
from tokenpath.stub.pacing import Pacer
from tokenpath.stub.siblings import socket_path
from tokenpath.wire.limits import LISTEN_BACKLOG, ServerLimits
from tokenpath.workers import reuseport_socket, run_worker_group

PR_SET_TIMERSLACK = 29  # from <linux/prctl.h>


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
    _tighten_timer_slack()
    priority = _raise_priority(cfg.priority)
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
    holder = reuseport_socket(cfg.host, cfg.port)
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


def _raise_priority(wanted: Priority) -> str:
    """The emitter's schedule is the experiment's reference clock. Under CPU contention (a proxy and a client on
    the same cores) a normal-priority stub is preempted for several ms at a time, and at hundreds of streams
    one such stall fails dozens of streams' audits. Measured here, two stubs side by side at 500 streams, 15
    alternating rounds: 166 of 7,500 streams failed at SCHED_FIFO against 464 at normal priority (bench/RESULTS.md).
    The kernel's RT throttling keeps a runaway stub to 95 % of a core, and an overloaded stub fails its own
    audit. `auto` uses it when the OS permits."""
    if wanted == "normal":
        return "normal"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except (OSError, AttributeError) as exc:
        if wanted == "realtime":
            raise UsageError(
                f"--priority realtime: the OS refused SCHED_FIFO ({exc}); run as root or use auto"
            ) from None
        return "normal"
    return f"realtime (SCHED_FIFO {REALTIME_PRIORITY})"


def _tighten_timer_slack() -> None:
    """Linux lets a sleep overshoot by up to 50 us (timer slack) to batch wake-ups; the pacer's short precise
    waits then land ~90 us late at the median (measured here), ~40 us with 1 us of slack. Best effort."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
