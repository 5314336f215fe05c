"""One port, two protocols: picks HTTP/1.1 (serve/http.py) or HTTP/2 (serve/h2.py) for each new connection. Over
TLS by ALPN (`h2`, else HTTP/1.1); in clear text by the client's first bytes (the 24-byte HTTP/2 preface: h2c with
prior knowledge, else HTTP/1.1, where an h2c Upgrade stays refused)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from tokenpath.serve.h2 import PREFACE, H2ServerConnection
from tokenpath.serve.h2limits import DEFAULT_LIMITS, H2Limits
from tokenpath.serve.http import Handler, HTTPConnection
from tokenpath.wire.limits import ServerLimits

__all__ = ["Sniffer", "serve_factory"]


class Sniffer(asyncio.Protocol):
    """Picks the protocol of a new connection, then hands the transport to it (`set_protocol`: no cost per read after
    that). TLS: by ALPN. Clear text: by the first bytes (the preface, or a prefix of it, waits for more)."""

    def __init__(
        self, http1: Callable[[], asyncio.Protocol], http2: Callable[[], asyncio.Protocol], timeout_s: float
    ) -> None:
        self._http1 = http1
        self._http2 = http2
        self._timeout_s = timeout_s
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self._switch(self._http2() if ssl_object.selected_alpn_protocol() == "h2" else self._http1(), b"")
            return
        self._timer = asyncio.get_running_loop().call_later(self._timeout_s, self._transport.close)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        if len(buffer) < len(PREFACE) and PREFACE.startswith(buffer):
            self._buffer = buffer  # maybe HTTP/2: wait for the rest of the preface
            return
        self._buffer = b""
        self._switch(self._http2() if buffer.startswith(PREFACE) else self._http1(), buffer)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _switch(self, protocol: asyncio.Protocol, data: bytes) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        transport = self._transport
        assert transport is not None
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if data and not transport.is_closing():
            protocol.data_received(data)


def serve_factory(
    handler: Handler, limits: ServerLimits, h2limits: H2Limits | None = DEFAULT_LIMITS
) -> Callable[[], asyncio.Protocol]:
    """The protocol factory for a listener: HTTP/1.1 only (`h2limits=None`), or HTTP/1.1 and HTTP/2 on one port."""
    if h2limits is None:
        return lambda: HTTPConnection(handler, limits)
    limits_h2 = h2limits

    def http1() -> asyncio.Protocol:
        return HTTPConnection(handler, limits)

    def http2() -> asyncio.Protocol:
        return H2ServerConnection(handler, limits, limits_h2)

    return lambda: Sniffer(http1, http2, limits.request_timeout_s)
