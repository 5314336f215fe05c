"""The Accept-Encoding a client sends, as tokenpath's options and files spell it: `identity` (no header at all, as
curl sends), `browser` (what the browsers send), or any value as given. Decoding the answer is contentcoding.py's."""

from __future__ import annotations

from tokenpath.errors import UsageError

IDENTITY = "identity"  # no coding: a request that sends no Accept-Encoding, a response that is not encoded
# What Chromium sends (and Firefox and Safari the same codings): `--accept-encoding browser`.
BROWSER_ACCEPT_ENCODING = "gzip, deflate, br, zstd"


def expand_accept_encoding(value: str) -> str:
    """An Accept-Encoding value as given, `browser` as the browsers' header; a line break is refused."""
    value = value.strip()
    if value.lower() == "browser":
        return BROWSER_ACCEPT_ENCODING
    if "\r" in value or "\n" in value:
        raise UsageError("`accept_encoding` has a line break in it")
    return value
