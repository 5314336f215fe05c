from __future__ import annotations

from collections.abc import Callable, Iterator
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
            proc.log_path.unlink(missing_ok=True)

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
