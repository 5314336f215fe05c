from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.helpers import BackgroundLoop, stubs
from tokenpath.stub.server import StubServer


@pytest.fixture
def bg() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    yield loop
    loop.close()


@pytest.fixture
def start_stub(bg: BackgroundLoop) -> Iterator[Callable[..., StubServer]]:
    with stubs(bg) as start:
        yield start
