from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.helpers import BackgroundLoop, stubs
from tokenpath.stub.server import StubServer


@pytest.fixture
def start_stub() -> Iterator[Callable[..., StubServer]]:
    """In-process stubs serving every format (`api="all"`), on a background loop of their own."""
    bg = BackgroundLoop()
    try:
        with stubs(bg, api="all") as start:
            yield start
    finally:
        bg.close()
