"""TLS on a listener: the server context, HTTP/2 and HTTP/1.1 offered by ALPN (h2 first, as nginx and Caddy do)."""

from __future__ import annotations

import ssl

from tokenpath.errors import UsageError

ALPN = ["h2", "http/1.1"]


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """TLS 1.2+ with the stdlib's default ciphers (which meet RFC 9113 9.2's requirements for h2). A certificate or
    key that cannot be loaded is the user's to fix: a UsageError naming the files, never the key's bytes."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # An encrypted key would make OpenSSL prompt on the terminal: the empty password makes it fail instead.
        ctx.load_cert_chain(cert_file, key_file, password=b"")
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
        raise UsageError(
            f"cannot load the TLS certificate {cert_file} with the key {key_file}: {reason} "
            "(expected PEM files: the certificate chain, and its unencrypted private key)"
        ) from None
    ctx.set_alpn_protocols(ALPN)
    return ctx
