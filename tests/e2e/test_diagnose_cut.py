"""Issue 36 item 5, for real: `tokenpath diagnose` through nginx (`proxy_read_timeout 1s` through the Site, with
proxy_buffering off so each token passes as it comes) in front of a stub that pauses 3 s after its first token.
nginx cuts every run mid-stream; diagnose names an idle mid-stream limit near 1 s, nginx by its Server header, and
prints nginx's long_streams line, exit 19. Over https: diagnose then cannot pace the stub (its control plane is
plain HTTP), so the stub's own pause is what every run gets."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.errors import PathCut
from tokenpath.proxies import lookup
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.proxies.timeouts import LONG_STREAMS, StreamTimeouts
from tokenpath.serve.procs import tokenpath_argv
from tokenpath.serve.tlscert import self_signed

pytestmark = pytest.mark.e2e

STUB = ("--tokens", "4", "--interval-ms", "20", "--ttft-ms", "0", "--pause-ms", "3000", "--pause-after", "1")


def test_diagnose_names_nginxs_idle_cut_and_its_line(service: Start, tmp_path: Path) -> None:
    nginx = lookup("nginx")
    if nginx.missing_reason():
        pytest.skip(f"nginx: {nginx.missing_reason()}")
    stub = service("stub", "--port", "0", *STUB, name="stub")
    host, port = netloc(stub.url).rsplit(":", 1)
    tls = self_signed(tmp_path / "tls", ["127.0.0.1"])
    site = Site(Endpoint("127.0.0.1", free_port()), Endpoint(host, int(port)), new_workdir("nginx"), tls=tls)
    site.variant = nginx.variant("proxy_buffering_off")
    site.timeouts = StreamTimeouts(idle_s=1.0)
    running = start(nginx, site)
    try:
        argv = tokenpath_argv("diagnose", running.url, "--cacert", str(tls.cert))
        text = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        doc = json.loads(subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60).stdout)
    finally:
        running.stop()
    assert text.returncode == PathCut.exit_code, text.stdout + text.stderr
    assert doc["verdict"]["cause"] == "cut"
    assert doc["proxy"]["name"] == "nginx"
    cut = doc["cut"]
    assert cut["limit"] == "idle mid-stream"
    assert 0.8 <= cut["cut_s"] <= 2.5  # the 1 s timer, give or take a loaded machine; far from the 3 s pause
    line = nginx.variant(LONG_STREAMS).line
    assert cut["fix"] == f"nginx: {line}"
    assert f"fix: nginx: {line}" in text.stdout.splitlines()
    assert "cut: idle mid-stream limit at" in text.stdout
