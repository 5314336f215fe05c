from __future__ import annotations

import contextlib
import fcntl
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

Start = Callable[..., ServiceProcess]


def start_services() -> tuple[Start, Callable[[], None]]:
    started: list[ServiceProcess] = []

    def start(*args: str, name: str = "svc") -> ServiceProcess:
        proc = ServiceProcess(tokenpath_argv(*args), name)
        proc.start()
        started.append(proc)
        return proc

    def stop_all() -> None:
        for proc in reversed(started):
            proc.stop()

    return start, stop_all


@pytest.fixture
def service() -> Iterator[Start]:
    start, stop_all = start_services()
    yield start
    stop_all()


@pytest.fixture(scope="module")
def module_service() -> Iterator[Start]:
    start, stop_all = start_services()
    yield start
    stop_all()


def netloc(url: str | None) -> str:
    assert url is not None
    return urlsplit(url).netloc


@contextlib.contextmanager
def exclusive(name: str, timeout_s: float = 900.0) -> Iterator[None]:
    """Holds a machine-wide lock: tests whose checks read global state (every network namespace, every Ray daemon on
    the host) run one at a time, whichever worker or pytest session they are in."""
    path = Path(tempfile.gettempdir()) / f"tokenpath-tests-{name}.lock"
    with path.open("a") as lock:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path} held for over {timeout_s:.0f} s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def ray_cluster_alone() -> Iterator[None]:
    """One `--cluster` run on the host at a time: each asserts that no tp-n* namespace and no extra raylet is left,
    which another run beside it would break (and two clusters starting at once starve each other's `ray start`)."""
    with exclusive("ray-cluster"):
        yield
