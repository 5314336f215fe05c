"""bench/uvloop_pipe.py, bench/cython_pipe.py and bench/lean_proxy.py, floors bench/gateway_cpu.py --floor measures
against: a real stream goes through each frame by frame (the probe sees every frame the stub wrote, each in its own
read)."""

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
COMPILED = Path(__file__).parents[2] / "bench" / "cython_pipe.py"


def floor_before_a_stub(service: Start, script: Path, name: str) -> tuple[ServiceProcess, int]:
    """The floor script started in front of a paced stub; with the stub's port."""
    stub = service("stub", "--port", "0", "--tokens", "12", "--interval-ms", "20", name="stub")
    up = urlsplit(stub.url)
    proc = ServiceProcess([sys.executable, str(script), str(up.hostname), str(up.port)], name)
    proc.start()
    assert up.port is not None
    return proc, up.port


def probe_streams(url: str, runs: int) -> None:
    """`runs` streams probed one after another: each whole, and streamed frame by frame."""
    done = subprocess.run(tokenpath_argv("probe", url, "--runs", str(runs), "--json"), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)["runs"]
    assert len(results) == runs
    for run in results:
        assert run["status"] == 200
        assert run["frames"] >= 12
        assert run["arrivals"] >= run["frames"] - 2  # paced 20 ms apart: streamed (a late reader may merge one pair)


def stream_through(service: Start, script: Path, name: str) -> None:
    """One stream probed through the byte pipe `script` in front of a paced stub."""
    pipe, _ = floor_before_a_stub(service, script, name)
    try:
        assert pipe.url is not None
        probe_streams(pipe.url, 1)
    finally:
        pipe.stop()


def test_the_bare_pipe_relays_a_stream_frame_by_frame(service: Start) -> None:
    stream_through(service, PIPE, "uvloop pipe")


def test_the_compiled_pipe_is_built_once_and_relays_a_stream_frame_by_frame(
    service: Start, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # a build of its own, not one a bench run left

    def build() -> Path:
        done = subprocess.run([sys.executable, str(COMPILED), "--build"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return Path(done.stdout.strip())

    module = build()
    assert module.parent == tmp_path / "tokenpath" / "bench"
    made = module.stat().st_mtime_ns
    assert build() == module
    assert module.stat().st_mtime_ns == made  # the second call found the first's module: not built again
    assert [p.name for p in module.parent.iterdir()] == [module.name]  # no build directory left beside it
    stream_through(service, COMPILED, "compiled pipe")


def test_the_lean_proxy_relays_streams_frame_by_frame_and_keeps_its_upstream_connection(service: Start) -> None:
    lean, stub_port = floor_before_a_stub(service, LEAN, "lean proxy")
    try:
        assert lean.url is not None
        probe_streams(lean.url, 3)
        assert lean.pid is not None
        connections = psutil.Process(lean.pid).net_connections("tcp")
        upstream = [c for c in connections if c.raddr and c.raddr.port == stub_port]
        assert len(upstream) == 1  # the three streams went one after another over one keep-alive connection
    finally:
        lean.stop()
