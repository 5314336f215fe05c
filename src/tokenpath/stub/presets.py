"""What a real origin does besides pacing its tokens that a path's verdict can depend on (issue 37 §3), and the
stub's presets that reproduce each real origin measured here.

Two behaviours, both measured on this machine (origins/behaviour.py reads them off a live server, and the e2e tests
hold these presets to it):

- how it frames a stream for an HTTP/1.0 request. Stock nginx asks its upstream in HTTP/1.0 and holds a
  close-delimited body in its buffers, but streams a chunked one: llama.cpp's server (cpp-httplib) answers chunked
  even to HTTP/1.0 (RFC 9112 §6.1 says it must not), uvicorn (llama-cpp-python's server, and the stub) answers
  close-delimited;
- the response headers a path is known to act on (ORIGIN_HEADERS): `X-Accel-Buffering: no` turns nginx's buffering
  off for that response; `Cache-Control` is read by caches (no-store, no-cache) and by compressing proxies
  (no-transform).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokenpath.errors import UsageError

Http10Framing = Literal["close", "chunked"]
HTTP10_FRAMINGS: tuple[Http10Framing, ...] = ("close", "chunked")
# The response headers a path is known to act on; an origin's other headers are recorded, never a condition.
ORIGIN_HEADERS = ("X-Accel-Buffering", "Cache-Control")


@dataclass(frozen=True, slots=True)
class OriginBehaviour:
    """How an origin frames a stream for an HTTP/1.0 request, and the headers of ORIGIN_HEADERS it sends."""

    http10_framing: Http10Framing = "close"
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def plain(self) -> bool:
        """Nothing a path acts on: what the stub does unless told otherwise."""
        return self.http10_framing == "close" and not self.headers

    def parts(self) -> tuple[str, ...]:
        """Each behaviour in words, one per part (what an attribution names): ("HTTP/1.0: chunked", "X: v")."""
        framing = ("HTTP/1.0: chunked",) if self.http10_framing == "chunked" else ()
        return (*framing, *(f"{name}: {value}" for name, value in self.headers))

    def describe(self) -> str:
        return "; ".join(self.parts()) or "HTTP/1.0: close-delimited, no header a path acts on"

    def to_json(self) -> dict[str, object]:
        return {"http10_framing": self.http10_framing, "headers": dict(self.headers)}


def relevant_headers(headers: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The headers of ORIGIN_HEADERS among a response's, spelled as ORIGIN_HEADERS spells them, in that order."""
    found = {name.lower(): value for name, value in headers}
    return tuple((name, found[name.lower()]) for name in ORIGIN_HEADERS if name.lower() in found)


# Measured with an HTTP/1.0 streaming request to each server as scripts/build-llama builds it (llama-cpp-python
# 0.3.36's vendored llama.cpp, and its own server on uvicorn + sse-starlette); origins/catalogue.py names the same.
PRESETS: dict[str, OriginBehaviour] = {
    "llama-server": OriginBehaviour("chunked", (("X-Accel-Buffering", "no"),)),
    "llama-cpp-python": OriginBehaviour("close", (("X-Accel-Buffering", "no"), ("Cache-Control", "no-store"))),
}


def preset(name: str) -> OriginBehaviour:
    """A preset by name, or a UsageError that lists them."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"no stub preset {name!r}; presets: {', '.join(PRESETS)}") from None


def parse_http10_framing(value: object) -> Http10Framing:
    if value == "close":
        return "close"
    if value == "chunked":
        return "chunked"
    raise UsageError(f"http10_framing {value!r}: expected close or chunked")
