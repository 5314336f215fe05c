"""Two network namespaces joined by a veth pair with a real MTU, torn down on exit (also on failure).

Loopback's ~64 KB MSS hides coalescing that stops once a full 1,448-byte segment fills; a veth pair at MTU 1500
does not. The stub and proxies run in the `server` namespace, the probe's sockets are made in the `client`
namespace, so every byte measured crosses the veth. Addresses are private and exist only inside these
namespaces. Needs root (CAP_NET_ADMIN); `available()` says why not when it cannot.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from tokenpath.errors import NetnsError

CLONE_NEWNET = 0x40000000
SERVER_ADDR, CLIENT_ADDR, PREFIX = "10.99.0.1", "10.99.0.2", 30


def available() -> str | None:
    """None when veth links can be made here, else the reason in one line."""
    if os.geteuid() != 0:
        return "veth links need root (network namespaces); skipped"
    if subprocess.run(["ip", "-V"], capture_output=True, check=False).returncode != 0:
        return "veth links need iproute2's `ip`; skipped"
    return None


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {out.stderr.strip()}")


class _Namespaces:
    """Namespaces made on entry and removed on exit, also when making them fails half-way."""

    def __enter__(self) -> Self:
        reason = available()
        if reason:
            raise NetnsError(reason)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _build(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class VethPair(_Namespaces):
    def __init__(self, mtu: int = 1500, tag: str | None = None) -> None:
        tag = tag or f"{os.getpid() % 100000}"
        self.server = f"tp-s-{tag}"
        self.client = f"tp-c-{tag}"
        self._server_if, self._client_if = f"tps{tag}"[:15], f"tpc{tag}"[:15]
        self.mtu = mtu
        self.server_addr = SERVER_ADDR
        self.client_addr = CLIENT_ADDR

    def _build(self) -> None:
        _ip("netns", "add", self.server)
        _ip("netns", "add", self.client)
        _ip(
            "link",
            "add",
            self._server_if,
            "netns",
            self.server,
            "type",
            "veth",
            "peer",
            "name",
            self._client_if,
            "netns",
            self.client,
        )
        for ns, dev, addr in (
            (self.server, self._server_if, SERVER_ADDR),
            (self.client, self._client_if, CLIENT_ADDR),
        ):
            _ip("-n", ns, "addr", "add", f"{addr}/{PREFIX}", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "mtu", str(self.mtu), "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def close(self) -> None:
        for ns in (self.server, self.client):  # deleting a namespace deletes its end of the veth
            with contextlib.suppress(NetnsError):
                _ip("netns", "del", ns)

    def wrap_server(self, argv: list[str]) -> list[str]:
        """Runs a command inside the server namespace."""
        return ["ip", "netns", "exec", self.server, *argv]

    def client_socket(self, family: int = socket.AF_INET) -> socket.socket:
        return socket_in(self.client, family)

    def client_connect(self, host: str, port: int, timeout_s: float) -> socket.socket:
        sock = self.client_socket()
        sock.settimeout(timeout_s)
        try:
            sock.connect((host, port))
        except OSError:
            sock.close()
            raise
        return sock


def _setns(path: Path | str, what: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise NetnsError(f"setns({what}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


@contextlib.contextmanager
def entered(namespace: str) -> Iterator[None]:
    """The calling thread inside `namespace` until the block ends, then back where it was. Threads and processes
    it starts meanwhile are born there (they inherit the thread's namespace) and stay there."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(Path("/run/netns") / namespace, namespace)
        try:
            yield
        finally:
            _setns(f"/proc/self/fd/{home}", "the original namespace")
    finally:
        os.close(home)


class Star(_Namespaces):
    """N namespaces on one private subnet: node 0 holds a bridge, every other node a veth into it (MTU 1500), so
    any two nodes reach each other across a real link. `addr(i)` is node i's address. For a local cluster of
    simulated hosts (load --cluster local:N). Everything is removed on exit, processes left inside included."""

    SUBNET = "10.98.0"

    def __init__(self, nodes: int, tag: str | None = None, mtu: int = 1500) -> None:
        tag = tag or f"{os.getpid() % 100000}"
        self.names = [f"tp-n{i}-{tag}" for i in range(nodes)]
        self._bridge = f"tpbr{tag}"[:15]
        self._tag = tag
        self.mtu = mtu

    def addr(self, i: int) -> str:
        return f"{self.SUBNET}.{i + 1}"

    def _build(self) -> None:
        for name in self.names:
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
        hub = self.names[0]
        _ip("-n", hub, "link", "add", self._bridge, "type", "bridge")
        _ip("-n", hub, "addr", "add", f"{self.addr(0)}/24", "dev", self._bridge)
        _ip("-n", hub, "link", "set", self._bridge, "mtu", str(self.mtu), "up")
        for i, name in enumerate(self.names[1:], 1):
            hub_end, node_end = f"tph{i}x{self._tag}"[:15], f"tpn{i}x{self._tag}"[:15]
            _ip("link", "add", hub_end, "netns", hub, "type", "veth", "peer", "name", node_end, "netns", name)
            _ip("-n", hub, "link", "set", hub_end, "master", self._bridge)
            _ip("-n", hub, "link", "set", hub_end, "mtu", str(self.mtu), "up")
            _ip("-n", name, "addr", "add", f"{self.addr(i)}/24", "dev", node_end)
            _ip("-n", name, "link", "set", node_end, "mtu", str(self.mtu), "up")

    def wrap(self, i: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[i], *argv]

    def close(self) -> None:
        """Every process still inside a node is killed (daemons such as Ray's raylet outlive what started them),
        then the namespaces are deleted."""
        for name in self.names:
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False).stdout
            for pid in (int(p) for p in pids.split() if p.isdigit()):
                if pid != os.getpid():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        for name in self.names:
            with contextlib.suppress(NetnsError):
                _ip("netns", "del", name)


def socket_in(namespace: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A socket that lives in `namespace`. setns() moves only the calling thread, so a short-lived thread
    enters the namespace, makes the socket and exits; the socket keeps its namespace wherever it is used."""
    result: dict[str, socket.socket | BaseException] = {}

    def make() -> None:
        try:
            _setns(Path("/run/netns") / namespace, namespace)
            result["socket"] = socket.socket(family, kind)
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if "error" in result:
        error = result["error"]
        assert isinstance(error, BaseException)
        raise error
    sock = result["socket"]
    assert isinstance(sock, socket.socket)
    return sock
