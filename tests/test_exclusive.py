"""The machine-wide lock that keeps tests reading global state (namespaces, Ray daemons) one at a time."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pytest

from tests.e2e.conftest import exclusive


def test_a_second_holder_waits_until_the_first_lets_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its lock file made there, not left in /tmp
    name = f"selftest-{os.getpid()}"
    order: list[str] = []

    def second_holder() -> None:
        with exclusive(name, timeout_s=30):
            order.append("second")

    with exclusive(name):
        with pytest.raises(TimeoutError, match="held for over"), exclusive(name, timeout_s=0.3):
            pass  # pragma: no cover - never entered: the lock is held above
        second = threading.Thread(target=second_holder)
        second.start()
        second.join(0.5)
        assert order == []  # still waiting while the first holds it
        order.append("first done")
    second.join(30)
    assert order == ["first done", "second"]
