"""ServiceProcess's log: removed when the service is stopped, kept when the service had failed on its own."""

from __future__ import annotations

import sys
import time

import pytest

from tokenpath.errors import ServiceError
from tokenpath.serve.procs import ServiceProcess

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
