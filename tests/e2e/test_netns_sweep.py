"""A run killed outright (SIGKILL, the OOM killer) leaves its network namespaces and what runs inside them; the
next run that makes namespaces removes them (links/netns.sweep), and never a live run's or a name no marker gives.
Needs root. Each run here is a child process, so it can be killed like a real one."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tokenpath.errors import NetnsError
from tokenpath.links import netns, owners

# A Star or a VethPair make names the cluster tests look for (they assert no tp-n* namespace is left): one at a time.
pytestmark = [
    pytest.mark.skipif(netns.available() is not None, reason=str(netns.available())),
    pytest.mark.usefixtures("ray_cluster_alone"),
]
TIMEOUT_S = 30.0  # a child's start, a killed process's exit: well under a second on an idle host

# A run: makes its namespaces, leaves a process sleeping in the last one (as Ray leaves its raylet), prints that
# process's pid and holds everything until its stdin closes (then it removes it all) or it is killed.
RUN = """
import subprocess, sys
from tokenpath.links import netns
kind, tag = sys.argv[1:]
with (netns.Star(2, tag=tag) if kind == "star" else netns.VethPair(tag=tag)) as made:
    sleeper = subprocess.Popen(["ip", "netns", "exec", made.names[-1], "sleep", "300"], start_new_session=True)
    print(sleeper.pid, flush=True)
    sys.stdin.read()
"""


def listed() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def names_of(kind: str, tag: str) -> set[str]:
    return {f"tp-n0-{tag}", f"tp-n1-{tag}"} if kind == "star" else {f"tp-s-{tag}", f"tp-c-{tag}"}


def stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields from the third on (the state first), None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return text[text.rindex(")") + 2 :].split()


def running(pid: int) -> bool:
    fields = stat(pid)
    return fields is not None and fields[0] != "Z"  # a zombie is dead; its new parent may not reap it at once


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"not within {TIMEOUT_S:.0f} s: {what}"
        time.sleep(0.05)


def markers_of(tag: str) -> list[Path]:
    return sorted(owners.MARKERS.glob(f"*-{tag}.json"))


class Scene:
    """The tags, runs and processes a test makes, all removed at its end whatever happened."""

    def __init__(self) -> None:
        self.tags: list[str] = []
        self.procs: list[subprocess.Popen[str]] = []

    def tag(self) -> str:
        self.tags.append(f"{os.getpid()}t{len(self.tags)}")  # unique among this host's pytest processes
        return self.tags[-1]

    def run(self, kind: str, tag: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", RUN, kind, tag], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        self.procs.append(proc)
        return proc

    def sleeper(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["sleep", "300"], text=True)
        self.procs.append(proc)
        return proc

    def ours(self) -> set[str]:
        return {name for name in listed() for tag in self.tags if name.endswith(f"-{tag}")}

    def clean(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(TIMEOUT_S)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        for name in self.ours():
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
        for tag in self.tags:
            for marker in markers_of(tag):
                marker.unlink()


@pytest.fixture
def scene() -> Iterator[Scene]:
    made = Scene()
    try:
        yield made
    finally:
        made.clean()
    assert made.ours() == set()


def ready(proc: subprocess.Popen[str]) -> int:
    """The pid of the process the run left sleeping in its namespaces, once they are all made."""
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], TIMEOUT_S)
    line = proc.stdout.readline() if readable else ""
    if not line:
        proc.kill()
        raise AssertionError(f"the run did not start: {proc.communicate(timeout=TIMEOUT_S)[1][-2000:]}")
    return int(line)


def killed(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(TIMEOUT_S)


@pytest.mark.parametrize("kind", ["star", "veth"])
def test_a_killed_runs_namespaces_and_what_runs_in_them_go_when_the_next_run_starts(scene: Scene, kind: str) -> None:
    old = scene.tag()
    run = scene.run(kind, old)
    sleeper = ready(run)
    killed(run)
    assert names_of(kind, old) <= listed()  # nothing removes them by itself
    assert running(sleeper)
    assert markers_of(old)
    with netns.Star(2, tag=scene.tag()) as new:
        assert names_of(kind, old).isdisjoint(listed())
        assert set(new.names) <= listed()
    wait_until(lambda: not running(sleeper), "the process left inside is killed")
    assert markers_of(old) == []
    assert scene.ours() == set()


# A run that kills itself at a chosen step of making its namespaces: step 0 right after its marker is written (no
# namespace yet), step k just before its k-th `ip` command (some made, some not), a step past the last after all.
KILLED_AT = """
import os, signal, sys
from tokenpath.links import netns, owners
kind, tag, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
claim, run_ip, calls = owners.claim, netns._ip, [0]
def claimed(*args, **kwargs):
    marker = claim(*args, **kwargs)
    if at == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return marker
