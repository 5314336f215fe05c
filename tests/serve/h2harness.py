"""A scripted transport and an h2 client state machine, to drive serve.h2.H2ServerConnection byte by byte in unit
tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events

from tokenpath.serve.h2 import H2Response, H2ServerConnection
from tokenpath.serve.h2limits import H2Limits
from tokenpath.serve.http import Request
from tokenpath.wire.limits import ServerLimits


class FakeTransport(asyncio.Transport):
    """Records every write (one entry per transport.write call) and what the protocol asked of the socket."""

    def __init__(self, extra: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True
        self.protocol: asyncio.BaseProtocol | None = None
        self.extra = extra or {}

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def take(self) -> bytes:
        out = b"".join(self.writes)
        self.writes.clear()
        return out

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.extra.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def can_write_eof(self) -> bool:
        return False


class Recorder:
    """A handler: records each request and answers with `reply(request, response)` (default: nothing yet)."""

    def __init__(self, reply: Callable[[Request, H2Response], None] | None = None) -> None:
        self.requests: list[Request] = []
        self.responses: list[H2Response] = []
        self.reply = reply

    def __call__(self, request: Request, response: Any) -> None:
        self.requests.append(request)
        self.responses.append(response)
        if self.reply is not None:
            self.reply(request, response)


def client(**settings: int) -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    if settings:
        conn.update_settings({getattr(h2.settings.SettingCodes, k.upper()): v for k, v in settings.items()})
    return conn


def server(
    handler: Any,
    limits: ServerLimits | None = None,
    h2limits: H2Limits | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[H2ServerConnection, FakeTransport]:
    conn = H2ServerConnection(handler, limits or ServerLimits(max_body_bytes=1 << 20), h2limits or H2Limits(), clock)
    transport = FakeTransport({"peername": ("127.0.0.1", 5555)})
    conn.connection_made(transport)
    return conn, transport


def connected(
    cli: h2.connection.H2Connection,
    handler: Any,
    limits: ServerLimits | None = None,
    h2limits: H2Limits | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[H2ServerConnection, FakeTransport]:
    """A server that has read the client's preface and SETTINGS, and a client that has read the server's (and its
    ACK): the connection is up, no stream open yet. `clock` is its flood guard's (a frozen one: no allowance comes
    back however slowly a loaded host runs the test)."""
    srv, transport = server(handler, limits, h2limits, clock)
    srv.data_received(cli.data_to_send())
    exchange(cli, transport)
    return srv, transport


def send_requests(cli: h2.connection.H2Connection, srv: H2ServerConnection, *stream_ids: int) -> None:
    """Opens each stream with a whole bodiless request, all in one read of the server."""
    for sid in stream_ids:
        cli.send_headers(sid, request_headers(), end_stream=True)
    srv.data_received(cli.data_to_send())


def signalling(log: list[str], first: bytes = b"data: a\n\n") -> Callable[[Request, H2Response], None]:
    """A reply that starts a stream with `first` and notes each signal the response gets: "pause 1", "resume 1",
    "abort 1" (the stream's id)."""

    def reply(request: Request, response: H2Response) -> None:
        sid = response.stream_id
        response.on_pause = lambda: log.append(f"pause {sid}")
        response.on_resume = lambda: log.append(f"resume {sid}")
        response.on_abort = lambda: log.append(f"abort {sid}")
        response.write(response.start_stream(200, []) + first)

    return reply


def request_headers(path: str = "/v1/chat/completions", method: str = "POST") -> list[tuple[bytes, bytes]]:
    return [(b":method", method.encode()), (b":path", path.encode()), (b":scheme", b"http"),
            (b":authority", b"gw.test"), (b"authorization", b"Bearer t")]  # fmt: skip


def exchange(cli: h2.connection.H2Connection, transport: FakeTransport) -> list[h2.events.Event]:
    """What the client makes of what the server wrote since the last call."""
    data = transport.take()
    return cli.receive_data(data) if data else []


def run(coro: Any) -> Any:
    return asyncio.run(coro)
