from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.helpers import BackgroundLoop
from tokenpath.stub.config import StubConfig
from tokenpath.stub.server import StubServer


@pytest.fixture
def bg() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    yield loop
    loop.close()


@pytest.fixture
def start_stub(bg: BackgroundLoop) -> Iterator[Callable[..., StubServer]]:
    servers: list[StubServer] = []

    def start(**kwargs: object) -> StubServer:
        server = StubServer(StubConfig(port=0, **kwargs))  # type: ignore[arg-type]
        bg.run(server.start())
        servers.append(server)
        return server

    yield start
    for server in servers:
        bg.run(server.close())
