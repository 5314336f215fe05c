"""A stop signal that lands while `tokenpath load` spawns a child (the stub, a proxy, a client process) stops it
too: no child is left running, the run exits 130 with results.json written `interrupted`. Each child is held by
gated_load.py between its spawn and the return to the caller, where a stop used to leave it running (inside Popen,
before its stop was registered) or, for the client processes, let them run their whole level."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests import gates
from tokenpath.serve.procs import tokenpath_argv

STUB = ["--tokens", "30", "--interval-ms", "20", "--ttft-ms", "10"]
LEVEL = ["--concurrency", "2", "--warmup", "0.2", "--duration", "60", "--runs", "1"]  # a stop must not wait it out
RELAY = f"relay={' '.join(tokenpath_argv('relay'))} --listen {{listen}} --upstream {{upstream}} --mode pass"
GATE_S = 60.0  # the stub (and a proxy) up on a busy 2-core host
EXIT_S = 30.0  # a stopped run ends well within this; the level it would wait out is 60 s


def _stop_at(
    tmp_path: Path, at: str, sig: signal.Signals, *args: str, group: bool = False
) -> tuple[int, str, list[psutil.Process]]:
    gate, out = tmp_path / "gate", tmp_path / "out"
    gate.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(gates.GATED), str(gate), at, "load", *LEVEL, *STUB, *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the signal reaches the load process alone
        preexec_fn=gates.default_sigint,
    )
    tree: list[psutil.Process] = []
    alive: list[psutil.Process] = []
    try:
        tree = gates.tree(proc.pid, gates.wait_for_gate(gate, proc, GATE_S))
        if group:  # a terminal's Ctrl-C: the load and its client processes (the stub and proxies have sessions)
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        time.sleep(0.2)  # the signal handled while the spawn is held
        (gate / "release").touch()
        output, _ = proc.communicate(timeout=EXIT_S)
    finally:
        if proc.poll() is None:  # it did not stop: it and what it started are killed, the test bounded
            for p in [*tree, psutil.Process(proc.pid)]:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            output, _ = proc.communicate(timeout=10)
        _, alive = psutil.wait_procs(tree, timeout=5)
        for p in alive:  # never left behind by the test either
            p.kill()
    return proc.returncode, output, alive


def _assert_stopped(tmp_path: Path, rc: int, output: str, alive: list[psutil.Process]) -> None:
    assert not alive, f"left running: {[p.info if hasattr(p, 'info') else p for p in alive]}\n{output}"
    assert rc == 130, output
    assert json.loads((tmp_path / "out" / "results.json").read_text())["interrupted"] is True
    assert "Traceback" not in output, output


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_stub_spawns_stops_it(tmp_path: Path, sig: signal.Signals) -> None:
    _assert_stopped(tmp_path, *_stop_at(tmp_path, "stub", sig, "--client-workers", "1"))


def test_a_stop_while_a_proxy_spawns_stops_it_and_the_stub(tmp_path: Path) -> None:
    _assert_stopped(tmp_path, *_stop_at(tmp_path, "relay", signal.SIGINT, "--client-workers", "1", "--proxy", RELAY))


def test_a_stop_while_client_processes_spawn_reaches_them(tmp_path: Path) -> None:
    _assert_stopped(tmp_path, *_stop_at(tmp_path, "pool", signal.SIGTERM, "--client-workers", "2"))


def test_a_ctrl_c_to_client_processes_still_starting_stops_the_run(tmp_path: Path) -> None:
    """They die of it (their SIGINT is still Python's, a traceback of their own): the run stops all the same."""
    rc, output, alive = _stop_at(tmp_path, "pool", signal.SIGINT, "--client-workers", "2", group=True)
    assert not alive, output
    assert rc == 130, output
    assert "BrokenProcessPool" not in output, output
    assert json.loads((tmp_path / "out" / "results.json").read_text())["interrupted"] is True
