"""gateway/link.py, the one connect path of both upstream pools, against in-process members on loopback: ALPN chooses
the protocol where an HTTP/2 pool goes over TLS (h2, or HTTP/1.1 as httpcore falls back), the connect timeout covers
the TLS handshake, a certificate failure is a TLS failure, sessions are resumed across connections."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest

from tokenpath.gateway.failures import Failure, FailureKind
from tokenpath.gateway.h2upstream import H2UpstreamPool, H2UpstreamStream
from tokenpath.gateway.link import AttemptFailed
from tokenpath.gateway.tls import client_context
from tokenpath.gateway.upstream import ConnectionPool, UpstreamConnection
from tokenpath.serve.tlscert import self_signed
from tokenpath.wire.client import ResponseHead


class Sink:
    def __init__(self) -> None:
        self.head: ResponseHead | None = None
        self.body = b""
        self.done: asyncio.Future[Failure | None] = asyncio.get_running_loop().create_future()

    def upstream_head(self, head: ResponseHead) -> None:
        self.head = head

    def upstream_body(self, data: bytes) -> None:
        self.body += data

    def upstream_read_done(self) -> None:
        pass

    def upstream_complete(self) -> None:
        self.done.set_result(None)

    def upstream_lost(self, failure: Failure) -> None:
        self.done.set_result(failure)


class H1Member(asyncio.Protocol):
    """Answers every request on a keep-alive connection with `200 ok`."""

    transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            _, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


class H2Member(asyncio.Protocol):
    """The h2 library's server side: `200 ok` to every stream."""

    transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.conn.initiate_connection()
        transport.write(self.conn.data_to_send())  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.StreamEnded):
                self.conn.send_headers(event.stream_id, [(b":status", b"200"), (b"content-length", b"2")])
                self.conn.send_data(event.stream_id, b"ok", end_stream=True)
        assert self.transport is not None
        self.transport.write(self.conn.data_to_send())


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    files = self_signed(tmp_path_factory.mktemp("tls"), ["127.0.0.1"])
    return str(files.cert), str(files.key)


def server_context(cert: tuple[str, str], alpn: list[str] | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*cert)
    if alpn is not None:
        ctx.set_alpn_protocols(alpn)
    return ctx


Scenario = Callable[[int], Awaitable[None]]


def serve(member: Callable[[], asyncio.Protocol], ctx: ssl.SSLContext | None, scenario: Scenario) -> None:
    async def main() -> None:
        members: list[asyncio.Protocol] = []

        def accept() -> asyncio.Protocol:
            members.append(member())
            return members[-1]

        server = await asyncio.get_running_loop().create_server(accept, "127.0.0.1", 0, ssl=ctx)
        try:
            await asyncio.wait_for(scenario(server.sockets[0].getsockname()[1]), 10)
        finally:
            server.close()
            for m in members:
                transport = getattr(m, "transport", None)
                if transport is not None:
                    transport.abort()
            await asyncio.sleep(0.05)  # the aborts and the pools' closes run

    asyncio.run(main())


async def get(conn: UpstreamConnection | H2UpstreamStream) -> Sink:
    sink = Sink()
    conn.send_request(sink, "GET", "127.0.0.1", "/", [("Accept", "*/*")], b"")
    assert await sink.done is None
    return sink


def test_an_h2_pool_over_tls_speaks_http2_when_the_member_picks_it(cert: tuple[str, str]) -> None:
    async def scenario(port: int) -> None:
        pool = H2UpstreamPool("127.0.0.1", port, client_context(cert[0], None, None, ["h2", "http/1.1"]))
        stream = await pool.acquire(5)
        assert isinstance(stream, H2UpstreamStream)
        sink = await get(stream)
        assert sink.head is not None
        assert (sink.head.status, sink.head.http_version, sink.body) == (200, "2", b"ok")
        stream.release()
        again = await pool.acquire(5)
        assert isinstance(again, H2UpstreamStream)
        assert again.conn is stream.conn  # multiplexed: the same connection
        assert again.reused
        pool.close()

    serve(H2Member, server_context(cert, ["h2", "http/1.1"]), scenario)


