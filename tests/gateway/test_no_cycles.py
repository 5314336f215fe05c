"""A proxied request leaves no reference cycle behind: once its connections are done, reference counting frees the
exchange, its downstream connection, its cores and their parsers. What a cycle keeps is freed only by the cyclic
collector, whose passes over a busy worker's young objects paused it 0.4 ms each, 70 times in 6 s at 50 streams,
and a generation-1 pass 4-7 ms (bench/RESULTS.md): a pause every stream in flight waits through.

The gateway runs in process on uvloop, as `tokenpath gateway` does, with the collector off and DEBUG_SAVEALL: after
the requests, one collection lists everything that only a cycle kept."""

from __future__ import annotations

import asyncio
import gc

import h2.connection
import pytest
import uvloop

from tests.gateway.loopcounts import _H2Client, _ShortMember
from tests.helpers import garbage_kept, left_in_cycles
from tokenpath.gateway.config import AuthConfig, GatewayConfig, Member, PoolConfig
from tokenpath.gateway.server import GatewayServer


class _Member(_ShortMember):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's subclasses


BODY = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'


def _request(close: bool) -> bytes:
    connection = b"Connection: close\r\n" if close else b""
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n%s"
        b"Content-Length: %d\r\n\r\n%s" % (connection, len(BODY), BODY)
    )


async def _exchange(port: int, requests: int) -> None:
    """`requests` streamed requests on one connection, the last with `Connection: close`; read until the gateway
    closed it (so its side of the connection is over too)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(requests):
        writer.write(_request(close=i == requests - 1))
        seen = bytearray()
        while b"0\r\n\r\n" not in seen:
            data = await reader.read(65536)
            assert data, f"the gateway closed early: {bytes(seen)!r}"
            seen += data
        assert seen.startswith(b"HTTP/1.1 200"), bytes(seen[:200])
    assert await reader.read() == b""  # the gateway closed: Connection: close
    writer.close()
    await writer.wait_closed()


async def _h2_exchange(port: int) -> None:
    """One streamed request over h2c (prior knowledge), then the client closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    client = _H2Client(reader, writer)
    await client.read_to_end()
    assert b"[DONE]" in client.seen
    writer.close()
    await writer.wait_closed()


def _not_h2s(thing: object) -> bool:
    """h2's connection refers to itself (its `_frame_dispatch_table` holds its own bound methods), one per HTTP/2
    connection, with h2's state only: not the gateway's to cut."""
    return isinstance(thing, h2.connection.H2Connection)


async def _serve_and_collect(connections: int, per_connection: int, h2: bool = False) -> None:
    loop = asyncio.get_running_loop()
    member_server = await loop.create_server(_Member, "127.0.0.1", 0)
    member_port = member_server.sockets[0].getsockname()[1]
    pool = PoolConfig("p", (Member(f"http://127.0.0.1:{member_port}"),))
    gateway = GatewayServer(GatewayConfig((pool,), listen_port=0, auth=AuthConfig(mode="none")))
    port = await gateway.start()
    try:
        await asyncio.wait_for(_exchange(port, 1), 10)  # the member connection pooled, first-time caches filled
        gc.collect()
        gc.garbage.clear()
        for _ in range(connections):
            exchange = _h2_exchange(port) if h2 else _exchange(port, per_connection)
            await asyncio.wait_for(exchange, 10)
        for _ in range(5):  # the gateway's connection_lost for the last connection runs in a later iteration
            await asyncio.sleep(0.01)
        gc.collect()
        left = left_in_cycles(gc.garbage, skip=_not_h2s)
        assert not left, f"left in reference cycles after {connections} connections: {left}"
    finally:
        await gateway.close(0.1)
        member_server.close()


@pytest.mark.parametrize("per_connection", [1, 3], ids=["a connection per request", "keep-alive"])
def test_a_proxied_request_leaves_no_reference_cycle(per_connection: int) -> None:
    with garbage_kept():
        uvloop.run(_serve_and_collect(connections=10, per_connection=per_connection))


def test_a_request_over_h2c_leaves_no_reference_cycle() -> None:
    with garbage_kept():
        uvloop.run(_serve_and_collect(connections=10, per_connection=1, h2=True))
