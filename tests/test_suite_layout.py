"""How `make test` lays the suite out: the timed files it names exist, and whole-process tests are handed out first."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_file_the_timed_lane_names_exists() -> None:
    """A renamed or removed timed file would otherwise run silently in the mixed run, beside unit tests."""
    makefile = (ROOT / "Makefile").read_text()
    block = re.search(r"^E2E_TIMED = (.*?)(?<!\\)\n", makefile, re.MULTILINE | re.DOTALL)
    assert block is not None
    files = block.group(1).replace("\\", " ").split()
    assert len(files) >= 10
    for name in files:
        assert (ROOT / name).is_file(), name


def test_whole_process_tests_are_collected_before_unit_tests() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/test_hostport.py", "tests/e2e/test_clock.py"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    kinds = [line.startswith("tests/e2e/") for line in ids]
    assert True in kinds, ids
    assert False in kinds, ids
    assert kinds == sorted(kinds, reverse=True), ids  # every e2e id before every unit one, although given last
