"""The control relays with an HTTP/2 client in front of an h2c server (in-process, h2 library on both ends): buffer
holds each stream's body to its end on a kept-alive connection, cork holds frames in bursts, pass lets each through,
and the HTTP/1.1-only modes refuse an h2 client rather than garble it."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from tests.controls.h2peer import H2Client, PacedH2Server
from tests.helpers import BackgroundLoop
from tokenpath.controls.relay import ControlRelay, RelayConfig
from tokenpath.serve.h2 import PREFACE
from tokenpath.serve.tlscert import self_signed

EVENTS, INTERVAL_MS = 12, 40.0  # apart enough that a busy host's late loop rarely merges two


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[BackgroundLoop, int]]:
    bg = BackgroundLoop()

    async def start() -> tuple[asyncio.Server, int]:
        srv = await asyncio.get_running_loop().create_server(lambda: PacedH2Server(EVENTS, INTERVAL_MS), "127.0.0.1", 0)
        return srv, srv.sockets[0].getsockname()[1]

    srv, port = bg.run(start())
    yield bg, port
    bg.call(srv.close)
    bg.close()


def relay(server: tuple[BackgroundLoop, int], mode: str, tls: Path | None = None) -> tuple[ControlRelay, int]:
    bg, port = server
    files = self_signed(tls, ["127.0.0.1"]) if tls else None
    cfg = RelayConfig(
        "127.0.0.1", port, mode,  # type: ignore[arg-type]
        tls_cert=str(files.cert) if files else None, tls_key=str(files.key) if files else None,
    )  # fmt: skip
    control = ControlRelay(cfg)
    return control, bg.run(control.start())


def two_streams(port: int, tls: ssl.SSLContext | None = None) -> list[int]:
    client = H2Client(port, tls)
    try:
        return [client.stream().data_reads for _ in range(2)]  # the second on the same, kept-alive connection
    finally:
        client.close()


def test_buffer_holds_each_streams_body_to_its_end_and_the_connection_lives_on(
    server: tuple[BackgroundLoop, int],
) -> None:
    control, port = relay(server, "buffer")
    try:
        assert two_streams(port) == [1, 1]
    finally:
        server[0].run(control.close())


def test_pass_lets_frames_through_and_cork_holds_them_in_bursts(server: tuple[BackgroundLoop, int]) -> None:
    """Counts, not times: 12 frames 20 ms apart; cork (1,448 bytes or 200 ms) releases them a few at a time."""
    passed, pport = relay(server, "pass")
    corked, cport = relay(server, "cork")
    try:
        direct = two_streams(server[1])
        through_pass = two_streams(pport)
        through_cork = two_streams(cport)
    finally:
        server[0].run(passed.close())
        server[0].run(corked.close())
    assert min(direct) > EVENTS // 2
    assert min(through_pass) > EVENTS // 2
    assert max(through_cork) <= EVENTS // 3  # bursts: a few frames per read at least


def test_buffer_over_tls_negotiates_h2_by_alpn(server: tuple[BackgroundLoop, int], tmp_path: Path) -> None:
    control, port = relay(server, "buffer", tmp_path / "tls")
    ctx = ssl.create_default_context(cafile=str(tmp_path / "tls" / "cert.pem"))
    ctx.set_alpn_protocols(["h2"])
    try:
        assert two_streams(port, ctx) == [1, 1]
    finally:
        server[0].run(control.close())


@pytest.mark.parametrize("mode", ["gzip-hold", "gzip-flush"])
def test_an_http1_only_mode_refuses_an_h2_client(server: tuple[BackgroundLoop, int], mode: str) -> None:
    control, port = relay(server, mode)
    try:
        with pytest.raises((ConnectionError, OSError)):
            two_streams(port)
    finally:
        server[0].run(control.close())


def test_an_h2_client_sending_unreadable_frames_is_closed_and_the_relay_serves_the_next(
    server: tuple[BackgroundLoop, int],
) -> None:
    control, port = relay(server, "buffer")
    try:
        with socket.create_connection(("127.0.0.1", port), 5) as sock:
            sock.sendall(PREFACE + b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + b"\x00" * 5)  # SETTINGS, length 5
            received = b""
            for _ in range(100):  # bounded: until the relay closes (recv returns b"") or resets
                try:
                    chunk = sock.recv(65_536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                received += chunk
            else:
                pytest.fail("the relay kept the connection open")
        assert two_streams(port) == [1, 1]
    finally:
        server[0].run(control.close())


class _Talker(asyncio.Protocol):
    """An upstream that speaks first and without end: 1 MiB the moment it is connected."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(b"\x00" * (1 << 20))


def test_an_upstream_that_floods_before_the_request_is_cut_off(server: tuple[BackgroundLoop, int]) -> None:
    """Until the client's first bytes choose the policy the relay keeps what the upstream sends, up to a bound."""
    bg = server[0]

    async def talker() -> asyncio.Server:
        return await asyncio.get_running_loop().create_server(_Talker, "127.0.0.1", 0)

    upstream = bg.run(talker())
    control = ControlRelay(RelayConfig("127.0.0.1", upstream.sockets[0].getsockname()[1], "buffer"))
    port = bg.run(control.start())
    try:
        with socket.create_connection(("127.0.0.1", port), 5) as sock:  # says nothing
            assert sock.recv(65_536) == b""  # closed by the relay, nothing relayed
    except ConnectionResetError:
        pass  # aborted: the same verdict
    finally:
        bg.run(control.close())
        bg.call(upstream.close)
