"""How an HTTP/1.1 body is delimited, decided in one place, and the bytes that frame it (RFC 9112 §6).

Every reader and writer in the package asks here: the client core when a response head arrives, the server core
when a handler starts a response, the gateway when it re-frames an upstream body for its client. Two questions,
two functions, one rule set: `received_framing` (what the peer's head says) and `sent_framing` (what we put on the
wire for a body whose length we may not know)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from http import HTTPStatus

LAST_CHUNK = b"0\r\n\r\n"  # ends a chunked body (no trailers: nothing in this package sends or needs them)


class _NoCallbacks:
    """What a let-go connection core's parser calls back: nothing. An httptools parser holds its protocol and that
    protocol's bound methods, so a core and its parser are a reference cycle, freed only by the cyclic collector
    (with everything they refer to: a whole exchange, its buffers). A core that is done swaps its parser for one
    made over this (`detach`), so reference counting frees it the moment it is let go of. The collector's passes
    over a busy worker's young objects took 0.4 ms (a generation-1 pass 4-7 ms): a pause every stream in flight
    waits through, as the p99 of added TTFT shows (bench/RESULTS.md)."""

    __slots__ = ()


NO_CALLBACKS = _NoCallbacks()


class Framing(StrEnum):
    CHUNKED = "chunked"  # Transfer-Encoding: chunked
    LENGTH = "length"  # Content-Length
    CLOSE = "close"  # the body ends when the connection closes
    NONE = "none"  # no body at all: HEAD, 1xx, 204, 304


def bodiless(method: str, status: int) -> bool:
    """A response that carries no body whatever its headers say (RFC 9112 §6.3 rules 1-2)."""
    return method == "HEAD" or 100 <= status < 200 or status in (204, 304)


def received_framing(method: str, status: int, headers: Iterable[tuple[bytes | str, bytes | str]]) -> Framing:
    """How the body of a response we are reading is delimited."""
    if bodiless(method, status):
        return Framing.NONE
    length = False
    for name, value in headers:
        lname = name.lower()
        if lname in (b"transfer-encoding", "transfer-encoding"):
            return Framing.CHUNKED if _has_chunked(value) else Framing.CLOSE
        if lname in (b"content-length", "content-length"):
            length = True
    return Framing.LENGTH if length else Framing.CLOSE


def sent_framing(
    method: str, status: int, client_version: str, content_length: int | None, *, http10_chunked: bool = False
) -> Framing:
    """How we delimit a response we write: its length when known, else chunks for an HTTP/1.1 client and the
    connection's end for an HTTP/1.0 one (which cannot read chunks). `http10_chunked`: chunks to an HTTP/1.0 client
    too, as llama.cpp's server does (RFC 9112 §6.1 says a server must not): an origin behaviour a proxy's verdict
    can depend on (nginx asks in HTTP/1.0 and streams a chunked answer whatever it buffers otherwise)."""
    if bodiless(method, status):
        return Framing.NONE
    if content_length is not None:
        return Framing.LENGTH
    return Framing.CHUNKED if client_version == "1.1" or http10_chunked else Framing.CLOSE


def find_header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    """The first value of a header, case-insensitively (HTTP field names are)."""
    lname = name.lower()
    for key, value in headers:
        if key.lower() == lname:
            return value
    return None


def _has_chunked(value: bytes | str) -> bool:
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return text.lower().rstrip().endswith("chunked")  # chunked must be the final coding (RFC 9112 §6.3 rule 4)


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body. An empty piece would read as the last chunk, so it frames to nothing."""
    return b"%x\r\n%b\r\n" % (len(data), data) if data else b""


def frame_body(framing: Framing, data: bytes) -> bytes:
    """Body bytes as they go on the wire under `framing`."""
    return chunk(data) if framing is Framing.CHUNKED else data


def end_of_body(framing: Framing) -> bytes:
    return LAST_CHUNK if framing is Framing.CHUNKED else b""


def chunks(parts: list[bytes], last: bool = True) -> list[bytes]:
    """Each part as one chunk; with `last`, the final one also carries the end of the body, so it leaves in the
    same write (one frame, one write)."""
    out = [chunk(p) for p in parts]
    if last and out:
        out[-1] += LAST_CHUNK
    return out


def framing_headers(framing: Framing, content_length: int | None) -> list[tuple[str, str]]:
    if framing is Framing.CHUNKED:
        return [("Transfer-Encoding", "chunked")]
    if framing is Framing.LENGTH and content_length is not None:
        return [("Content-Length", str(content_length))]
    return []


# Status code -> reason phrase, made once: HTTPStatus(status) costs two Python calls (enum's __call__, __new__).
_PHRASES = {status.value: status.phrase for status in HTTPStatus}


def response_head(status: int, headers: Iterable[tuple[str, str]], *, keep_alive: bool) -> bytes:
    """A status line and headers. `Connection: close` is added when the connection ends with this response."""
    # The header lines by a list comprehension (one call), not a generator (one resumption per header).
    lines = "".join([f"{k}: {v}\r\n" for k, v in headers])
    close = "" if keep_alive else "Connection: close\r\n"
    return f"HTTP/1.1 {status} {_PHRASES.get(status, '')}\r\n{lines}{close}\r\n".encode("latin-1")


def request_head(method: str, target: str, headers: Iterable[tuple[str, str]]) -> bytes:
    lines = "".join([f"{k}: {v}\r\n" for k, v in headers])
    return f"{method} {target} HTTP/1.1\r\n{lines}\r\n".encode("latin-1")
