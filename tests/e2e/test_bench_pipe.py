"""bench/uvloop_pipe.py and bench/lean_proxy.py, floors bench/gateway_cpu.py --floor measures against: a real stream
goes through each frame by frame (the probe sees every frame the stub wrote, each in its own read)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from tests.e2e.conftest import Start
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

pytestmark = pytest.mark.e2e

PIPE = Path(__file__).parents[2] / "bench" / "uvloop_pipe.py"
LEAN = Path(__file__).parents[2] / "bench" / "lean_proxy.py"


def test_the_bare_pipe_relays_a_stream_frame_by_frame(service: Start) -> None:
    stub = service("stub", "--port", "0", "--tokens", "12", "--interval-ms", "20", name="stub")
    up = urlsplit(stub.url)
    pipe = ServiceProcess([sys.executable, str(PIPE), str(up.hostname), str(up.port)], "uvloop pipe")
    url = pipe.start()
    try:
        done = subprocess.run(tokenpath_argv("probe", url, "--json"), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        (run,) = json.loads(done.stdout)["runs"]
        assert run["status"] == 200
        assert run["frames"] >= 12
        assert run["arrivals"] >= run["frames"] - 2  # paced 20 ms apart: streamed (a late reader may merge one pair)
    finally:
        pipe.stop()


def test_the_lean_proxy_relays_streams_frame_by_frame_and_keeps_its_upstream_connection(service: Start) -> None:
    stub = service("stub", "--port", "0", "--tokens", "12", "--interval-ms", "20", name="stub")
    up = urlsplit(stub.url)
    lean = ServiceProcess([sys.executable, str(LEAN), str(up.hostname), str(up.port)], "lean proxy")
    url = lean.start()
    try:
        done = subprocess.run(tokenpath_argv("probe", url, "--runs", "3", "--json"), capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        runs = json.loads(done.stdout)["runs"]
        assert len(runs) == 3
        for run in runs:
            assert run["status"] == 200
            assert run["frames"] >= 12
            assert run["arrivals"] >= run["frames"] - 2
        assert lean.pid is not None
        upstream = [c for c in psutil.Process(lean.pid).net_connections("tcp") if c.raddr and c.raddr.port == up.port]
        assert len(upstream) == 1  # the three streams went one after another over one keep-alive connection
    finally:
        lean.stop()
