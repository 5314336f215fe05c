"""TCP_NODELAY on every connection the servers accept and the clients open: a token written alone must leave at once,
not wait for the peer's ACK of the one before (Nagle). serve/http.py, serve/h2.py and the clients' open_stream
(probe/aio.py) no longer set it: the loop does, on every TCP transport (uvloop's TCPTransport.new, asyncio's
_SelectorSocketTransport). This holds both loops to it, both ways."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest
import uvloop

from tokenpath.probe.aio import connect_protocol
from tokenpath.serve.http import listen


class _Capture(asyncio.Protocol):
    def __init__(self, seen: asyncio.Future[int]) -> None:
        self.seen = seen

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        self.seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        transport.close()


async def _accepted_nodelay() -> int:
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = await listen(lambda: _Capture(seen), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await asyncio.wait_for(seen, 5)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("run", [uvloop.run, asyncio.run], ids=["uvloop", "asyncio"])
def test_the_loop_sets_tcp_nodelay_on_accepted_connections(run: Callable[..., int]) -> None:
    assert run(_accepted_nodelay()) == 1


async def _connected_nodelay() -> int:
    server = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await connect_protocol(asyncio.Protocol, "127.0.0.1", port, 5)
    try:
        return int(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    finally:
        transport.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("run", [uvloop.run, asyncio.run], ids=["uvloop", "asyncio"])
def test_the_loop_sets_tcp_nodelay_on_connections_the_clients_open(run: Callable[..., int]) -> None:
    assert run(_connected_nodelay()) == 1
