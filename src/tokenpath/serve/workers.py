"""Helpers for servers that run N worker processes on one port (the stub, the gateway)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import multiprocessing
import os
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


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (even by SIGKILL), so workers never outlive the
    process that owns the port; exits at once if the parent is already gone."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before prctl took effect
        os._exit(1)


def claim_port(host: str, port: int) -> socket.socket:
    """The SO_REUSEPORT socket that fixes a worker group's port, after checking nobody listens there: SO_REUSEPORT
    would otherwise let a new group share the port with orphaned workers of an old one (same user), splitting the
    traffic between the two without a word."""
    if port != 0:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise UsageError(
                        f"cannot listen on {host}:{port}: something already listens there (maybe "
                        "workers left by an earlier run)"
                    ) from None
                raise UsageError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    return reuseport_socket(host, port)


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
            proc = ctx.Process(target=_worker_entry, args=(target, *args, child_end), daemon=True)
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


def _worker_entry(target: Callable[..., None], *args: Any) -> None:
    die_with_parent()
    target(*args)
