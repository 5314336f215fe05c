"""Helpers for servers that run N worker processes on one port (the stub, the gateway)."""

from __future__ import annotations

import multiprocessing
import signal
import socket
from collections.abc import Sequence

from tokenpath.errors import UsageError


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
