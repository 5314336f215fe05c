"""scripts/run-tests, make test's lanes, with fake `pytest` and `mypy` that say where and how they ran: the unit
tests and mypy go into an idle cgroup beside the e2e lanes (SIGINT not ignored there), the e2e lanes do not, every
lane runs and the first failure is the exit, the group is gone afterwards, and RUN_TESTS_IDLE=0 (or no cgroup to
make) runs them the old way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "scripts" / "run-tests"
TIMED = ["tests/e2e/a.py", "tests/e2e/b.py"]

# Each fake writes one line: its name, its arguments, its cpu cgroup and whether SIGINT is ignored; FAIL_WHEN names
# an argument that makes it exit 3.
FAKE = """#!/usr/bin/env bash
cgroup=$(grep -E '^[0-9]+:(cpu|cpu,cpuacct|):' /proc/$$/cgroup | head -1 | cut -d: -f3)
ignored=$(( (0x$(awk '/^SigIgn/ {print $2}' /proc/$$/status) >> 1) & 1 ))
echo "$(basename "$0")|$*|$cgroup|$ignored" >> "$RUN_TESTS_OUT"
case " $* " in *" $FAIL_WHEN "*) exit 3 ;; esac
exit 0
"""


def can_make_idle_cgroups() -> bool:
    return os.geteuid() == 0 and (Path("/sys/fs/cgroup/cpu/cgroup.procs").exists() or (
        "cpu" in Path("/sys/fs/cgroup/cgroup.subtree_control").read_text()
        if Path("/sys/fs/cgroup/cgroup.subtree_control").exists() else False
    ))  # fmt: skip


def run(tmp_path: Path, *, fail_when: str = "never", idle: str = "1") -> tuple[int, list[list[str]], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    for name in ("pytest", "mypy"):
        (bin_dir / name).write_text(FAKE)
        (bin_dir / name).chmod(0o755)
    out = tmp_path / "ran"
    env = {**os.environ, "RUN_TESTS_OUT": str(out), "FAIL_WHEN": fail_when, "RUN_TESTS_IDLE": idle}
    command = ["bash", "-c", 'trap "" INT; exec bash "$0" "$@"', str(SCRIPT), str(bin_dir), *TIMED]  # as from &
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, [line.split("|") for line in out.read_text().splitlines()], done.stdout


def lane(ran: list[list[str]], name: str, marker: str) -> list[str]:
    (found,) = [line for line in ran if line[0] == name and marker in line[1]]
    return found


@pytest.mark.skipif(not can_make_idle_cgroups(), reason="needs root and a cgroup cpu controller with cpu.idle")
def test_unit_tests_and_mypy_run_in_an_idle_cgroup_beside_the_e2e_lanes(tmp_path: Path) -> None:
    status, ran, stdout = run(tmp_path)
    assert status == 0, stdout
    unit, checked = lane(ran, "pytest", "-m not e2e"), lane(ran, "mypy", "")
    timed, functional = lane(ran, "pytest", "--dist loadfile"), lane(ran, "pytest", "--dist worksteal")
    group = unit[2]
    assert "/tokenpath-tests-" in group
    assert checked[2] == group
    assert group not in (timed[2], functional[2])
    assert (unit[3], checked[3]) == ("0", "0")  # SIGINT not ignored, though the script was started ignoring it
    assert timed[3] == "1"  # (the fake's check works: the e2e lanes inherit the ignoring)
    assert timed[1].endswith(" ".join(TIMED))
    assert "-m e2e" in functional[1]
    assert all(f"--ignore={file}" in functional[1] for file in TIMED)
    assert not any((Path(base) / group.lstrip("/")).exists() for base in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup"))
    assert "the unit tests (beside the e2e lanes)" in stdout


@pytest.mark.skipif(not can_make_idle_cgroups(), reason="needs root and a cgroup cpu controller with cpu.idle")
def test_a_failing_lane_is_the_exit_and_the_others_still_run(tmp_path: Path) -> None:
    status, ran, _ = run(tmp_path / "timed", fail_when="loadfile")
    assert status == 3
    assert len(ran) == 4  # the timed lane failed; the functional lane, the unit tests and mypy still ran
    status, ran, stdout = run(tmp_path / "unit", fail_when="no:cacheprovider")
    assert status == 3  # the unit tests' failure, though they ran in the background
    assert len(ran) == 4
    assert "the unit tests (beside the e2e lanes)" in stdout


def test_without_an_idle_cgroup_the_unit_tests_run_in_the_functional_lane(tmp_path: Path) -> None:
    status, ran, stdout = run(tmp_path, idle="0", fail_when="worksteal")
    assert status == 3
    assert "no idle cgroup" in stdout
    assert [line[0] for line in ran].count("pytest") == 2
    whole = lane(ran, "pytest", "--dist worksteal")
    assert "-m" not in whole[1].split()  # every test but the timed files: the unit tests too
    assert all(f"--ignore={file}" in whole[1] for file in TIMED)
    assert "/tokenpath-tests-" not in lane(ran, "mypy", "")[2]
