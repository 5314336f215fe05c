"""Load across machines on Ray: client workers as Ray actors spread over the nodes, each with its clock offset to
the stub host, and a local cluster of simulated nodes in network namespaces for trying the whole path on one box.

Nothing here is imported unless `--cluster` is given, and Ray is imported only here (an optional extra:
`pip install 'tokenpath[cluster]'`).

Across hosts each CLOCK_MONOTONIC is its own, so every client worker estimates its offset to the stub host
(load/clocksync.py) before and after each run; its arrival times are moved onto the stub's clock by the mean of the
two, and the run's uncertainty is the larger half round trip plus half the drift between the two estimates.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenpath.errors import ServiceError, UsageError
from tokenpath.hostport import parse_hostport
from tokenpath.links import netns
from tokenpath.load.clocksync import ClockOffset, measure
from tokenpath.load.worker import WorkerReport, Workload, run_worker
from tokenpath.serve.procs import ServiceProcess

STOP_S = 10.0  # a stopped client worker's cancelled streams and its report back; then it is killed
REACH_TIMEOUT_S = 5.0  # a Ray head on a LAN answers a TCP connect in milliseconds
ACTOR_START_S = 120.0  # a new node's worker process imports tokenpath and its deps: seconds on a busy host
RAY_HEAD_PORT = 6379  # inside the head's own namespace (local mode) nothing else can hold it
_LOCAL = re.compile(r"^local:(\d+)$")


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    address: str | None  # "auto", HOST:PORT or ray://HOST:PORT; None with local nodes
    local_nodes: int = 0  # local:N: simulated nodes in network namespaces (node 0 runs the stub and the targets)


def parse_cluster(text: str) -> ClusterSpec:
    m = _LOCAL.match(text)
    if m:
        nodes = int(m.group(1))
        if not 2 <= nodes <= 16:
            raise UsageError(f"`cluster` {text}: local:N takes 2 to 16 nodes (node 0 holds the stub and the targets)")
        return ClusterSpec(None, nodes)
    if text == "auto" or re.match(r"^(ray://)?[\w.\-\[\]:]+:\d+$", text):
        return ClusterSpec(text)
    raise UsageError(f"`cluster` {text!r}: expected auto, HOST:PORT, ray://HOST:PORT or local:N")


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("`cluster` needs Ray: pip install 'tokenpath[cluster]'") from None
    return ray


class ClientNode:
    """One client worker on some node (a Ray actor): it runs workloads and reads its clock against the stub. stop()
    ends its run as a signal ends a local one (a threaded actor: it is called while run() runs), and every run after.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False
        self._stop_run: Callable[[], None] | None = None

    def ip(self) -> str:
        return _node_ip()

    def clock(self, stub_url: str) -> ClockOffset:
        return measure(stub_url)

    def run(self, work: Workload) -> WorkerReport:
        return run_worker(work, stoppable=self._started)

    def _started(self, stop_run: Callable[[], None]) -> None:
        with self._lock:
            self._stop_run, stopped = stop_run, self._stopped
        if stopped:  # the stop came before this run's loop did
            stop_run()

    def stop(self) -> None:
        with self._lock:
            self._stopped, stop_run = True, self._stop_run
        if stop_run is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: that run had ended
                stop_run()


class StubNode:
    """The stub on a node the user named (--stub-node): started and stopped there, its URL on that node's address."""

    def __init__(self, argv: list[str]) -> None:
        ip = _node_ip()
        self._proc = ServiceProcess([*argv, "--host", ip], "stub")
        self.url = self._proc.start()

    def get_url(self) -> str:
        return self.url

    def stop(self) -> None:
        self._proc.stop()


