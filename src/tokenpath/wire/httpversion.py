"""The HTTP version a client speaks: one name (`http_version`) and one type everywhere, from the flags and files that
spell it (`--http2`, `client_http = ["2", "3"]`, `http_version = "2"`, `http2 = true`) to the results that record it."""

from __future__ import annotations

from enum import StrEnum


class HttpVersion(StrEnum):
    """As HTTP names it ("1.1", "2"); a StrEnum, so it is its own JSON and compares equal to its string."""

    HTTP11 = "1.1"
    HTTP2 = "2"  # h2 by ALPN over TLS, h2c with prior knowledge in clear text; never a silent fallback to 1.1
    HTTP3 = "3"  # h3 over QUIC, TLS only: `probe --http3` and the matrix's client_http = ["3"] (probe/h3stream.py)

    @classmethod
    def of(cls, http2: bool) -> HttpVersion:
        """The version an `--http2` flag (or a file's `http2 = true`) asks for."""
        return cls.HTTP2 if http2 else cls.HTTP11

    @property
    def label(self) -> str:
        return f"HTTP/{self.value}"


# What a file or a flag may declare where the client has no HTTP/3 (load, monitor): the TCP versions.
DECLARED_VERSIONS = (HttpVersion.HTTP11, HttpVersion.HTTP2)
# What the matrix's client_http takes: its rows over HTTP/3 run through the probe's h3 client.
MATRIX_VERSIONS = (*DECLARED_VERSIONS, HttpVersion.HTTP3)
# Who speaks HTTP/3 so far: the one place a refusal of "3" names them (a command that adds it adds itself here).
HTTP3_CLIENTS = "`tokenpath probe --http3` and the matrix's client_http"


def http3_refused(value: object, accepted: tuple[HttpVersion, ...] = DECLARED_VERSIONS) -> str:
    """The one message a client without HTTP/3 refuses "3" with."""
    return f"{value!r}: HTTP/3 is {HTTP3_CLIENTS} only so far, not one of {_listed(accepted)}"


def parse_http_version(value: object, accepted: tuple[HttpVersion, ...] = DECLARED_VERSIONS) -> HttpVersion:
    """A declared version: "1.1", "2" (or "3" where `accepted` has it), also as a TOML number (2, 1.1) or an HTTP
    name ("HTTP/2"); a ValueError that lists the accepted ones otherwise. "3" is refused by default: load and
    monitor have no HTTP/3 client (`http3_refused` says who has)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not one of {_listed(accepted)}")
    text = f"{value:g}" if isinstance(value, int | float) else value.strip()
    text = text.removeprefix("HTTP/").removeprefix("http/")
    if text == HttpVersion.HTTP3 and HttpVersion.HTTP3 not in accepted:
        raise ValueError(http3_refused(value, accepted))
    if text not in accepted:
        raise ValueError(f"{value!r} is not one of {_listed(accepted)}")
    return HttpVersion(text)


def parse_matrix_version(value: object) -> HttpVersion:
    """The matrix's client_http: "1.1", "2" or "3"."""
    return parse_http_version(value, MATRIX_VERSIONS)


def _listed(versions: tuple[HttpVersion, ...]) -> str:
    return ", ".join(f'"{v.value}"' for v in versions)
