"""Two lanes: `-m "not e2e"` is the unit lane (make test-fast, seconds); `make test` runs both. Everything under
tests/e2e is whole-process and carries the e2e marker from here, so a new file there cannot land in the fast lane."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

E2E_DIR = Path(__file__).parent / "e2e"

# Hypothesis's deadline (200 ms an example) and its too-slow health check are timing assertions, which have no place
# in these tests: on a loaded 2-core host an example or a draw can take that long, and in a clean checkout the first
# `st.characters` builds Hypothesis's character table (~1.5 s; kept in .hypothesis/ afterwards), which failed a
# property test in a clean clone's CI. Every property test runs under this profile (tests/test_hypothesis_profile.py).
settings.register_profile("tokenpath", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tokenpath")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)
    # Whole-process tests first (a stable sort: files keep their order): in `make test`'s mixed run, work-stealing
    # workers start the long, waiting ones at once and fill the cores with the short unit tests around them, rather
    # than meeting a 40 s e2e test at the end of the queue.
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


@pytest.fixture
def log_records() -> Iterator[list[logging.LogRecord]]:
    """Every LogRecord made while the test runs (logging's record factory wrapped): a line written without one
    went around logging's record."""
    made: list[logging.LogRecord] = []
    factory = logging.getLogRecordFactory()

    def counted(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made.append(factory(*args, **kwargs))
        return made[-1]

    logging.setLogRecordFactory(counted)
    try:
        yield made
    finally:
        logging.setLogRecordFactory(factory)
