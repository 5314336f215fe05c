"""TCP_NODELAY on every connection the servers accept: a token written alone must leave at once, not wait for the
client's ACK of the one before (Nagle). serve/http.py and serve/h2.py no longer set it: the loop does, on every TCP
transport (uvloop's TCPTransport.new, asyncio's _SelectorSocketTransport). This holds both loops to it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest
import uvloop

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
