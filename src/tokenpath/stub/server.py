"""Runs the stub: one process on an event loop, or N worker processes sharing a port with SO_REUSEPORT."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
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
from tokenpath.loops import new_event_loop
from tokenpath.stub.app import StubApp
from tokenpath.stub.audit import AuditStore
from tokenpath.stub.config import StubConfig
from tokenpath.stub.http_server import HTTPConnection
from tokenpath.stub.pacing import Pacer

WORKER_START_TIMEOUT_S = 20.0


class StubServer:
    """The stub as a library object: `await start()` binds and serves until `close()`."""

    def __init__(self, cfg: StubConfig, clock: Clock = monotonic_ns, sock: socket.socket | None = None) -> None:
        self.cfg = cfg
        self.clock = clock
        self._sock = sock
        self._server: asyncio.Server | None = None
        self.app: StubApp | None = None
        self.audit = AuditStore(cfg.audit_dir)

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{_url_host(self.cfg.host)}:{self.port}"

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self.app = StubApp(self.cfg, Pacer(loop, self.clock), self.audit, self.clock)
        app = self.app
        max_body = self.cfg.max_body_bytes

        def factory() -> HTTPConnection:
            return HTTPConnection(app, max_body_bytes=max_body)

        try:
            if self._sock is not None:
                self._server = await loop.create_server(factory, sock=self._sock, backlog=4096)
            else:
                self._server = await loop.create_server(
                    factory, self.cfg.host, self.cfg.port, backlog=4096, reuse_address=True
                )
        except OSError as exc:
            raise UsageError(f"cannot listen on {self.cfg.host}:{self.cfg.port}: {exc.strerror}") from None
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)


def run(cfg: StubConfig, announce: Callable[[str], None], loop_name: str = "uvloop") -> None:
    """Serve until SIGINT/SIGTERM. `announce` gets one line once every worker is accepting connections."""
    if cfg.workers == 1:
        _serve_forever(cfg, announce, loop_name, None)
        return
    _run_workers(cfg, announce, loop_name)


def _serve_forever(
    cfg: StubConfig, announce: Callable[[str], None], loop_name: str, sock: socket.socket | None
) -> None:
    loop = new_event_loop(loop_name)
    asyncio.set_event_loop(loop)
    server = StubServer(cfg, sock=sock)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def main() -> None:
        await server.start()
        announce(f"listening on {server.url}")
        await stop.wait()
        await server.close()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _run_workers(cfg: StubConfig, announce: Callable[[str], None], loop_name: str) -> None:
    # The parent holds the port (bound, never listening, so the kernel hands it no connections) so that
    # --port 0 gives every worker the same port; each worker then listens on its own SO_REUSEPORT socket.
    holder = _reuseport_socket(cfg.host, cfg.port)
    port = holder.getsockname()[1]
    audit_dir = tempfile.mkdtemp(prefix="tokenpath-audit-")
    wcfg = replace(cfg, port=port, audit_dir=audit_dir)
    ctx = multiprocessing.get_context("spawn")
    procs = []
    pipes: list[Connection] = []
    try:
        for _ in range(cfg.workers):
            parent_end, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_worker_main, args=(wcfg, loop_name, child_end), daemon=True)
            proc.start()
            procs.append(proc)
            pipes.append(parent_end)
        for pipe in pipes:
            if not pipe.poll(WORKER_START_TIMEOUT_S):
                raise UsageError(f"a stub worker did not start within {WORKER_START_TIMEOUT_S:.0f} s")
            message = pipe.recv()
            if message != "ready":
                raise UsageError(f"a stub worker failed: {message}")
        announce(f"listening on http://{_url_host(cfg.host)}:{port} ({cfg.workers} workers)")
        stop = _wait_for_signal_or_exit(procs)
        if stop is not None:
            print(f"tokenpath stub: a worker exited with code {stop}; stopping", file=sys.stderr)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(5)
        holder.close()
        shutil.rmtree(audit_dir, ignore_errors=True)


def _wait_for_signal_or_exit(procs: list[multiprocessing.process.BaseProcess]) -> int | None:
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    from multiprocessing.connection import wait

    while not stopping:
        wait([p.sentinel for p in procs], timeout=0.5)
        for proc in procs:
            if proc.exitcode is not None:
                return proc.exitcode
    return None


def _worker_main(cfg: StubConfig, loop_name: str, pipe: Connection) -> None:
    try:
        sock = _reuseport_socket(cfg.host, cfg.port)
        sock.listen(4096)
    except OSError as exc:
        pipe.send(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}")
        return
    _serve_forever(cfg, lambda _line: pipe.send("ready"), loop_name, sock)


def _reuseport_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
