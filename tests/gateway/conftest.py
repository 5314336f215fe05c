"""What the gateway's whole-process tests share: `svc`, the stub and gateway processes a test starts, each stopped
when it ends (tests/gateway/test_gateway_e2e.py's Services)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.test_gateway_e2e import Services


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(tmp_path)
    yield services
    services.stop()
