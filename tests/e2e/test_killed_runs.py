"""A run killed by SIGKILL (the OOM killer, `kill -9`) stops nothing itself: the third-party processes it started
(a proxy of the catalogue, a real origin) are stopped by its guard (serve/guard.py), as tokenpath's own services
follow their parent. A proxy or origin the run stops itself is forgotten by the guard when it stops."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tokenpath.origins import process as origin_process
from tokenpath.origins.catalogue import Origin, Settings
from tokenpath.proxies import base
from tokenpath.proxies.nginx import Nginx
from tokenpath.serve import guard
from tokenpath.wire.apis import Api

pytestmark = pytest.mark.e2e

# A run that starts nginx (stock, in front of a port nothing listens on: it starts all the same) and a stand-in
# origin (a sleep: spawn does not wait for it to serve), prints their pids, and waits to be killed.
RUN = """
import sys, time
from tests.e2e.test_killed_runs import SleepOrigin, nginx_site
from tokenpath.origins import process
from tokenpath.proxies import base
from tokenpath.proxies.nginx import Nginx
running = base.start(Nginx(), nginx_site())
origin = process.spawn(SleepOrigin("sleep-origin", "sleep", (), "/"))
print(running.process.pid, origin.process.pid, origin.log_path, flush=True)
time.sleep(120)
"""


class SleepOrigin(Origin):
    """An origin whose server is a sleep: what spawn starts, watches and stops is all this test looks at."""

    def missing_reason(self) -> str:
        return ""

    def argv(self, host: str, port: int, settings: Settings) -> list[str]:
        return ["sleep", "300"]

    def env(self) -> dict[str, str]:
        return {}


def nginx_site() -> base.Site:
    listen = base.Endpoint("127.0.0.1", base.free_port())
    upstream = base.Endpoint("127.0.0.1", base.free_port())
    return base.Site(listen, upstream, base.new_workdir("killed-run"), Nginx().variant("stock"))


def tree(pid: int) -> list[psutil.Process]:
    proc = psutil.Process(pid)
    return [proc, *proc.children(recursive=True)]


def exited(procs: list[psutil.Process], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in procs):
            return True
        time.sleep(0.05)
    return False


def test_the_proxy_and_origin_of_a_killed_run_are_stopped() -> None:
    root = Path(__file__).parents[2]
    run = subprocess.Popen([sys.executable, "-c", RUN], stdout=subprocess.PIPE, text=True, cwd=root)
    started: list[psutil.Process] = []
    log: Path | None = None
    try:
        assert run.stdout is not None
        line = run.stdout.readline()
        assert line, "the run did not start its proxy and origin"
        proxy_pid, origin_pid, origin_log = line.split()
        log = Path(origin_log)  # the origin's log: its run's to remove, and this one was killed
        started = [*tree(int(proxy_pid)), *tree(int(origin_pid))]
        assert len(started) >= 3  # nginx's master and worker, the origin
        run.kill()  # SIGKILL: the run stops nothing
        run.wait(10)
        assert exited(started, 15), [p.pid for p in started if p.is_running()]
    finally:
        run.kill()
        run.wait(10)
        for p in started:
            if p.is_running():
                p.kill()
        if run.stdout is not None:
            run.stdout.close()
        if log is not None:
            log.unlink(missing_ok=True)


def test_a_proxy_and_an_origin_the_run_stops_are_forgotten_by_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    told: list[tuple[str, int]] = []
    monkeypatch.setattr(guard, "watch", lambda pgid: told.append(("watch", pgid)))
    monkeypatch.setattr(guard, "forget", lambda pgid: told.append(("forget", pgid)))
    running = base.start(Nginx(), nginx_site())
    assert running.process is not None
    proxy = running.process.pid
    running.stop()
    with origin_process.spawn(SleepOrigin("sleep-origin", "sleep", (Api.OPENAI,), "/")) as origin:
        assert origin.process is not None
        pid = origin.process.pid
    assert told == [("watch", proxy), ("forget", proxy), ("watch", pid), ("forget", pid)]
