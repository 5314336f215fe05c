"""The one server runner (uvicorn's `Config` / `Server` shape): bind, N SO_REUSEPORT workers, signals, drain.

What differs between the stub, the gateway and the monitor's exporter is the app, made by a factory in the process
that serves it; everything around it is here, once:

    Server(Config("gateway", host, port, workers=4), partial(make_app, cfg)).run(announce)

- one process (`workers == 1`): an event loop (`loop`), `factory(None)`, SIGINT/SIGTERM handlers, `await
  app.start()`, one `listening on URL (note)` line, then on a signal (or `exit()`) `await app.close()`, which drains;
- N workers: the parent claims the port (bound, never listening, so `port = 0` gives every worker the same port and
  nobody else's orphaned workers share it) and spawns the workers; each listens on its own SO_REUSEPORT socket,
  `factory(sock)`, and runs as one process above; once all accept, one line for the group. A signal to the parent
  is passed on as SIGTERM, and each worker gets `drain_s` (+ 5 s) to drain before it is left.

The factory is pickled into spawned workers: a module-level function, or a `functools.partial` of one.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Protocol

from tokenpath.errors import UsageError
from tokenpath.hostport import join_hostport
from tokenpath.serve.loops import new_event_loop
from tokenpath.serve.workers import claim_port, reuseport_socket, run_worker_group
from tokenpath.wire.limits import LISTEN_BACKLOG

STOP_GRACE_S = 5.0  # past its drain, what a stopping worker is given before the parent stops waiting for it


class App(Protocol):
    """One process's server (StubServer, GatewayServer, the monitor's Exporter)."""

    @property
    def url(self) -> str:
        """Where it serves, once started."""
        ...

    def note(self) -> str:
        """What its `listening on URL (...)` line says in the brackets."""
        ...

    async def start(self) -> object:
        """Bind (the worker's socket when given one, else host:port) and serve. A UsageError is the user's to fix."""
        ...

    async def close(self) -> object:
        """Stop accepting, drain what is open (within its deadline), close."""
        ...


AppFactory = Callable[[socket.socket | None], App]


@dataclass(frozen=True, slots=True)
class Config:
    """How a server runs, whatever it serves."""

    name: str  # "stub", "gateway": names its workers in messages
    host: str
    port: int
    workers: int = 1
    loop: str = "uvloop"  # serve.loops.new_event_loop
    drain_s: float = 0.0  # how long a worker's close() may take
    scheme: str = "http"  # what the group's `listening on` line says (https: a TLS listener)


class Server:
    """Runs `factory`'s app until SIGINT/SIGTERM, as one process or as `config.workers` workers on one port."""

    def __init__(self, config: Config, factory: AppFactory) -> None:
        self.config = config
        self.factory = factory
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def run(self, announce: Callable[[str], None]) -> None:
        """Serve until a signal. `announce` gets one `listening on URL (...)` line once every process accepts."""
        if self.config.workers == 1:
            self.serve(lambda app: announce(f"listening on {app.url} ({app.note()})"))
        else:
            self._supervise(announce)

    def serve(self, on_ready: Callable[[App], None], sock: socket.socket | None = None) -> None:
        """One process: the app on its own event loop, from start to a drained close."""
        loop = new_event_loop(self.config.loop)
        asyncio.set_event_loop(loop)
        self._loop, self._stop = loop, asyncio.Event()

        async def main(app: App, stop: asyncio.Event) -> None:
            await app.start()
            # Everything allocated so far (modules, config, keys) lives as long as the process:
            # move it out of the collector's view, so a full collection walks only per-request objects (short
            # pauses, not whole-heap ones).
            gc.collect()
            gc.freeze()
            on_ready(app)
            await stop.wait()
            await app.close()

        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._stop.set)
            loop.run_until_complete(main(self.factory(sock), self._stop))
        finally:
            self._loop = None
            loop.close()

    def exit(self) -> None:
        """Ends `serve()` as SIGTERM would, from any thread (an app whose own work ended: the monitor's watch)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def _supervise(self, announce: Callable[[str], None]) -> None:
        cfg = self.config
        holder = claim_port(cfg.host, cfg.port)
        port = holder.getsockname()[1]

        def ready(notes: list[str]) -> None:
            note = notes[-1].removeprefix("ready ")
            announce(f"listening on {cfg.scheme}://{join_hostport(cfg.host, port)} ({cfg.workers} workers, {note})")

        try:
            worker = replace(cfg, port=port, workers=1)
            run_worker_group(
                cfg.name, _worker_main, (worker, self.factory), cfg.workers, ready, cfg.drain_s + STOP_GRACE_S
            )
        finally:
            holder.close()


def _worker_main(cfg: Config, factory: AppFactory, pipe: Connection) -> None:
    """A spawned worker: its own SO_REUSEPORT socket on the group's port; "ready NOTE", or why not, on `pipe`."""
    try:
        sock = reuseport_socket(cfg.host, cfg.port)
        sock.listen(LISTEN_BACKLOG)
    except UsageError as exc:
        pipe.send(str(exc))
        return
    except OSError as exc:
        pipe.send(f"cannot listen on {join_hostport(cfg.host, cfg.port)}: {exc.strerror}")
        return
    try:
        Server(cfg, factory).serve(lambda app: pipe.send(f"ready {app.note()}"), sock)
    except UsageError as exc:
        pipe.send(str(exc))
