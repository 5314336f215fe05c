"""SIGINT and SIGTERM stop `tokenpath load` cleanly: the streams in flight are cancelled (never counted as errors),
the rows measured so far are written with `interrupted: true`, every child it started (the stub, client processes)
is gone, and it exits 130. A real `tokenpath load` subprocess against its own stub, stopped ~3 s into a 20 s level
while its streams are reading (each lasts ~0.6 s)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tokenpath.serve.procs import tokenpath_argv

STREAMING = ["--tokens", "30", "--interval-ms", "20", "--ttft-ms", "10"]  # ~0.6 s a stream: always some in flight


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a terminal's shell leaves it (a test runner may ignore it)


def _stopped_mid_run(
    tmp_path: Path, sig: signal.Signals, *args: str
) -> tuple[int, str, dict[str, Any], list[psutil.Process]]:
    out = tmp_path / "out"
    argv = tokenpath_argv("load", "--concurrency", "4", "--warmup", "0.2", "--duration", "20", "--runs", "1")
    proc = subprocess.Popen(
        [*argv, *STREAMING, *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the signal reaches the load process alone, not a process group
        preexec_fn=_default_sigint,
    )
    children: list[psutil.Process] = []
    alive: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # off a terminal: "load: 1 steps ..." once the stub is up
        assert line.startswith("load:"), line
        time.sleep(3.0)  # the level has run ~3 s: streams ended and streams reading
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the stub (and the client processes) run as children"
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _, alive = psutil.wait_procs(children, timeout=5)
        for p in alive:  # never left behind by the test either
            p.kill()
    doc = json.loads((out / "results.json").read_text())
    return proc.returncode, line + rest, doc, alive


def _assert_clean_stop(rc: int, output: str, doc: dict[str, Any], alive: list[psutil.Process]) -> None:
    assert rc == 130, output
    assert not alive, f"left running: {alive}"
    assert doc["interrupted"] is True
    (row,) = doc["levels"]
    assert row["streams"] > 0, "the streams that ended before the stop are kept"
    assert row["errors"] == 0, row  # the streams cancelled in flight are not errors
    for noise in ("Fatal error", "KeyboardInterrupt", "Traceback", "no running event loop"):
        assert noise not in output, output


def test_sigint_while_streams_read_stops_the_run_and_keeps_its_rows(tmp_path: Path) -> None:
    _assert_clean_stop(*_stopped_mid_run(tmp_path, signal.SIGINT, "--client-workers", "1"))


def test_sigterm_stops_every_child_and_writes_the_partial_results(tmp_path: Path) -> None:
    _assert_clean_stop(*_stopped_mid_run(tmp_path, signal.SIGTERM, "--client-workers", "1"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_sent_to_the_parent_alone_reaches_its_client_processes(tmp_path: Path, sig: signal.Signals) -> None:
    _assert_clean_stop(*_stopped_mid_run(tmp_path, sig, "--client-workers", "2"))


def test_sigint_stops_an_open_loop_run(tmp_path: Path) -> None:
    rc, output, doc, alive = _stopped_mid_run(tmp_path, signal.SIGINT, "--client-workers", "1", "--rate", "4")
    assert rc == 130, output
    assert not alive
    assert doc["interrupted"] is True
    assert doc["levels"][0]["errors"] == 0