@pytest.mark.parametrize("alpn", [["http/1.1"], None], ids=["http1-by-alpn", "no-alpn"])
def test_an_h2_pool_over_tls_speaks_http1_when_the_member_picks_it(
    cert: tuple[str, str], alpn: list[str] | None
) -> None:
    """httpcore's rule: ALPN chooses. A member that picks http/1.1 (or does not do ALPN) gets HTTP/1.1 on
    keep-alive connections, one request each; concurrent requests each get their own."""

    async def scenario(port: int) -> None:
        handshakes: list[bool] = []
        ctx = client_context(cert[0], None, None, ["h2", "http/1.1"])
        pool = H2UpstreamPool("127.0.0.1", port, ctx, handshakes.append)
        conns = await asyncio.gather(*(pool.acquire(5) for _ in range(3)))
        assert all(isinstance(c, UpstreamConnection) for c in conns)
        assert len({id(c) for c in conns}) == 3  # never two requests on one HTTP/1.1 connection
        for conn in conns:
            sink = await get(conn)
            assert sink.head is not None
            assert (sink.head.status, sink.head.http_version, sink.body) == (200, "1.1", b"ok")
            conn.release()
        assert pool.connections == []
        assert len(pool.http1.idle) == 3
        again = await pool.acquire(5)
        assert again in conns  # kept alive, reused
        assert len(handshakes) == 3
        pool.close()

    serve(H1Member, server_context(cert, alpn), scenario)


def test_an_http1_pool_resumes_the_tls_session_on_its_next_connection(cert: tuple[str, str]) -> None:
    async def scenario(port: int) -> None:
        handshakes: list[bool] = []
        pool = ConnectionPool("127.0.0.1", port, client_context(cert[0], None, None, ["http/1.1"]), handshakes.append)
        conn = await pool.acquire(5)
        await get(conn)
        conn.release()  # the session is taken once the first response is done (TLS 1.3 tickets come late)
        fresh = await pool.acquire(5, fresh=True)
        assert fresh is not conn
        await get(fresh)
        assert handshakes == [False, True]
        pool.close()

    serve(H1Member, server_context(cert, ["http/1.1"]), scenario)


def test_a_clear_text_h2_pool_speaks_http2_with_prior_knowledge() -> None:
    async def scenario(port: int) -> None:
        pool = H2UpstreamPool("127.0.0.1", port)
        stream = await pool.acquire(5)
        assert isinstance(stream, H2UpstreamStream)
        sink = await get(stream)
        assert sink.head is not None
        assert sink.head.http_version == "2"
        pool.close()

    serve(H2Member, None, scenario)


def test_a_certificate_the_pool_does_not_trust_is_a_tls_failure(cert: tuple[str, str], tmp_path: Path) -> None:
    other = self_signed(tmp_path / "other", ["127.0.0.1"])

    async def scenario(port: int) -> None:
        for pool in (
            ConnectionPool("127.0.0.1", port, client_context(str(other.cert), None, None, ["http/1.1"])),
            H2UpstreamPool("127.0.0.1", port, client_context(str(other.cert), None, None, ["h2", "http/1.1"])),
        ):
            with pytest.raises(AttemptFailed) as failed:
                await pool.acquire(5)
            assert failed.value.failure.kind is FailureKind.TLS
            assert "certificate verify failed" in failed.value.failure.detail

    serve(H1Member, server_context(cert, ["http/1.1"]), scenario)


def test_a_silent_handshake_is_a_connect_timeout_and_a_refused_port_a_connect_failure(cert: tuple[str, str]) -> None:
    async def main() -> None:
        silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog does), never answers
        ctx = client_context(cert[0], None, None, ["h2", "http/1.1"])
        try:
            port = silent.getsockname()[1]
            for pool in (ConnectionPool("127.0.0.1", port, ctx), H2UpstreamPool("127.0.0.1", port, ctx)):
                with pytest.raises(AttemptFailed) as failed:
                    await pool.acquire(0.3)
                assert failed.value.failure.kind is FailureKind.CONNECT_TIMEOUT
                assert "connect (and TLS handshake)" in failed.value.failure.detail
        finally:
            silent.close()
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            port = unused.getsockname()[1]
        with pytest.raises(AttemptFailed) as refused:
            await H2UpstreamPool("127.0.0.1", port).acquire(5)
        assert refused.value.failure.kind is FailureKind.CONNECT

    asyncio.run(main())
