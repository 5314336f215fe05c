"""scripts/run-tests, make test's lanes, with fake `pytest` and `mypy` that say where and how they ran: mypy goes into
an idle cgroup beside the test lanes (SIGINT not ignored there), the test lanes do not (the unit tests hold
in-process servers to deadlines), every lane runs and the first failure is the exit, the group is gone afterwards,
and RUN_TESTS_IDLE=0 (or no cgroup to make) runs mypy beside the second lane as before."""

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
    v2 = Path("/sys/fs/cgroup/cgroup.subtree_control")
    v1 = Path("/sys/fs/cgroup/cpu/cgroup.procs")
    return os.geteuid() == 0 and (v1.exists() or (v2.exists() and "cpu" in v2.read_text().split()))


def own_cgroup() -> str:
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    return next(line.split(":", 2)[2] for line in lines if line.split(":")[1] in ("cpu", "cpu,cpuacct", ""))


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


def check_the_test_lanes(ran: list[list[str]]) -> tuple[list[str], list[str]]:
    timed, rest = lane(ran, "pytest", "--dist loadfile"), lane(ran, "pytest", "--dist worksteal")
    assert timed[1].endswith(" ".join(TIMED))
    assert "-m" not in rest[1].split()  # every test but the timed files: the unit tests too
    assert all(f"--ignore={file}" in rest[1] for file in TIMED)
    return timed, rest


@pytest.mark.skipif(not can_make_idle_cgroups(), reason="needs root and a cgroup cpu controller with cpu.idle")
def test_mypy_runs_in_an_idle_cgroup_beside_the_test_lanes_and_the_tests_do_not(tmp_path: Path) -> None:
    status, ran, stdout = run(tmp_path)
    assert status == 0, stdout
    timed, rest = check_the_test_lanes(ran)
    checked = lane(ran, "mypy", "")
    group = checked[2]
    assert "/tokenpath-tests-" in group
    assert group not in (timed[2], rest[2])
    assert checked[3] == "0"  # SIGINT not ignored, though the script was started ignoring it
    assert timed[3] == "1"  # (the fake's check works: the test lanes inherit the ignoring)
    assert not any((Path(base) / group.lstrip("/")).exists() for base in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup"))
    assert "--- mypy (beside the test lanes) ---" in stdout


@pytest.mark.skipif(not can_make_idle_cgroups(), reason="needs root and a cgroup cpu controller with cpu.idle")
@pytest.mark.parametrize("failing", ["loadfile", "worksteal"])
def test_a_failing_lane_is_the_exit_and_the_others_still_run(tmp_path: Path, failing: str) -> None:
    status, ran, _ = run(tmp_path, fail_when=failing)
    assert status == 3
    assert len(ran) == 3


@pytest.mark.skipif(not can_make_idle_cgroups(), reason="needs root and a cgroup cpu controller with cpu.idle")
def test_a_failing_mypy_in_the_background_is_the_exit(tmp_path: Path) -> None:
    status, ran, stdout = run(tmp_path, fail_when="")  # mypy has no arguments: " " matches it alone
    assert status == 3, stdout
    assert len(ran) == 3


def test_without_an_idle_cgroup_mypy_runs_beside_the_second_lane(tmp_path: Path) -> None:
    status, ran, stdout = run(tmp_path, idle="0", fail_when="worksteal")
    assert status == 3
    assert "no idle cgroup" in stdout
    check_the_test_lanes(ran)
    assert lane(ran, "mypy", "")[2] == own_cgroup()  # where the script was: no group of its own