@dataclass(frozen=True, slots=True)
class RunClock:
    """One client worker's clock over one run."""

    node: str
    start: ClockOffset
    end: ClockOffset

    @property
    def offset_ns(self) -> int:
        return (self.start.offset_ns + self.end.offset_ns) // 2

    @property
    def drift_ns(self) -> int:
        return self.end.offset_ns - self.start.offset_ns

    @property
    def uncertainty_ns(self) -> int:
        return max(self.start.uncertainty_ns, self.end.uncertainty_ns) + abs(self.drift_ns) // 2

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "offset_ms": self.offset_ns / 1e6,
            "uncertainty_ms": self.uncertainty_ns / 1e6,
            "drift_ms": self.drift_ns / 1e6,
            "start": self.start.to_json(),
            "end": self.end.to_json(),
        }


class RayClients:
    """`workers` client actors spread over the cluster's nodes (one CPU each)."""

    def __init__(self, address: str, workers: int | None) -> None:
        self.ray = ray = require_ray()
        _reachable(address)
        try:
            ray.init(
                address=address,
                namespace="tokenpath",
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )
        except Exception as exc:  # ConnectionError, RuntimeError, ValueError: Ray's own words are the reason
            raise ServiceError(f"`cluster` {address}: cannot join the Ray cluster: {exc}") from None
        self.driver_ip = _node_ip()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.nodes = sorted(n["NodeManagerAddress"] for n in nodes)
        cpus = sum(int(n.get("Resources", {}).get("CPU", 0)) for n in nodes)
        count = workers or max(1, len([n for n in nodes if n["NodeManagerAddress"] != self.driver_ip]))
        if count > cpus:
            raise UsageError(f"`client_workers` {count}: the cluster has {cpus} CPUs for client workers")
        actor = ray.remote(num_cpus=1, max_concurrency=2)(ClientNode)  # 2: its stop() beside its run()
        self.actors = [actor.options(scheduling_strategy="SPREAD").remote() for _ in range(count)]
        try:
            self.ips: list[str] = ray.get([a.ip.remote() for a in self.actors], timeout=ACTOR_START_S)
        except Exception as exc:
            self.close()
            raise ServiceError(
                f"client workers did not start on the cluster within {ACTOR_START_S:.0f} s: {exc}"
            ) from None
        self._stub: Any = None
        self._stub_node = ""

    def start_stub(self, node: str, argv: list[str]) -> str:
        self.spawn_stub(node, argv)
        return self.stub_url()

    def spawn_stub(self, node: str, argv: list[str]) -> None:
        """The stub's actor asked for, its handle kept for close() (a dropped handle ends the actor and leaves the
        stub it started running on its node): a caller holds stop signals across this."""
        if node not in self.nodes:
            raise UsageError(f"`stub_node` {node}: no such node in the cluster; nodes: {', '.join(self.nodes)}")
        actor = self.ray.remote(num_cpus=0, resources={f"node:{node}": 0.001})(StubNode)
        self._stub, self._stub_node = actor.remote(argv), node

    def stub_url(self) -> str:
        """Once the stub spawn_stub asked for listens: its URL."""
        try:
            return str(self.ray.get(self._stub.get_url.remote(), timeout=ACTOR_START_S))
        except Exception as exc:
            raise ServiceError(f"the stub did not start on node {self._stub_node}: {exc}") from None

    def clocks(self, stub_url: str) -> list[ClockOffset]:
        clocks: list[ClockOffset] = self._get([a.clock.remote(stub_url) for a in self.actors], "reading the clock")
        return clocks

    def run(self, jobs: list[Workload]) -> list[WorkerReport]:
        refs = [a.run.remote(j) for a, j in zip(self.actors, jobs, strict=False)]
        try:
            reports: list[WorkerReport] = self._get(refs, "running a level")
        except KeyboardInterrupt:  # a stop signal (runner.StopSignals): passed on to every client worker
            return self._stop_runs(refs)
        return reports

    def _stop_runs(self, refs: list[Any]) -> list[WorkerReport]:
        """Each client worker's run stopped as a signal stops a local one (its streams cancelled, what ended sent
        back), within STOP_S; a worker whose report has not come by then is killed, its streams with it. One
        report per job, each marked interrupted."""
        ray = self.ray
        with contextlib.suppress(Exception):  # one that cannot be asked is killed below
            ray.get([a.stop.remote() for a in self.actors], timeout=STOP_S)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=STOP_S)
        reports = [
            self._stopped_report(actor, ref, ref in ready) for actor, ref in zip(self.actors, refs, strict=False)
        ]
        for r in reports:
            r.interrupted = True
        return reports

    def _stopped_report(self, actor: Any, ref: Any, ready: bool) -> WorkerReport:
        if ready:
            with contextlib.suppress(Exception):  # it failed or died: nothing of it to keep
                report: WorkerReport = self.ray.get(ref, timeout=STOP_S)
                return report
        with contextlib.suppress(Exception):
            self.ray.kill(actor)
        return WorkerReport([], 0.0, 0.0, 0.0, interrupted=True)

    def _get(self, refs: list[Any], what: str) -> Any:
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayActorError as exc:
            raise ServiceError(f"a client worker died while {what} (its node left the cluster?): {exc}") from None
        except self.ray.exceptions.RayTaskError as exc:
            raise ServiceError(f"a client worker failed while {what}: {exc}") from None

    def close(self) -> None:
        if self._stub is not None:
            try:
                self.ray.get(self._stub.stop.remote(), timeout=30)
            except Exception:
                logging.getLogger("tokenpath.load").warning("the remote stub did not stop cleanly")
        self.ray.shutdown()


