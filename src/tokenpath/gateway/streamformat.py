"""The relay rule of each streaming API format, as data: its cut (never half a frame), its classifier (where the
first content is, for the upstream TTFT metric), its error frame (the stream's last frame when the upstream fails
after the first byte, in the shape the format's own clients raise on: ApiSpec.error_frame, cited in wire/formats/)
and its keep-alive (what the gateway writes while the upstream is silent: the ApiSpec's keepalive).
The gateway has one relay path (downstream.Downstream.upstream_body); a response's StreamFormat is picked once, at
its head.

Which format: the route says the API (gateway.routes), the response's Content-Type says the framing. When they agree
the route's API is the format; a stream on a path that names no API (a /v1/ path past the known ones) is read as the
first format declared with its Content-Type (SSE: OpenAI chat, as the gateway always did); a response that is not a
stream is relayed as it comes (its first byte is its first answer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from tokenpath.gateway.cuts import LineRelay, MessageRelay
from tokenpath.wire.apis import SPECS, Api, spec_or_default
from tokenpath.wire.apispec import ApiSpec, Fault, Framing, StreamFailure
from tokenpath.wire.reader import FrameReader
from tokenpath.wire.sse import EventRelay

# The gateway's end-of-stream codes (exchange_state.End.code) by what they mean to a format that can say why a
# stream broke off; any other code is INTERNAL.
FAULTS = {
    "upstream_idle_timeout": Fault.TIMEOUT,
    "total_timeout": Fault.TIMEOUT,
    "upstream_disconnected": Fault.UPSTREAM_BROKE,
    "upstream_truncated": Fault.UPSTREAM_BROKE,
    "shutdown": Fault.SHUTDOWN,
}


class Cut(Protocol):
    """What the relay path calls on a format's cut (wire.sse.EventRelay, cuts.MessageRelay, cuts.LineRelay)."""

    tail: int
    held: bytearray
    max_event_bytes: int
    broken: str | None

    def feed(self, data: bytes) -> int: ...
    def cut(self, data: bytes) -> bytes: ...
    @property
    def too_large(self) -> bool: ...
    def rest(self) -> bytes: ...


class SSECut(EventRelay):
    """EventRelay with the one attribute the other cuts have: any bytes are SSE, so nothing breaks it."""

    __slots__ = ()
    broken: str | None = None


CUTS: dict[Framing, Callable[[], Cut]] = {
    Framing.SSE: SSECut,
    Framing.EVENTSTREAM: MessageRelay,
    Framing.NDJSON: LineRelay,
}


@dataclass(frozen=True, slots=True)
class StreamFormat:
    spec: ApiSpec
    new_cut: Callable[[], Cut]
    keepalive: bytes | None = None  # ApiSpec.keepalive: None, the format has none

    @property
    def api(self) -> Api:
        return self.spec.api

    @property
    def framing(self) -> Framing:
        return self.spec.framing

    def reader(self) -> FrameReader:
        """A fresh classifier of this format's frames (the TTFT scan)."""
        return FrameReader(self.spec.api)

    def error(self, message: str, code: str, last: bytes) -> bytes:
        """The frame that ends the stream with `message` and the gateway's `code`, after `last`: the whole frames
        relayed (Responses numbers its error after the last one's sequence number)."""
        return self.spec.error_frame(StreamFailure(message, code, FAULTS.get(code, Fault.INTERNAL)), last)


def stream_formats(specs: Iterable[ApiSpec]) -> dict[Api, StreamFormat]:
    return {spec.api: StreamFormat(spec, CUTS[spec.framing], spec.keepalive) for spec in specs}


def readers_by_content_type(specs: Iterable[ApiSpec]) -> dict[str, Api]:
    """A stream on a path that names no API: read as the first format declared with its Content-Type."""
    first: dict[str, Api] = {}
    for spec in specs:
        first.setdefault(spec.content_type, spec.api)
    return first


def credential_headers(specs: Iterable[ApiSpec]) -> frozenset[str]:
    """Every header any format carries an API key in (lower case): a client's must not ride beside the pool's."""
    return frozenset({"authorization", *(spec.key_header.lower() for spec in specs if spec.key_header is not None)})


FORMATS = stream_formats(SPECS.values())
_BY_CONTENT_TYPE = readers_by_content_type(SPECS.values())
CREDENTIAL_HEADERS = credential_headers(SPECS.values())


def upstream_credential(api: Api | None, key: str) -> tuple[str, str]:
    """The header that carries the pool's key (PoolConfig.api_key_env) to an upstream of this API."""
    return spec_or_default(api).credential(key)


def for_response(route: Api | None, content_type: str | None) -> StreamFormat | None:
    """The format a response is relayed as: None when its Content-Type is no stream format's."""
    if content_type is None:
        return None
    media = content_type.partition(";")[0].strip().lower()
    if route is not None and SPECS[route].content_type == media:
        return FORMATS[route]
    default = _BY_CONTENT_TYPE.get(media)
    return FORMATS[default] if default is not None else None
