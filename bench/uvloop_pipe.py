"""The least a Python relay on uvloop can do per read: hand the bytes from one socket to the other, one Protocol
callback and one `transport.write` per read, nothing else (no HTTP, no policy, no buffering). bench/gateway_cpu.py
`--floor` measures it beside the gateway and nginx: what per-frame CPU is the price of uvloop and the kernel, and what
is the relay's own Python on top.

    .venv/bin/python bench/uvloop_pipe.py UPSTREAM_HOST UPSTREAM_PORT  # prints `listening on URL`, serves until killed

A client connection gets its own upstream connection (opened when the client connects); bytes the client sends
first wait for it. Back-pressure both ways: a full buffer on one side pauses reading on the other.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import cast

import uvloop


def _nodelay(transport: asyncio.BaseTransport) -> None:
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Upstream(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.transport.close()

    def pause_writing(self) -> None:
        self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        self.client.transport.resume_reading()


class Client(asyncio.Protocol):
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.upstream: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.closed = False  # the client left (perhaps before the upstream connected)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        _nodelay(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            loop = asyncio.get_running_loop()
            upstream, _ = await loop.create_connection(lambda: Upstream(self), self.host, self.port)
        except OSError:
            self.transport.close()
            return
        if self.closed:
            upstream.close()
            return
        self.upstream = upstream
        for data in self.early:
            upstream.write(data)
        self.early.clear()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.early.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.upstream is not None:
            self.upstream.close()

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.resume_reading()


async def serve(host: str, port: int) -> None:
    server = await asyncio.get_running_loop().create_server(lambda: Client(host, port), "127.0.0.1", 0)
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(sys.argv[1], int(sys.argv[2])))
