"""A stop signal on `tokenpath load --cluster` reaches the client workers on the other nodes: each actor's run is
stopped as a signal stops a local one (ClientNode.stop, tried here without Ray against a real stub), and
RayClients passes the stop on, bounded in time, killing a worker that does not answer (a fake `ray` at the module
boundary: a real Ray cluster in namespaces takes minutes to start; tests/e2e/test_cluster.py runs that one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tokenpath.errors import ServiceError
from tokenpath.load import cluster
from tokenpath.load.cluster import ClientNode, RayClients
from tokenpath.load.worker import WorkerReport, Workload
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

LONG_S = 60.0  # a run a stop must not wait out


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    argv = tokenpath_argv("stub", "--port", "0", "--tokens", "30", "--interval-ms", "20", "--ttft-ms", "10")
    with ServiceProcess([*argv, "--host", "127.0.0.1"], "stub") as stub:
        assert stub.url is not None
        yield stub.url


def _work(url: str) -> Workload:
    return Workload(url, "tokenpath-stub", "hello", 30, 2, 0.1, LONG_S)


def test_stop_ends_a_running_actor_run_and_keeps_its_streams(stub_url: str) -> None:
    node, reports = ClientNode(), []
    runner = threading.Thread(target=lambda: reports.append(node.run(_work(stub_url))))  # an actor's thread
    runner.start()
    time.sleep(2.0)  # streams ended and streams reading
    t0 = time.monotonic()
    node.stop()
    runner.join(timeout=10)
    assert not runner.is_alive(), "the run went on after stop()"
    assert time.monotonic() - t0 < 5
    (report,) = reports
    assert report.interrupted
    assert report.results, "the streams that ended before the stop are kept"
    assert all(r.error is None for r in report.results)


def test_a_stop_before_the_run_started_ends_it_at_once(stub_url: str) -> None:
    node = ClientNode()
    node.stop()
    t0 = time.monotonic()
    assert node.run(_work(stub_url)).interrupted
    assert time.monotonic() - t0 < 5


class FakeRef:
    def __init__(self, value: Any) -> None:
        self.value = value


class FakeActor:
    """A client worker: its run answers a stop (`stops`), or never does (`deaf`: it must be killed)."""

    def __init__(self, deaf: bool = False) -> None:
        self.deaf, self.stopped, self.killed = deaf, False, False
        self.run = _Method(lambda job: FakeRef("run"))
        self.stop = _Method(self._stop)

    def _stop(self) -> FakeRef:
        self.stopped = True
        return FakeRef(None)


class _Method:
    def __init__(self, call: Any) -> None:
        self.remote = call


class FakeRay:
    """ray's calls RayClients makes: a run's get is cut by a stop signal; wait finds the runs of actors that
    stopped; kill marks one killed."""

    class exceptions:
        RayActorError = type("RayActorError", (ServiceError,), {})
        RayTaskError = type("RayTaskError", (ServiceError,), {})

    def __init__(self, actors: list[FakeActor]) -> None:
        self.actors = actors
        self.waited: float | None = None

    def get(self, refs: Any, timeout: float | None = None) -> Any:
        if isinstance(refs, list) and refs and refs[0].value == "run":
            raise KeyboardInterrupt  # StopSignals, while the level runs
        if isinstance(refs, list):
            return [r.value for r in refs]
        return WorkerReport([], 0.0, 0.0, 0.0, interrupted=True)

    def wait(self, refs: list[FakeRef], num_returns: int, timeout: float) -> tuple[list[FakeRef], list[FakeRef]]:
        self.waited = timeout
        ready = [r for r, a in zip(refs, self.actors, strict=True) if a.stopped and not a.deaf]
        return ready, [r for r in refs if r not in ready]

    def kill(self, actor: FakeActor) -> None:
        actor.killed = True


def test_a_stop_is_passed_to_every_remote_worker_and_a_deaf_one_is_killed() -> None:
    actors = [FakeActor(), FakeActor(deaf=True)]
    clients = object.__new__(RayClients)
    clients.ray, clients.actors = FakeRay(actors), actors
    reports = clients.run([_work("http://127.0.0.1:1")] * 2)
    assert all(a.stopped for a in actors), "every worker is asked to stop"
    assert [a.killed for a in actors] == [False, True], "the one that did not answer in time is killed"
    assert clients.ray.waited is not None
    assert clients.ray.waited <= cluster.STOP_S
    assert len(reports) == 2
    assert all(r.interrupted for r in reports)
