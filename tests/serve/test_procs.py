"""ServiceProcess's log: removed when the service is stopped, kept when the service had failed on its own."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psutil
import pytest

from tokenpath.errors import ServiceError
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

ANNOUNCE = "print('listening on http://127.0.0.1:9', flush=True)"


def service(code: str) -> ServiceProcess:
    return ServiceProcess([sys.executable, "-c", code], "test service")


def test_a_stopped_service_leaves_no_log() -> None:
    proc = service(f"{ANNOUNCE}; import time; time.sleep(60)")
    assert proc.start() == "http://127.0.0.1:9"
    assert proc.log_path.exists()
    proc.stop()
    assert not proc.log_path.exists()


def test_a_service_used_as_a_context_leaves_no_log() -> None:
    with service(f"{ANNOUNCE}; import time; time.sleep(60)") as proc:
        path = proc.log_path
    assert not path.exists()


def test_a_service_that_failed_on_its_own_keeps_its_log() -> None:
    proc = service(f"{ANNOUNCE}; import sys; print('the reason it died', flush=True); sys.exit(3)")
    proc.start()
    deadline = time.monotonic() + 30  # it exits at once; the bound is for a loaded machine
    while proc._proc is not None and proc._proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.stop()
    try:
        assert "the reason it died" in proc.log_path.read_text()
    finally:
        proc.log_path.unlink(missing_ok=True)


def test_a_service_that_never_announces_is_reported_with_its_output_and_leaves_no_log() -> None:
    # A shell, not Python: its line is in the log well within the wait even on a loaded machine.
    proc = ServiceProcess(["sh", "-c", "echo 'starting, slowly'; exec sleep 60"], "test service")
    with pytest.raises(ServiceError, match="starting, slowly"):
        proc.start(timeout_s=3)
    assert not proc.log_path.exists()


def test_a_service_never_started_leaves_no_log() -> None:
    proc = service("pass")
    proc.stop()
    assert not proc.log_path.exists()


def test_a_service_ends_with_the_process_that_started_it_even_killed() -> None:
    """A load run killed by SIGKILL (the OOM killer took one) left its stub serving on: each service tokenpath
    starts follows its parent (procs.follow_parent, PR_SET_PDEATHSIG) and ends when that process ends, however."""
    parent_code = (
        "import sys, time\n"
        "from tokenpath.serve.procs import ServiceProcess, tokenpath_argv\n"
        "proc = ServiceProcess(tokenpath_argv('stub', '--port', '0'), 'stub')\n"
        "proc.start(60)\n"
        "print(proc._proc.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running()
        parent.kill()  # no stop(), no cleanup: SIGKILL
        parent.wait(10)
        child.wait(30)  # psutil.TimeoutExpired if it serves on
    finally:
        parent.kill()
        parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()


def test_a_service_started_from_a_thread_outlives_the_thread() -> None:
    """The parent it follows is the process, not the thread that started it (PR_SET_PDEATHSIG's): a service started
    from a thread pool, as tests start relays side by side, lives on when the pool's threads end."""
    proc = ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub")
    thread = threading.Thread(target=proc.start, args=(60,))
    thread.start()
    thread.join()
    try:
        assert proc.url is not None
        time.sleep(1.0)  # a death signal bound to the thread would have ended it by now
        assert proc._proc is not None
        assert proc._proc.poll() is None
    finally:
        proc.stop()
