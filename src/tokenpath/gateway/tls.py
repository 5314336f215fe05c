"""TLS to an upstream, sans-IO over ssl.MemoryBIO: the link (gateway/link.py, the one connect path) feeds it what
the socket read and writes what it returns.

By hand (over the stdlib's SSLObject) because asyncio's and uvloop's TLS transports take no session to resume:
every keep-alive connection to an https member would pay a full handshake. Here the pool's Origin hands the last
session it saw to each new connection, so a resumed handshake is the norm, and the handshake is part of the attempt (a
certificate failure is a connect failure, failed over before the first byte)."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable
from pathlib import Path

from tokenpath.errors import UsageError

READ_SIZE = 256 << 10


def client_context(
    ca_file: str | None, client_cert: str | None, client_key: str | None, alpn: list[str], where: str = "pool"
) -> ssl.SSLContext:
    """Certificates verified against the system store, or `ca_file` for a private CA; an optional client
    certificate (mTLS); ALPN offering `alpn`. A file that cannot be loaded is the user's to fix: a UsageError naming
    `where` (the pool) and the file, never the key's bytes."""
    try:
        ctx = ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError) as exc:
        raise UsageError(
            f"{where}: cannot load `ca_file` {ca_file}: {_reason(exc)} (expected PEM certificates)"
        ) from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if client_cert:
        try:
            # An encrypted key would make OpenSSL prompt on the terminal: the empty password makes it fail instead.
            ctx.load_cert_chain(client_cert, client_key, password=b"")
        except (ssl.SSLError, OSError) as exc:
            raise UsageError(
                f"{where}: cannot load `client_cert` {client_cert}"
                + (f" with `client_key` {client_key}" if client_key else "")
                + f": {_reason(exc)} (expected PEM files: the certificate chain, and its unencrypted private key)"
            ) from None
    ctx.set_alpn_protocols(alpn)
    return ctx


def _reason(exc: ssl.SSLError | OSError) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__)


def check_files(*paths: str | None) -> list[str]:
    """The given paths that are not readable files (for config validation)."""
    return [p for p in paths if p and not Path(p).is_file()]


class TLSClient:
    def __init__(self, ctx: ssl.SSLContext, server_hostname: str, session: ssl.SSLSession | None) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self._in, self._out, server_hostname=server_hostname, session=session)
        # SSLObject.read only forwards to its _ssl object's read (same arguments, same exceptions): that one is
        # called directly, once per record, where CPython has it; the public method otherwise.
        self._read: Callable[[int], bytes] = getattr(self.obj, "_sslobj", self.obj).read
        self.handshaken = False
        # close_notify received: the peer ended the connection on purpose. A TCP FIN without it is no end at all
        # for a close-delimited body (RFC 9112 §9.8: a truncation anyone on the path can cause).
        self.closed_by_peer = False

    def start(self) -> bytes:
        """The ClientHello."""
        self._step()
        return self._out.read()

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        """Ciphertext in; (plaintext, bytes to send back) out. Raises ssl.SSLError on a failed handshake or a
        broken record. A close_notify sets `closed_by_peer` (SSLObject.read() returns b"" for it: with a memory BIO,
        "no data yet" is SSLWantReadError, so an empty read is the peer's close_notify and nothing else)."""
        incoming = self._in
        incoming.write(data)
        if not self.handshaken and not self._step():
            return b"", self._out.read()
        # The relay's read: one record in, all of it read. Each read takes one record whole (READ_SIZE is past a
        # record's 16 KiB), so with no ciphertext left in the BIO there is nothing more to read: no second read to
        # raise SSLWantReadError, no list.
        try:
            plain = self._read(READ_SIZE)
        except ssl.SSLWantReadError:
            plain = b""
        except ssl.SSLZeroReturnError:
            self.closed_by_peer = True
            plain = b""
        else:
            if not plain:
                self.closed_by_peer = True
            elif incoming.pending:  # more records (or part of one) came in the same socket read
                plain = self._read_rest(plain)
        outgoing = self._out
        return plain, outgoing.read() if outgoing.pending else b""

    def _read_rest(self, first: bytes) -> bytes:
        chunks = [first]
        while True:
            try:
                chunk = self._read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.closed_by_peer = True
                break
            if not chunk:
                self.closed_by_peer = True
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def close_notify(self) -> bytes:
        """Our close_notify, to send before closing (the answer a peer that sent its own may wait for); b"" when
        the TLS state allows none."""
        with contextlib.suppress(ssl.SSLError):
            self.obj.unwrap()
        return self._out.read()

    def encrypt(self, data: bytes) -> bytes:
        self.obj.write(data)
        return self._out.read()

    @property
    def alpn(self) -> str | None:
        return self.obj.selected_alpn_protocol()

    @property
    def session(self) -> ssl.SSLSession | None:
        return self.obj.session

    @property
    def resumed(self) -> bool:
        return self.obj.session_reused

    def _step(self) -> bool:
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            return False
        self.handshaken = True
        return True


def describe(exc: ssl.SSLError) -> str:
    """A short reason for logs and metrics: 'certificate verify failed: self-signed certificate'."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    return exc.reason or str(exc)
