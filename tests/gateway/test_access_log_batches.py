"""The gateway's access log goes out in batches (jsonlog.BatchedHandler): the gateway hands its logging the worker's
timer wheel to flush on when it starts, so a line reaches the log within a few tenths of a second with no other
traffic, and takes the wheel back when it closes, writing what waits."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from tests.gateway.loopcounts import _production_logging, _read_until, _ShortMember
from tokenpath.gateway import server
from tokenpath.gateway.config import AuthConfig, GatewayConfig, Member, PoolConfig
from tokenpath.gateway.server import GatewayServer
from tokenpath.jsonlog import BatchedHandler

BODY = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


def scheduled(handler: BatchedHandler) -> bool:
    """Whether the handler batches now (a call: the gateway's start and close change it behind the test's back)."""
    return handler.schedule is not None


def access_lines(out: io.StringIO) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return [line for line in lines if line.get("path") == "/v1/chat/completions"]


async def scenario(out: io.StringIO) -> None:
    loop = asyncio.get_running_loop()
    member = await loop.create_server(_ShortMember, "127.0.0.1", 0)
    pool = PoolConfig("p", (Member(f"http://127.0.0.1:{member.sockets[0].getsockname()[1]}"),))
    gateway = GatewayServer(GatewayConfig((pool,), listen_port=0, auth=AuthConfig(mode="none")))
    handler = logging.getLogger("tokenpath").handlers[0]
    assert isinstance(handler, BatchedHandler)
    assert not scheduled(handler)  # before the gateway runs: every line at once
    port = await gateway.start()
    try:
        assert scheduled(handler)  # the wheel's
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        await _read_until(reader, bytearray(), b"0\r\n\r\n")
        deadline = loop.time() + 5
        while not access_lines(out):  # no other request, no close: the wheel's flush writes it
            assert loop.time() < deadline, "the access line never left the batch"
            await asyncio.sleep(0.02)
        writer.write(REQUEST)
        await _read_until(reader, bytearray(), b"0\r\n\r\n")
        writer.close()
    finally:
        await gateway.close(0.1)
        member.close()
    assert not scheduled(handler)  # taken back: lines logged after the close go at once
    assert len(access_lines(out)) == 2  # the second one written by the close at the latest


def test_the_access_log_is_flushed_on_the_wheel_while_running_and_by_the_close() -> None:
    out = io.StringIO()
    with _production_logging(out):
        asyncio.run(scenario(out))


def test_a_gateway_process_logs_through_a_batched_handler() -> None:
    """`tokenpath gateway`'s processes (run(), each worker's _app) configure their logging here."""
    out = io.StringIO()
    with _production_logging(out):
        server._app(GatewayConfig((PoolConfig("p", (Member("http://127.0.0.1:9"),)),)), "info", None, None)
        handlers = logging.getLogger("tokenpath").handlers
        assert [type(h) for h in handlers] == [BatchedHandler]
        assert logging.getLogger("tokenpath").level == logging.INFO


async def failing_close() -> None:
    gateway = GatewayServer(GatewayConfig((PoolConfig("p", (Member("http://127.0.0.1:9"),)),), listen_port=0))
    handler = logging.getLogger("tokenpath").handlers[0]
    assert isinstance(handler, BatchedHandler)
    await gateway.start()
    assert scheduled(handler)

    async def broken_drain(_: float) -> int:
        raise RuntimeError("planted")

    gateway.app.drain = broken_drain  # type: ignore[method-assign,assignment]
    try:
        await gateway.close(0.1)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the planted failure did not come through")
    assert not scheduled(handler)  # taken back all the same: the wheel stops with this loop


def test_a_close_that_fails_still_takes_the_wheel_back() -> None:
    with _production_logging(io.StringIO()):
        asyncio.run(failing_close())
