"""An aioquic HTTP/3 server on its own loop in a thread, on loopback with a certificate made for the test: the
start-up and stop every scripted QUIC peer in the tests shares (tests/probe/test_h3stream.py,
tests/load/test_h3conn_hostile.py); what the peer does is the protocol class each passes."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer, serve
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration

from tokenpath.serve.tlscert import self_signed


@dataclass
class RunningQuic:
    port: int
    cacert: str
    loop: asyncio.AbstractEventLoop
    server: QuicServer
    thread: threading.Thread

    def stop(self, cancel_tasks: bool = False) -> None:
        """Close the server on its loop (and cancel what its connections still run, when asked), then stop it."""

        async def shut() -> None:
            self.server.close()
            if cancel_tasks:
                for task in asyncio.all_tasks():
                    if task is not asyncio.current_task():
                        task.cancel()
            await asyncio.sleep(0.05)  # the transports' close callbacks run

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def start_quic(
    tmp_path: Path, protocol: type[QuicConnectionProtocol], addresses: tuple[str, ...] = ("127.0.0.1",)
) -> RunningQuic:
    """Serve `protocol` on 127.0.0.1 (a free UDP port), its certificate naming `addresses`."""
    tls = self_signed(tmp_path / "tls", list(addresses))
    loop = asyncio.new_event_loop()
    config = QuicConfiguration(is_client=False, alpn_protocols=list(H3_ALPN))
    config.load_cert_chain(str(tls.cert), str(tls.key))
    server = loop.run_until_complete(serve("127.0.0.1", 0, configuration=config, create_protocol=protocol))
    assert server._transport is not None
    port = server._transport.get_extra_info("sockname")[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return RunningQuic(port, str(tls.cert), loop, server, thread)
