"""The probe's one I/O seam: a connected, blocking, TCP_NODELAY socket (plain or TLS).

Everything above it (request building, framing, SSE, metrics) is sans-IO, so tests can script the bytes.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from tokenpath.errors import ConnectError, ConnectTimeout, DNSError, TLSError, UsageError

RECV_BYTES = 65536  # one recv() may return up to this; larger than any TCP segment burst we expect


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # request target, e.g. /v1/chat/completions

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host_header}"


def parse_target(url: str, default_path: str = "/v1/chat/completions") -> Target:
    """A base URL (`http://h:p`, `http://h:p/v1`) gets the chat path appended; a full endpoint path is kept."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket: 'http://[::1'
        raise UsageError(f"URL {url!r} is not valid: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"URL {url!r}: expected http:// or https://")
    if not parts.hostname:
        raise UsageError(f"URL {url!r} has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UsageError(f"URL {url!r} has an invalid port") from None
    path = parts.path.rstrip("/")
    if not path.endswith("completions"):
        path = path + default_path.removeprefix("/v1") if path.endswith("/v1") else path + default_path
    if parts.query:
        path += "?" + parts.query
    return Target(parts.scheme, parts.hostname, port, path)


class Transport(Protocol):
    def sendall(self, data: bytes) -> None: ...
    def recv(self, timeout_s: float) -> bytes: ...  # b"" at EOF; raises TimeoutError
    def drain(self) -> bytes: ...  # what is readable right now without waiting (b"" if nothing)
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TLSOptions:
    insecure: bool = False
    cacert: str | None = None

    def context(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(cafile=self.cacert)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"--cacert {self.cacert}: {exc}") from None
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx


class SocketTransport:
    """Plain TCP reads time out through SO_RCVTIMEO on a blocking socket: one syscall per read. (A Python socket
    timeout polls before every recv, which doubled the probe's CPU per frame.) TLS sockets use Python timeouts."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._plain = not isinstance(sock, ssl.SSLSocket)
        self._rcvtimeo: float | None = None

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(None)
        self._sock.sendall(data)

    def recv(self, timeout_s: float) -> bytes:
        if not self._plain:
            self._sock.settimeout(timeout_s)
            return self._sock.recv(RECV_BYTES)
        if timeout_s != self._rcvtimeo:
            self._rcvtimeo = timeout_s
            seconds = max(timeout_s, 1e-6)
            timeval = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        try:
            return self._sock.recv(RECV_BYTES)
        except BlockingIOError:  # EAGAIN from SO_RCVTIMEO: the timeout passed
            raise TimeoutError from None

    def drain(self) -> bytes:
        """Everything already decrypted or already in the socket buffer, read without blocking.

        One SSLSocket.recv() returns at most one TLS record, so a proxy that holds frames and then sends them as
        separate records in one burst would look like it streams; the client calls this right after a read returns
        and counts the lot as one arrival. A plain recv() already takes all that is buffered: nothing to do.
        """
        if self._plain:
            return b""
        sock = self._sock
        parts = []
        sock.setblocking(False)
        try:
            while True:
                try:
                    chunk = sock.recv(RECV_BYTES)
                except (ssl.SSLWantReadError, BlockingIOError):
                    break
                if not chunk:
                    break  # EOF: the next recv() reports it
                parts.append(chunk)
        finally:
            sock.setblocking(True)
        return b"".join(parts)

    def close(self) -> None:
        self._sock.close()

    def abort(self) -> None:
        """Wake a recv() blocked in another thread (it returns EOF): how a stopping monitor ends its probes at once.
        The plain socket's shutdown, not SSLSocket's, which would also drop the TLS object under the reader."""
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)


SocketFactory = Callable[[str, int, float], socket.socket]  # (host, port, timeout) -> connected socket


def open_connection(
    target: Target, *, connect_timeout_s: float, tls: TLSOptions, socket_factory: SocketFactory | None = None
) -> SocketTransport:
    """A connected TCP_NODELAY socket, TLS-wrapped for https. `socket_factory` connects instead of the resolver
    (e.g. with a socket made inside a network namespace)."""
    if socket_factory is not None:
        try:
            sock = socket_factory(target.host, target.port, connect_timeout_s)
        except OSError as exc:
            raise ConnectError(f"cannot connect to {target.host}:{target.port}: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return SocketTransport(wrap_tls(sock, target, tls) if target.scheme == "https" else sock)
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise DNSError(f"cannot resolve {target.host!r}: {exc.strerror}") from None
    last: OSError | None = None
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(connect_timeout_s)
        try:
            sock.connect(addr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        if target.scheme == "https":
            sock = wrap_tls(sock, target, tls)
        return SocketTransport(sock)
    if isinstance(last, TimeoutError):
        raise ConnectTimeout(f"connecting to {target.host}:{target.port} timed out after {connect_timeout_s} s")
    reason = last.strerror if last is not None and last.strerror else str(last)
    raise ConnectError(f"cannot connect to {target.host}:{target.port}: {reason}")


def wrap_tls(sock: socket.socket, target: Target, tls: TLSOptions) -> socket.socket:
    try:
        return tls.context().wrap_socket(sock, server_hostname=target.host)
    except (ssl.SSLError, ssl.CertificateError) as exc:
        sock.close()
        hint = " (self-signed? use --cacert FILE or --insecure)" if "CERTIFICATE_VERIFY_FAILED" in str(exc) else ""
        raise TLSError(f"TLS handshake with {target.host}:{target.port} failed: {exc.reason or exc}{hint}") from None
    except OSError as exc:
        sock.close()
        raise TLSError(f"TLS handshake with {target.host}:{target.port} failed: {exc}") from None
