"""Two lanes: `-m "not e2e"` is the unit lane (make test-fast, seconds); `make test` runs both. Everything under
tests/e2e is whole-process and carries the e2e marker from here, so a new file there cannot land in the fast lane."""

from __future__ import annotations

from pathlib import Path

import pytest

E2E_DIR = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)
    # Whole-process tests first (a stable sort: files keep their order): in `make test`'s mixed run, work-stealing
    # workers start the long, waiting ones at once and fill the cores with the short unit tests around them, rather
    # than meeting a 40 s e2e test at the end of the queue.
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)
