"""Who made a set of network namespaces, written down before they exist, so a later run can tell a killed run's.

A run killed with SIGKILL (or by the OOM killer) never deletes its namespaces. Each set therefore has a marker naming
its namespaces and its owner; netns.sweep() removes the sets whose owner is gone. A pid alone is reused, so the owner
is the pid with the process's start time, the boot and the pid namespace the two are counted in.

The markers live in MARKERS, one JSON file per set, not in names under /run/netns: `ip netns list` shows everything
there, and a name has no room for an owner (the interface names built from it are held to 15 characters). /run is
emptied at boot, as /run/netns is, so a marker does not outlive its namespaces by a boot. One lock file orders the
sweep and the claims of runs starting at once: a claim is read whole or not at all, and never by a sweep in between.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tokenpath.errors import NetnsError

MARKERS = Path("/run/tokenpath/netns")
_SUFFIX = ".json"


@dataclass(frozen=True)
class Owner:
    pid: int
    start: int  # field 22 of /proc/<pid>/stat: clock ticks after boot, different for a process that reuses the pid
    boot: str  # /proc/sys/kernel/random/boot_id: the start time counts from this boot
    pid_ns: str  # the pid namespace the pid is counted in ("pid:[4026531836]")


@dataclass(frozen=True)
class Marker:
    path: Path
    owner: Owner
    namespaces: tuple[str, ...]


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time, None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the name before ")" may hold spaces and parentheses
    return fields[0], int(fields[19])  # fields 3 and 22


def _boot() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _pid_ns() -> str:
    return os.readlink("/proc/self/ns/pid")


def current() -> Owner:
    pid = os.getpid()
    found = _stat(pid)
    assert found is not None  # this process
    return Owner(pid, found[1], _boot(), _pid_ns())


def gone(owner: Owner) -> bool:
    """True only when the owner is certainly dead: another boot, no such pid, the pid reused (another start time),
    or a zombie. An owner counted in another pid namespace cannot be judged from here, so it counts as alive."""
    if owner.boot != _boot():
        return True
    if owner.pid_ns != _pid_ns():
        return False
    found = _stat(owner.pid)
    return found is None or found[1] != owner.start or found[0] == "Z"


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Held while sweeping and claiming. The kernel drops it when its holder dies, however it dies."""
    MARKERS.mkdir(parents=True, exist_ok=True)
    with (MARKERS / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def claim(namespaces: Sequence[str], owner: Owner | None = None) -> Marker:
    """Writes the marker for `namespaces` (before any of them is made); refuses names another marker holds. Call it
    holding locked(), after the sweep: a marker still there then is a live run's."""
    path = MARKERS / f"{namespaces[0]}{_SUFFIX}"
    held = {name: marker for marker in markers() for name in marker.namespaces}
    taken = sorted(name for name in namespaces if name in held)
    if taken:
        other = held[taken[0]]
        raise NetnsError(
            f"network namespaces {', '.join(taken)} are another run's (pid {other.owner.pid}, {other.path}); "
            "give this one another tag"
        )
    marker = Marker(path, owner or current(), tuple(namespaces))
    text = json.dumps({"owner": asdict(marker.owner), "namespaces": list(marker.namespaces)})
    partial = path.with_suffix(".partial")  # renamed into place: a writer killed half-way leaves no marker
    partial.write_text(text)
    partial.replace(path)
    return marker


def markers() -> list[Marker]:
    """Every marker, in name order. Call it holding locked(). A `.partial` left by a writer killed before its rename
    names nothing yet made (the namespaces come after the rename), so it is removed here."""
    found: list[Marker] = []
    for path in sorted(MARKERS.glob("*")):
        if path.suffix == ".partial":
            path.unlink(missing_ok=True)
        elif path.suffix == _SUFFIX:
            try:
                found.append(_parsed(path, json.loads(path.read_text())))
            except (ValueError, KeyError, TypeError) as exc:
                raise NetnsError(f"{path}: not a namespace marker ({exc}); remove it if no run is using it") from None
    return found


def _parsed(path: Path, doc: dict[str, object]) -> Marker:
    """A marker's fields, each of its type (a pid that is not a number would read as a gone owner: its namespaces
    deleted, what runs in them killed)."""
    owner, names = doc["owner"], doc["namespaces"]
    if not isinstance(owner, dict) or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TypeError("owner must be an object, namespaces a list of names")
    fields = {"pid": int, "start": int, "boot": str, "pid_ns": str}
    if set(owner) != set(fields) or any(type(owner[k]) is not t for k, t in fields.items()):
        raise TypeError(f"owner must have exactly {', '.join(f'{k} ({t.__name__})' for k, t in fields.items())}")
    return Marker(path, Owner(**owner), tuple(names))


def release(marker: Marker) -> None:
    """Removes the marker, once its namespaces are deleted. Call it holding locked(): a sweep lists the markers,
    then reads each."""
    marker.path.unlink(missing_ok=True)