def counted(*args):
    calls[0] += 1
    if calls[0] == at:
        os.kill(os.getpid(), signal.SIGKILL)
    run_ip(*args)
owners.claim, netns._ip = claimed, counted
with netns.Star(2, tag=tag) if kind == "star" else netns.VethPair(tag=tag):
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("kind", ["star", "veth"])
def test_runs_killed_at_every_step_of_making_their_namespaces_are_swept_whole(scene: Scene, kind: str) -> None:
    """Killed after its marker and before any namespace, before each `ip` command of its build (half made), or once
    all is made: a later run sweeps every one of them whole."""
    steps = 14 if kind == "star" else 11  # more than a build's `ip` commands: the last runs are killed after it
    tags = [scene.tag() for _ in range(steps)]
    for at, tag in enumerate(tags):
        run = subprocess.run([sys.executable, "-c", KILLED_AT, kind, tag, str(at)], capture_output=True, text=True,
                             timeout=TIMEOUT_S)  # fmt: skip
        assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
        assert markers_of(tag), f"step {at}: killed before its marker was written"
    assert names_of(kind, tags[-1]) <= listed()  # the last run was killed with all of its namespaces made
    assert names_of(kind, tags[1]).isdisjoint(listed())  # ... and the second before its first was
    with netns.Star(2, tag=scene.tag()):
        pass
    assert scene.ours() == set()
    assert [p for p in owners.MARKERS.iterdir() if any(t in p.name for t in tags)] == []


def test_live_runs_are_never_swept_even_when_they_start_at_once(scene: Scene) -> None:
    tags = [scene.tag() for _ in range(3)]
    runs = [scene.run("star", tag) for tag in tags]  # each sweeps while the others are claiming and building
    sleepers = [ready(run) for run in runs]
    everything = set().union(*(names_of("star", tag) for tag in tags))
    with netns.Star(2, tag=scene.tag()):
        assert everything <= listed()
        assert all(running(pid) for pid in sleepers)
    assert everything <= listed()
    for run in runs:
        assert run.stdin is not None
        run.stdin.close()  # each ends as a run does, removing what it made
        assert run.wait(TIMEOUT_S) == 0, run.stderr.read() if run.stderr else ""
    assert everything.isdisjoint(listed())
    wait_until(lambda: not any(running(pid) for pid in sleepers), "each run kills what it left inside")
    assert all(markers_of(tag) == [] for tag in tags)


@pytest.mark.parametrize(("start_shift", "swept"), [(0, False), (1, True)])
def test_an_owner_is_its_pid_and_its_start_time(scene: Scene, start_shift: int, swept: bool) -> None:
    """The owner's pid is alive in both cases; with another start time it is another process (the pid reused)."""
    stand_in = scene.sleeper()
    fields = stat(stand_in.pid)
    assert fields is not None
    tag = scene.tag()
    names = sorted(names_of("star", tag))
    me = owners.current()
    owner = owners.Owner(stand_in.pid, int(fields[19]) + start_shift, me.boot, me.pid_ns)  # field 22
    with owners.locked():
        owners.claim(names, owner)
    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
    with netns.Star(2, tag=scene.tag()):
        assert set(names).isdisjoint(listed()) is swept
        assert (markers_of(tag) == []) is swept
    assert stand_in.poll() is None  # the owner's pid is never signalled, only processes inside its namespaces


