"""Two network namespaces joined by a veth pair with a real MTU, torn down on exit (also on failure).

Loopback's ~64 KB MSS hides coalescing that stops once a full 1,448-byte segment fills; a veth pair at MTU 1500
does not. The stub and proxies run in the `server` namespace, the probe's sockets are made in the `client`
namespace, so every byte measured crosses the veth. Addresses are private and exist only inside these
namespaces. Needs root (CAP_NET_ADMIN); `available()` says why not when it cannot.

A run killed outright (SIGKILL, the OOM killer) cannot delete its namespaces; each set's owner is written down first
(links/owners.py), and the next run to make namespaces sweeps away the sets of owners that are gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from tokenpath.errors import NetnsError
from tokenpath.links import owners

CLONE_NEWNET = 0x40000000
SERVER_ADDR, CLIENT_ADDR, PREFIX = "10.99.0.1", "10.99.0.2", 30
IFNAMSIZ = 15  # Linux's longest interface name
OURS = re.compile(r"tp-(?:s|c|n\d+)-.+")  # the names VethPair and Star make

log = logging.getLogger(__name__)


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


def _listed() -> set[str]:
    """The namespaces `ip netns list` shows (each line a name, maybe followed by "(id: N)")."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _ifname(name: str) -> str:
    """A longer name would be cut by the kernel's limit, and two runs' cut names could clash."""
    if len(name) > IFNAMSIZ:
        raise NetnsError(f"interface name {name!r} is over {IFNAMSIZ} characters: give the namespaces a shorter tag")
    return name


def _default_tag() -> str:
    """The pid whole: unique among live processes, at most 7 digits (pid_max is at most 2**22)."""
    return str(os.getpid())


def _remove(names: Sequence[str]) -> list[str]:
    """Kills every process still inside `names` (daemons such as Ray's raylet outlive what started them), then
    deletes the namespaces; returns those still there."""
    for name in names:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False).stdout
        for pid in (int(p) for p in pids.split() if p.isdigit()):
            if pid != os.getpid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    for name in names:
        with contextlib.suppress(NetnsError):
            _ip("netns", "del", name)
    left = _listed()
    return [name for name in names if name in left]


def sweep() -> None:
    """Removes the namespaces of runs that died without removing them, and what still runs inside them. Only the
    names a gone owner's marker lists are touched: never a live run's, never a name no marker of ours gives. Call
    it holding owners.locked(), so that a run starting beside this one has its marker read whole or not yet made."""
    listed = _listed()
    marked: set[str] = set()
    for marker in owners.markers():
        marked.update(marker.namespaces)
        # Only names of ours: a marker is root's to write, but one that named another tool's namespace would
        # otherwise have it deleted and what runs in it killed.
        ours = [n for n in marker.namespaces if n in listed and OURS.fullmatch(n)]
        if owners.gone(marker.owner) and not _remove(ours):
            owners.release(marker)  # kept when a namespace would not go, so a later sweep tries again
    # Names like ours that no marker lists were made before runs wrote markers (or by a copy of tokenpath that does
    # not): whether their run is still alive cannot be told, so they are named, never deleted.
    unmarked = sorted(n for n in listed - marked if OURS.fullmatch(n))
    if unmarked:
        commands = "; ".join(f"ip netns delete {n}" for n in unmarked)
        log.warning("network namespaces named like tokenpath's that no run claims (left by an older version?): %s; "
                    "if nothing uses them: %s", ", ".join(unmarked), commands)  # fmt: skip


class _Namespaces:
    """Namespaces made on entry and removed on exit (with every process left inside), also when making them fails
    half-way. Their owner is written down before they are made and crossed out after they are deleted, so a run
    that is killed before it can delete them leaves them to the next run's sweep()."""

    names: list[str]
    _marker: owners.Marker | None = None

    def __enter__(self) -> Self:
        reason = available()
        if reason:
            raise NetnsError(reason)
        with owners.locked():
            sweep()
            self._marker = owners.claim(self.names)
            there = sorted(set(self.names) & _listed())  # unmarked: an older run's (sweep() named them)
        if there:
            self._release()
            commands = "; ".join(f"ip netns delete {n}" for n in there)
            raise NetnsError(f"network namespaces {', '.join(there)} already exist and no run claims them: give this "
                             f"run another tag, or if nothing uses them: {commands}")  # fmt: skip
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
        if self._marker is not None and not _remove(self.names):
            self._release()

    def _release(self) -> None:
        if self._marker is not None:
            with owners.locked():
                owners.release(self._marker)
            self._marker = None


class VethPair(_Namespaces):
    def __init__(self, mtu: int = 1500, tag: str | None = None) -> None:
        tag = tag or _default_tag()
        self.server = f"tp-s-{tag}"
        self.client = f"tp-c-{tag}"
        self.names = [self.server, self.client]
        self._server_if, self._client_if = _ifname(f"tps{tag}"), _ifname(f"tpc{tag}")
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
    simulated hosts (load --cluster local:N). Everything is removed on exit, processes left inside included
    (deleting a node deletes the bridge and the veth ends in it)."""

    SUBNET = "10.98.0"

    def __init__(self, nodes: int, tag: str | None = None, mtu: int = 1500) -> None:
        tag = tag or _default_tag()
        self.names = [f"tp-n{i}-{tag}" for i in range(nodes)]
        self._bridge = _ifname(f"tpbr{tag}")
        self._veths = [(_ifname(f"tph{i}x{tag}"), _ifname(f"tpn{i}x{tag}")) for i in range(1, nodes)]
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
        for i, (name, (hub_end, node_end)) in enumerate(zip(self.names[1:], self._veths, strict=True), 1):
            _ip("link", "add", hub_end, "netns", hub, "type", "veth", "peer", "name", node_end, "netns", name)
            _ip("-n", hub, "link", "set", hub_end, "master", self._bridge)
            _ip("-n", hub, "link", "set", hub_end, "mtu", str(self.mtu), "up")
            _ip("-n", name, "addr", "add", f"{self.addr(i)}/24", "dev", node_end)
            _ip("-n", name, "link", "set", node_end, "mtu", str(self.mtu), "up")

    def wrap(self, i: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[i], *argv]


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
