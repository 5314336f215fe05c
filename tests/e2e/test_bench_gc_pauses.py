"""bench/gc_pauses.py: a gateway from a source tree, timed by its wrapper, serves the load, and its passes come back
by generation once the load ends (the wrapper's SIGUSR1); bad arguments are refused before anything starts."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.e2e.conftest import Start
from tests.helpers import load_script

pytestmark = pytest.mark.e2e

BENCH = Path(__file__).parents[2] / "bench" / "gc_pauses.py"
SRC = Path(__file__).parents[2] / "src"


@pytest.fixture(scope="module")
def gc_pauses() -> ModuleType:
    return load_script(BENCH, "gc_pauses")


def test_a_gateway_run_from_a_tree_reports_its_passes_by_generation(
    gc_pauses: ModuleType, service: Start, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = service("stub", "--port", "0", "--tokens", "4", "--interval-ms", "5", name="stub")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the bench's scratch directory goes
    assert stub.url is not None
    pauses, streams = gc_pauses.measure(str(SRC), stub.url.rstrip("/"), streams=4, tokens=4, seconds=1.0)
    assert set(pauses) == {"0", "1", "2"}
    assert all(isinstance(t, float) and t >= 0 for times in pauses.values() for t in times)
    assert streams >= 4  # each of the 4 closed-loop users finished at least one stream through it
    assert list(tmp_path.glob("tokenpath-gc-pauses-*")) == []  # the passes read, their directory gone


@pytest.mark.parametrize("args", [["--streams", "0"], ["--tokens", "0"], ["--seconds", "0"], []])
def test_bad_arguments_are_refused_before_anything_starts(args: list[str]) -> None:
    src = [] if not args else ["--src", str(SRC)]
    done = subprocess.run([sys.executable, str(BENCH), *src, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error:" in done.stderr
