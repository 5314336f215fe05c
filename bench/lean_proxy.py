"""The least an HTTP proxy built on tokenpath's own cores can do per request: the gateway's server side (serve/http.py's
HTTPConnection, its ServerConnection and llhttp) and its upstream side (gateway/upstream.py's keep-alive pool and its
ClientConnection), joined by one small sink, with none of the gateway's layers: no auth, routing, admission of its
own, exchange machine, failover, timers, first-token scan, whole-frame cut, request id, metrics or log line.
bench/gateway_cpu.py `--floor` measures it between the bare byte pipe (bench/uvloop_pipe.py: no HTTP at all) and
the gateway: what a request costs in the cores, and what in the layers above them.

    .venv/bin/python bench/lean_proxy.py UPSTREAM_HOST UPSTREAM_PORT  # prints `listening on URL`, serves until killed

Each request goes upstream with its method, target, body and Content-Type; the answer comes back with its status
and Content-Type, its body chunked read by read as it comes. A failed upstream connection ends the client's.
Not a product: the gateway is (`tokenpath gateway`)."""

from __future__ import annotations

import asyncio
import sys

import uvloop

from tokenpath.gateway.failures import Failure
from tokenpath.gateway.link import AttemptFailed
from tokenpath.gateway.upstream import ConnectionPool, UpstreamConnection
from tokenpath.serve.http import Response, bound_port, listen
from tokenpath.serve.listener import serve_factory
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import chunk
from tokenpath.wire.limits import ServerLimits
from tokenpath.wire.server import Request

CONNECT_TIMEOUT_S = 5.0
MAX_BODY_BYTES = 1 << 20


class Sink:
    """gateway/upstream.py's Sink: the upstream's answer straight into the client's response."""

    __slots__ = ("conn", "response")

    def __init__(self, response: Response, conn: UpstreamConnection) -> None:
        self.response = response
        self.conn: UpstreamConnection | None = conn

    def upstream_head(self, head: ResponseHead) -> None:
        response = self.response
        content_type = head.content_type or "application/octet-stream"
        response.write(response.start(head.status, [("Content-Type", content_type)], None))

    def upstream_body(self, data: bytes) -> None:
        if data:
            self.response.write(chunk(data) if self.response.chunked else data)

    def upstream_read_done(self) -> None:
        pass

    def upstream_complete(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.release()
        response = self.response
        response.write(response.end_bytes(), last=True)

    def upstream_lost(self, failure: Failure) -> None:
        self.conn = None
        self.response.close_connection()


class LeanProxy:
    def __init__(self, host: str, port: int) -> None:
        self.pool = ConnectionPool(host, port)
        self.authority = f"{host}:{port}"
        self.tasks: set[asyncio.Task[None]] = set()  # connects in flight (the loop keeps weak references only)

    def __call__(self, request: Request, response: Response) -> None:
        conn = self.pool.take_idle()
        if conn is not None:  # a keep-alive connection: the request goes out in this call
            self._send(request, response, conn)
            return
        task = asyncio.get_running_loop().create_task(self._connect(request, response))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connect(self, request: Request, response: Response) -> None:
        try:
            conn = await self.pool.acquire(CONNECT_TIMEOUT_S)
        except AttemptFailed:
            response.close_connection()
            return
        self._send(request, response, conn)

    def _send(self, request: Request, response: Response, conn: UpstreamConnection) -> None:
        headers = [("Content-Type", request.header("content-type") or "application/json")]
        headers.append(("Content-Length", str(len(request.body))))
        conn.send_request(Sink(response, conn), request.method, self.authority, request.target, headers, request.body)


async def serve(host: str, port: int) -> None:
    factory = serve_factory(LeanProxy(host, port), ServerLimits(max_body_bytes=MAX_BODY_BYTES), None)
    server = await listen(factory, "127.0.0.1", 0)
    print(f"lean proxy: listening on http://127.0.0.1:{bound_port(server)}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        sys.exit("usage: lean_proxy.py UPSTREAM_HOST UPSTREAM_PORT")
    uvloop.run(serve(sys.argv[1], int(sys.argv[2])))