@contextmanager
def local_cluster(nodes: int, cpus_per_node: int) -> Iterator[str]:
    """A Ray cluster of `nodes` simulated hosts on this machine, each in its own network namespace, joined by veth
    links (links/netns.Star). Ray registers nodes under an interface address; inside the namespaces that is the
    private address the run gave them, never the machine's own. Node 0 is the head with no CPUs for actors (the
    stub, the targets and the driver run there); the others each offer `cpus_per_node` to client workers. The
    calling thread runs inside node 0 until the block ends; every process left in a node is killed on exit."""
    require_ray()
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray_bin is None:
        raise UsageError("`cluster` local:N needs Ray's ray command beside this Python")
    temp = Path(tempfile.mkdtemp(prefix="tokenpath-ray-"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    with netns.Star(nodes) as star:
        head = f"{star.addr(0)}:{RAY_HEAD_PORT}"
        _ray(
            star.wrap(
                0,
                [
                    ray_bin,
                    "start",
                    "--head",
                    "--node-ip-address",
                    star.addr(0),
                    "--port",
                    str(RAY_HEAD_PORT),
                    "--num-cpus",
                    "0",
                    "--include-dashboard=false",
                    "--disable-usage-stats",
                    "--temp-dir",
                    str(temp),
                ],
            ),
            env,
        )
        for i in range(1, nodes):
            _ray(
                star.wrap(
                    i,
                    [
                        ray_bin,
                        "start",
                        "--address",
                        head,
                        "--node-ip-address",
                        star.addr(i),
                        "--num-cpus",
                        str(cpus_per_node),
                        "--disable-usage-stats",
                    ],
                ),
                env,
            )
        try:
            with netns.entered(star.names[0]):
                yield head
        finally:
            star.close()
            shutil.rmtree(temp, ignore_errors=True)


def _reachable(address: str) -> None:
    """Ray waits minutes for a head that is not there; a TCP connect says so in seconds. (`auto` is found by Ray
    itself, from the cluster this machine's `ray start` left.)"""
    if address == "auto":
        return
    host, port = parse_hostport(address.removeprefix("ray://"), "--cluster", default_host=None)
    try:
        socket.create_connection((host, port), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise ServiceError(f"`cluster` {address}: cannot reach the Ray head: {exc.strerror or exc}") from None


def _node_ip() -> str:
    import ray

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def _ray(argv: list[str], env: dict[str, str]) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, check=False)
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-8:])
        raise ServiceError(f"{' '.join(argv[3:6])} failed:\n{tail}")


def cpus_per_client_node(client_workers: int | None, nodes: int) -> int:
    return max(1, math.ceil((client_workers or nodes - 1) / (nodes - 1)))
