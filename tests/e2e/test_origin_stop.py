"""`tokenpath origin NAME` stopped by SIGINT or SIGTERM: it ends with the inference server it started (in a session
of its own), also while that server is still loading its model. A stop then used to be held until the load was done
(up to READY_TIMEOUT_S on a busy host): the origin was announced, probed and only then stopped.

The real llama-server built by scripts/build-llama (skipped without it), one thread, stopped before or just after
its first answer: a few seconds of CPU at most."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.gates import GATED, default_sigint, running, wait_for_gate
from tokenpath.origins.catalogue import MODEL_ALIAS, ORIGINS
from tokenpath.serve.procs import tokenpath_argv

ORIGIN = ORIGINS["llama-server"]
MISSING = ORIGIN.missing_reason()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bool(MISSING), reason=MISSING)]

GATE_S = 30.0
EXIT_S = 30.0


def _end(proc: subprocess.Popen[str], tree: list[psutil.Process]) -> tuple[str, list[psutil.Process]]:
    """Its output once it ended, and what it left running (then killed: never left behind by the test either);
    killed with what it started if it does not end within EXIT_S, the test bounded."""
    alive: list[psutil.Process] = []
    try:
        output, _ = proc.communicate(timeout=EXIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"`tokenpath origin` did not stop within {EXIT_S:.0f} s:\n{output}")
    finally:
        _, alive = psutil.wait_procs(running(tree), timeout=5)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
    return output, alive


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_while_the_server_loads_ends_it_without_serving(tmp_path: Path, sig: signal.Signals) -> None:
    """Held at the spawn (gated_load.py: the server running, Popen not yet returned), stopped, released: the origin
    ends at once with its server, never announcing it."""
    gate = tmp_path / "gate"
    gate.mkdir()
    # The server's Popen is known by MODEL_ALIAS in its argv (`-a`).
    argv = [sys.executable, str(GATED), str(gate), MODEL_ALIAS, "origin", ORIGIN.name, "--threads", "1"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint
    )
    tree: list[psutil.Process] = []
    try:
        server = wait_for_gate(gate, proc, GATE_S)
        tree = [server, *server.children(recursive=True)]
        proc.send_signal(sig)
        time.sleep(0.2)  # the signal handled while the spawn is held
        (gate / "release").touch()
        output, alive = _end(proc, tree)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert alive == [], output
    assert "listening on" not in output, output  # stopped while loading, not served first
    assert proc.returncode == 0, output  # stopped as asked, as once it serves
    assert "Traceback" not in output, output


def test_sigterm_while_it_serves_stops_it_and_its_server() -> None:
    """Once it serves (this held before the change too: a guard that the stop still ends it cleanly)."""
    proc = subprocess.Popen(
        tokenpath_argv("origin", ORIGIN.name, "--threads", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    )
    tree: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # once the model is loaded and has answered (or it failed: READY_TIMEOUT_S)
        assert "listening on" in line, line + proc.communicate(timeout=EXIT_S)[0]
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert tree, "the server runs as its child"
        proc.send_signal(signal.SIGTERM)
        output, alive = _end(proc, tree)
        output = line + output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert alive == [], output
    assert proc.returncode == 0, output
    assert "Traceback" not in output, output