def test_names_like_ours_that_no_marker_gives_are_named_never_deleted(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    """Made by a run from before markers: whether it still runs cannot be told."""
    tag = scene.tag()
    orphan = f"tp-n0-{tag}"
    subprocess.run(["ip", "netns", "add", orphan], check=True)
    with caplog.at_level(logging.WARNING, logger="tokenpath.links.netns"), netns.Star(2, tag=scene.tag()):
        assert orphan in listed()
    (warning,) = [r.getMessage() for r in caplog.records if orphan in r.getMessage()]
    assert f"ip netns delete {orphan}" in warning
    assert "\n" not in warning
    with pytest.raises(NetnsError, match="already exist"):  # nor deleted by a run given the same tag
        netns.Star(2, tag=tag).__enter__()
    assert orphan in listed()
    assert markers_of(tag) == []


def test_a_run_given_a_live_runs_tag_is_refused_and_touches_nothing(scene: Scene) -> None:
    tag = scene.tag()
    run = scene.run("star", tag)
    sleeper = ready(run)
    with pytest.raises(NetnsError, match="another run's"):
        netns.Star(2, tag=tag).__enter__()
    assert names_of("star", tag) <= listed()
    assert running(sleeper)
    assert len(markers_of(tag)) == 1


def test_the_marker_lists_the_namespaces_while_they_exist_also_when_making_them_fails(scene: Scene) -> None:
    tag = scene.tag()
    with netns.Star(3, tag=tag) as star:
        (marker,) = markers_of(tag)
        doc = json.loads(marker.read_text())
        assert doc["namespaces"] == star.names
        assert doc["owner"]["pid"] == os.getpid()
    assert markers_of(tag) == []
    with pytest.raises(NetnsError, match="mtu"):
        netns.Star(2, tag=scene.tag(), mtu=10).__enter__()  # below Ethernet's minimum: fails half-way
    assert scene.ours() == set()
    assert all(markers_of(t) == [] for t in scene.tags)


def test_interface_names_are_never_cut_to_fit() -> None:
    """Cut at 15 characters, two tags that differ only at the end would name the same bridge."""
    with pytest.raises(NetnsError, match="over 15 characters"):
        netns.Star(2, tag="a" * 12)


def test_a_gone_owners_marker_never_sweeps_a_name_that_is_not_ours(scene: Scene) -> None:
    """Only names of ours go: a marker naming another tool's namespace leaves it, and what runs in it, alone."""
    tag = scene.tag()
    foreign = f"other-tool-{tag}"
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        inside = subprocess.Popen(["ip", "netns", "exec", foreign, "sleep", "300"], start_new_session=True)
        scene.procs.append(inside)  # type: ignore[arg-type]  # killed at the end whatever happens
        me = owners.current()
        with owners.locked():
            owners.claim([f"tp-n0-{tag}", foreign], owners.Owner(2**22 + 1, 1, me.boot, me.pid_ns))  # no such pid
        with netns.Star(2, tag=scene.tag()):
            assert foreign in listed()
            assert running(inside.pid)
    finally:
        subprocess.run(["ip", "netns", "delete", foreign], capture_output=True)


@pytest.mark.parametrize(
    "owner",
    [{"pid": "1", "start": 1, "boot": "b", "pid_ns": "p"},  # a pid that is not a number would read as gone
     {"pid": 1, "start": 1, "boot": "b"},
     {"pid": 1, "start": 1, "boot": "b", "pid_ns": "p", "extra": 1},
     {"pid": True, "start": 1, "boot": "b", "pid_ns": "p"}],
)  # fmt: skip
def test_a_marker_with_a_field_of_the_wrong_type_is_refused_not_read_as_gone(
    scene: Scene, owner: dict[str, object]
) -> None:
    tag = scene.tag()
    path = owners.MARKERS / f"tp-n0-{tag}.json"
    owners.MARKERS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"owner": owner, "namespaces": [f"tp-n0-{tag}"]}))
    with owners.locked(), pytest.raises(NetnsError, match="not a namespace marker"):
        owners.markers()
