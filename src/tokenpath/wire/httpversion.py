"""The HTTP version a client speaks: one name (`http_version`) and one type everywhere, from the flags and files that
spell it (`--http2`, `client_http = ["2"]`, `http_version = "2"`, `http2 = true`) to the results that record it."""

from __future__ import annotations

from enum import StrEnum


class HttpVersion(StrEnum):
    """As HTTP names it ("1.1", "2"); a StrEnum, so it is its own JSON and compares equal to its string."""

    HTTP11 = "1.1"
    HTTP2 = "2"  # h2 by ALPN over TLS, h2c with prior knowledge in clear text; never a silent fallback to 1.1
    HTTP3 = "3"  # h3 over QUIC (probe --http3 only, so far: no declared axis or file takes it yet)

    @classmethod
    def of(cls, http2: bool) -> HttpVersion:
        """The version an `--http2` flag (or a file's `http2 = true`) asks for."""
        return cls.HTTP2 if http2 else cls.HTTP11

    @property
    def label(self) -> str:
        return f"HTTP/{self.value}"


# What a file or a flag other than probe's may declare: the versions every client (matrix, load, monitor) speaks.
DECLARED_VERSIONS = (HttpVersion.HTTP11, HttpVersion.HTTP2)


def parse_http_version(value: object) -> HttpVersion:
    """A declared version: "1.1" or "2", also as a TOML number (2, 1.1) or an HTTP name ("HTTP/2"); a ValueError
    that lists the two otherwise. "3" is refused here: only `probe --http3` speaks it so far (matrix, load and monitor
    have no HTTP/3 client)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f'{value!r} is not one of "1.1", "2"')
    text = f"{value:g}" if isinstance(value, int | float) else value.strip()
    text = text.removeprefix("HTTP/").removeprefix("http/")
    if text == HttpVersion.HTTP3:
        raise ValueError(f'{value!r}: HTTP/3 is `tokenpath probe --http3` only so far, not one of "1.1", "2"')
    try:
        return HttpVersion(text)
    except ValueError:
        raise ValueError(f'{value!r} is not one of "1.1", "2"') from None
