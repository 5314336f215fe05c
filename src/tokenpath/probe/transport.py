"""The probe's one I/O seam: a connected, blocking, TCP_NODELAY socket (plain or TLS).

Everything above it (request building, framing, SSE, metrics) is sans-IO, so tests can script the bytes.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from tokenpath.errors import (
    ConnectError,
    ConnectTimeout,
    DNSError,
    HTTP2Unavailable,
    NetworkError,
    TLSError,
    UsageError,
)
from tokenpath.hostport import join_hostport, url_host
from tokenpath.wire.requesttarget import path_character_problem, url_character_problem

RECV_BYTES = 65536  # one recv() may return up to this; larger than any TCP segment burst we expect
# The most one drain() takes (the rest of one TLS wake-up). A proxy's held burst is a few KB; a peer that floods
# records faster than they are read would otherwise keep one drain() reading, and holding, forever. What is left
# is the next read's.
DRAIN_MAX_BYTES = 1 << 20
# A write the server does not take for this long ends the probe: a request, or the HTTP/2 acknowledgements sent
# while reading (PING ACKs, WINDOW_UPDATEs) to a server that streams but never reads, would otherwise block past
# every deadline.
SEND_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # request target, e.g. /v1/chat/completions

    @property
    def hostport(self) -> str:
        return join_hostport(self.host, self.port)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = url_host(self.host)
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host_header}"


def parse_target(url: str, default_path: str = "/v1/chat/completions") -> Target:
    """A base URL (`http://h:p`, `http://h:p/v1`) gets the chat path appended; a full endpoint path is kept.

    A URL whose characters are not RFC 3986's as written (a space, a control character, non-ASCII, a `|`, a `%`
    that is not %XX) is refused, not percent-encoded here: the probe must request exactly the URL the user wrote
    (and the exporter's --allow matched), and re-encoding it would silently probe another one."""
    problem = url_character_problem(url)
    if problem is not None:
        raise UsageError(f"URL {url!r}: {problem}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket: 'http://[::1'
        raise UsageError(f"URL {url!r} is not valid: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"URL {url!r}: expected http:// or https://")
    if not parts.hostname:
        raise UsageError(f"URL {url!r} has no host")
    try:
        given = parts.port
    except ValueError:
        raise UsageError(f"URL {url!r} has an invalid port") from None
    if given == 0:  # `or` below took :0 for no port at all: the probe went to port 80
        raise UsageError(f"URL {url!r}: port 0 is no port to connect to")
    port = given or (443 if parts.scheme == "https" else 80)
    problem = path_character_problem(f"{parts.path}?{parts.query}" if parts.query else parts.path)
    if problem is not None:
        raise UsageError(f"URL {url!r}: {problem}")
    path = parts.path.rstrip("/")
    if not path.endswith("completions"):
        path = path + default_path.removeprefix("/v1") if path.endswith("/v1") else path + default_path
    if parts.query:
        path += "?" + parts.query
    return Target(parts.scheme, parts.hostname, port, path)


class Transport(Protocol):
    def sendall(self, data: bytes) -> None: ...
    # b"" at EOF; raises TimeoutError after at most timeout_s (possibly sooner: the caller checks its deadlines)
    def recv(self, timeout_s: float) -> bytes: ...
    def drain(self) -> bytes: ...  # what is readable right now without waiting (b"" if nothing), bounded
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TLSOptions:
    insecure: bool = False
    cacert: str | None = None
    # Offer h2 (then http/1.1) by ALPN and insist on h2: a server that picks http/1.1, or nothing, fails the
    # connection with HTTP2Unavailable (--http2 is a condition, never silently HTTP/1.1).
    http2: bool = False

    def context(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(cafile=self.cacert)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"`cacert` {self.cacert}: {exc}") from None
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2", "http/1.1"] if self.http2 else ["http/1.1"])
        return ctx


class SocketTransport:
    """Plain TCP reads time out through SO_RCVTIMEO on a blocking socket: one syscall per read. (A Python socket
    timeout polls before every recv, which doubled the probe's CPU per frame.) The caller asks for the time left
    to its nearest deadline, which shrinks with every read; SO_RCVTIMEO is reset only when the value set is longer
    than that or less than half of it, so a read never waits past a deadline and the steady state costs no extra
    syscall (an early timeout just sends the caller back to its deadlines).

    TLS sockets are non-blocking after the request: each read polls with the time left, so a record trickled in
    byte by byte cannot hold one recv() past its deadline (a blocking SSLSocket's timeout restarts at every byte)."""

    def __init__(self, sock: socket.socket, drain_max_bytes: int = DRAIN_MAX_BYTES) -> None:
        self._sock = sock
        self._drain_max = drain_max_bytes
        self._plain = not isinstance(sock, ssl.SSLSocket)
        self._rcvtimeo: float | None = None
        self.send_timeout_s = SEND_TIMEOUT_S

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(self.send_timeout_s)  # for the whole write (sendall's timeout spans all its sends)
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise NetworkError(f"the server took nothing we sent for {self.send_timeout_s:g} s") from None
        finally:  # back to the read mode: blocking under SO_RCVTIMEO (plain), non-blocking polled (TLS)
            if self._plain:
                self._sock.settimeout(None)
            else:
                self._sock.setblocking(False)

    def recv(self, timeout_s: float) -> bytes:
        if not self._plain:
            return self._recv_tls(timeout_s)
        current = self._rcvtimeo
        if current is None or current > timeout_s or current < timeout_s / 2:
            self._rcvtimeo = timeout_s
            seconds = max(timeout_s, 1e-6)
            timeval = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        try:
            return self._sock.recv(RECV_BYTES)
        except BlockingIOError:  # EAGAIN from SO_RCVTIMEO: the timeout passed
            raise TimeoutError from None

    def _recv_tls(self, timeout_s: float) -> bytes:
        sock = self._sock
        assert isinstance(sock, ssl.SSLSocket)
        if sock.gettimeout() != 0.0:
            sock.setblocking(False)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return sock.recv(RECV_BYTES)
            except ssl.SSLWantReadError:
                want_write = False
            except ssl.SSLWantWriteError:
                want_write = True
            except BlockingIOError:
                want_write = False
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            _wait(sock, want_write, left)

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
        taken = 0
        if sock.gettimeout() != 0.0:
            sock.setblocking(False)
        while taken < self._drain_max:  # a peer flooding records faster than they are read: the rest waits
            try:
                chunk = sock.recv(RECV_BYTES)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                break
            if not chunk:
                break  # EOF: the next recv() reports it
            parts.append(chunk)
            taken += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self._sock.close()

    def abort(self) -> None:
        """Wake a recv() blocked in another thread (it returns EOF): how a stopping monitor ends its probes at once.
        The plain socket's shutdown, not SSLSocket's, which would also drop the TLS object under the reader."""
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)


def _wait(sock: socket.socket, for_write: bool, timeout_s: float) -> None:
    """Until `sock` is readable (writable), or timeout_s passed: the caller checks its own deadline."""
    poller = select.poll()
    poller.register(sock, select.POLLOUT if for_write else select.POLLIN)
    poller.poll(max(timeout_s * 1000, 1))


SocketFactory = Callable[[str, int, float], socket.socket]  # (host, port, timeout) -> connected socket
# Told of each socket while it connects (TCP, then the TLS socket the handshake runs on), so another thread can shut
# it down to end a connect or handshake at once (a stopping monitor) instead of waiting out the connect timeout.
SocketWatch = Callable[[socket.socket], None]


def tcp_connect(host: str, port: int, timeout_s: float) -> socket.socket:
    """The plain SocketFactory: the resolver's first address that accepts."""
    return socket.create_connection((host, port), timeout_s)


def open_connection(
    target: Target,
    *,
    connect_timeout_s: float,
    tls: TLSOptions,
    socket_factory: SocketFactory | None = None,
    watch: SocketWatch | None = None,
    drain_max_bytes: int = DRAIN_MAX_BYTES,
) -> SocketTransport:
    """A connected TCP_NODELAY socket, TLS-wrapped for https. `socket_factory` connects instead of the resolver
    (e.g. with a socket made inside a network namespace). `connect_timeout_s` is one deadline for all of it: every
    address tried and the TLS handshake."""
    deadline = time.monotonic() + connect_timeout_s
    if socket_factory is not None:
        try:
            sock = socket_factory(target.host, target.port, connect_timeout_s)
        except OSError as exc:
            raise ConnectError(f"cannot connect to {target.hostport}: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if target.scheme == "https":
            return SocketTransport(
                wrap_tls(sock, target, tls, deadline=deadline, timeout_s=connect_timeout_s, watch=watch),
                drain_max_bytes,
            )
        return SocketTransport(sock, drain_max_bytes)
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise DNSError(f"cannot resolve {target.host!r}: {exc.strerror}") from None
    last: OSError | None = None
    for family, kind, proto, _, addr in infos:
        left = deadline - time.monotonic()
        if left <= 0:
            last = TimeoutError()
            break
        sock = socket.socket(family, kind, proto)
        if watch is not None:
            watch(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(left)
        try:
            sock.connect(addr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        if target.scheme == "https":
            sock = wrap_tls(sock, target, tls, deadline=deadline, timeout_s=connect_timeout_s, watch=watch)
        return SocketTransport(sock, drain_max_bytes)
    if isinstance(last, TimeoutError):
        raise ConnectTimeout(f"connecting to {target.hostport} timed out after {connect_timeout_s} s")
    reason = last.strerror if last is not None and last.strerror else str(last)
    raise ConnectError(f"cannot connect to {target.hostport}: {reason}")


def wrap_tls(
    sock: socket.socket,
    target: Target,
    tls: TLSOptions,
    *,
    deadline: float,
    timeout_s: float,
    watch: SocketWatch | None = None,
) -> socket.socket:
    """The TLS handshake, over by `deadline` (time.monotonic()) however slowly the peer sends its flight: it runs
    non-blocking, each wait bounded by the time left (a blocking socket's timeout restarts at every byte). On any
    failure the socket is closed."""
    ssock: ssl.SSLSocket | None = None
    done = False
    try:
        ssock = tls.context().wrap_socket(sock, server_hostname=target.host, do_handshake_on_connect=False)
        if watch is not None:
            watch(ssock)  # it took over `sock`'s descriptor
        ssock.setblocking(False)
        while True:
            try:
                ssock.do_handshake()
                break
            except ssl.SSLWantReadError:
                want_write = False
            except ssl.SSLWantWriteError:
                want_write = True
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConnectTimeout(f"the TLS handshake with {target.hostport} did not finish within {timeout_s} s")
            _wait(ssock, want_write, left)
        ssock.settimeout(None)
        if tls.http2 and ssock.selected_alpn_protocol() != "h2":
            chosen = ssock.selected_alpn_protocol() or "none"
            raise HTTP2Unavailable(f"{target.hostport} did not agree to HTTP/2 over TLS (ALPN chose {chosen}, not h2)")
        done = True
        return ssock
    except (ssl.SSLError, ssl.CertificateError) as exc:
        hint = " (self-signed? use --cacert FILE or --insecure)" if "CERTIFICATE_VERIFY_FAILED" in str(exc) else ""
        raise TLSError(f"TLS handshake with {target.hostport} failed: {exc.reason or exc}{hint}") from None
    except OSError as exc:
        raise TLSError(f"TLS handshake with {target.hostport} failed: {exc}") from None
    finally:
        if not done:
            (ssock if ssock is not None else sock).close()
