"""Helpers for servers that run N worker processes on one port (the stub, the gateway)."""

from __future__ import annotations

import multiprocessing
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from tokenpath.errors import ServiceError, UsageError


def wait_for_signal_or_exit(procs: Sequence[multiprocessing.process.BaseProcess]) -> int | None:
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


def reuseport_socket(host: str, port: int) -> socket.socket:
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


WORKER_START_TIMEOUT_S = 20.0


def run_worker_group(
    name: str,
    target: Callable[..., None],
    args: tuple[Any, ...],
    count: int,
    on_ready: Callable[[list[str]], None],
    join_timeout_s: float = 5.0,
) -> None:
    """Spawn `count` processes running `target(*args, pipe)`; each sends "ready ..." (or why it failed) on its pipe.
    Once all are ready, `on_ready(messages)`; then wait for SIGINT/SIGTERM or a worker's exit, and stop them all
    (SIGTERM, so each can drain, then join)."""
    ctx = multiprocessing.get_context("spawn")
    procs = []
    try:
        pipes: list[Connection] = []
        for _ in range(count):
            parent_end, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=target, args=(*args, child_end), daemon=True)
            proc.start()
            procs.append(proc)
            pipes.append(parent_end)
        messages = []
        for pipe in pipes:
            if not pipe.poll(WORKER_START_TIMEOUT_S):
                raise ServiceError(f"a {name} worker did not start within {WORKER_START_TIMEOUT_S:.0f} s")
            message = pipe.recv()
            if not message.startswith("ready"):
                raise ServiceError(f"a {name} worker failed: {message}")
            messages.append(message)
        on_ready(messages)
        code = wait_for_signal_or_exit(procs)
        if code is not None:
            print(f"tokenpath {name}: a worker exited with code {code}; stopping", file=sys.stderr)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(join_timeout_s)
