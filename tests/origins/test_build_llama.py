"""scripts/build-llama's rules that take no build: the flags it builds with (no AMX on x86-64), its key (the one
origins/catalogue.py looks the build up by), and a build made with other flags never reused (removed). Each run
stops before it downloads or compiles anything: cmake is left off its PATH, so past the reuse check it says what it
needs. And scripts/llama-serves, the check a new build must pass to be kept, against stand-ins for its server."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from tokenpath.origins.catalogue import LLAMA_VERSION, MODEL_FILE, cpu_key

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-llama"
# What the script runs before it would download anything (its CPU key, the AMX probe, the checks, a stale build out).
TOOLS = ("bash", "grep", "cc", "c++", "md5sum", "cut", "head", "uname", "rm")

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS), reason="needs bash and a C/C++ compiler (the script's own)"
)


def run(*args: str, tools: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOKENPATH_TOOLS": str(tools)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)


def without_cmake(tmp_path: Path) -> str:
    """A PATH with the tools the script's first steps use, and no cmake (so it stops at its needs check)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def fake_build(tools: Path, flags: str) -> Path:
    """A build in the place catalogue.py looks (its key), made with `flags` as build.txt says, and the model."""
    build = tools / "llama" / f"{LLAMA_VERSION}-{cpu_key()}"
    for executable in (build / "bin" / "llama-server", build / "pyvenv" / "bin" / "python"):
        executable.parent.mkdir(parents=True, exist_ok=True)
        executable.write_text("#!/bin/sh\n")
        executable.chmod(0o755)
    (build / "build.txt").write_text(f"llama-cpp-python {LLAMA_VERSION}\ncmake flags: {flags}\n")
    (tools / "models").mkdir(parents=True, exist_ok=True)
    (tools / "models" / MODEL_FILE).write_bytes(b"")
    return build


def test_it_builds_without_amx_on_x86_64(tmp_path: Path) -> None:
    flags = run("--flags", tools=tmp_path).stdout
    assert "-DGGML_NATIVE=ON" in flags.split()
    if platform.machine() == "x86_64":  # a VM that lists amx_tile can fault on the first tile instruction
        for language in ("C", "CXX"):
            assert f"-DCMAKE_{language}_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in flags


def test_a_build_with_these_flags_is_reused_where_the_catalogue_looks(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    flags = run("--flags", tools=tools).stdout.strip()
    fake_build(tools, flags)
    done = run(tools=tools, path=without_cmake(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "already built" in done.stdout  # the script's key is the catalogue's


def test_a_build_made_with_other_flags_is_built_again(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    flags = run("--flags", tools=tools).stdout.strip()
    stale = fake_build(tools, flags + " -DSTALE=1")
    done = run(tools=tools, path=without_cmake(tmp_path))
    assert "already built" not in done.stdout
    assert "needs cmake" in done.stdout  # it went on to build (and stopped where this test left cmake out)
    assert not stale.exists()  # and the stale build is gone: the catalogue finds no build rather than that one


SERVES = Path(__file__).resolve().parents[2] / "scripts" / "llama-serves"
# Stand-ins for a build's llama-server, started as build-llama's check starts it (-m MODEL ... --port PORT ...).
FAULTS = "#!/bin/sh\nkill -ILL $$\n"  # what the AMX build did while loading the model
ANSWERS_HEALTH = """#!/usr/bin/env python3
import http.server, sys

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass

port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def serves(tmp_path: Path, server: str) -> subprocess.CompletedProcess[str]:
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "llama-server").write_text(server)
    (build / "bin" / "llama-server").chmod(0o755)
    return subprocess.run(
        ["bash", str(SERVES), str(build), str(tmp_path / "model.gguf")], capture_output=True, text=True, timeout=90
    )


def test_a_build_whose_server_faults_does_not_serve(tmp_path: Path) -> None:
    done = serves(tmp_path, FAULTS)
    assert done.returncode == 1
    assert "did not serve" in done.stdout
    assert "exit 132" in done.stdout  # 128 + SIGILL, as the shell reports it


def test_a_build_whose_server_answers_health_serves(tmp_path: Path) -> None:
    done = serves(tmp_path, ANSWERS_HEALTH)
    assert done.returncode == 0, done.stdout + done.stderr
