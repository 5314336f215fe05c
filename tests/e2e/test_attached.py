"""Paths already running at host:port (how the Docker route measures Compose services): the runner's stub listens
where they were pointed, they are measured in the same certified, audited rounds, and a path that reached another
upstream is caught by the audit, never counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenpath.proxies import RunningProxy, catalogue
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

pytestmark = pytest.mark.e2e


def _nginx(upstream_port: int) -> RunningProxy:
    proxy = catalogue()["nginx"]
    if proxy.missing_reason():
        pytest.skip(f"nginx: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), Endpoint("127.0.0.1", upstream_port), new_workdir("nginx"),
                proxy.variant("proxy_buffering_off"))  # fmt: skip
    return start(proxy, site)


@pytest.fixture
def other_stub() -> Iterator[int]:
    with ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub") as proc:
        assert proc.url is not None
        yield int(proc.url.rsplit(":", 1)[1])


def test_attached_paths_are_measured_against_the_runs_own_stub(other_stub: int, tmp_path: Path) -> None:
    stub_port = free_port()
    ours, rogue = _nginx(stub_port), _nginx(other_stub)  # started first, as Compose starts its services
    try:
        experiment = tmp_path / "attached.toml"
        experiment.write_text(f"""name = "attached"
frames = 10
runs = 2
[stub]
listen = "127.0.0.1:{stub_port}"
[[proxy]]
name = "svc-nginx"
url = "{ours.url}"
version = "nginx (a service)"
[[proxy]]
name = "rogue"
url = "{rogue.url}"
[conditions]
interval_ms = [50]
""")
        out, scratch = tmp_path / "out", tmp_path / "scratch"
        scratch.mkdir()
        # --force: this lane runs four tests at a time, and what is asserted is the audit's verdict, not the floor
        # (test_compose_services.py, in the timed lane, asserts a certified run of attached paths).
        done = subprocess.run([sys.executable, "-m", "tokenpath", "matrix", str(experiment), "--out", str(out),
                               "--force"], capture_output=True, text=True, timeout=240,
                              env={**os.environ, "TMPDIR": str(scratch)})  # fmt: skip
    finally:
        ours.stop()
        rogue.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((out / "results.json").read_text())
    assert {c["environment"] for c in doc["certification"]["checks"]} == {"loopback"}  # it ran, on the stub
    rows = {r["proxy"]: r for r in doc["rows"]}
    assert rows["svc-nginx"]["excluded"] <= 1  # its streams reached this run's stub: audited (one late write allowed)
    assert rows["svc-nginx"]["fpr_median"] is not None
    assert rows["rogue"]["excluded"] == 2  # its streams went to another stub: this run's audit has no entry for them
    assert rows["rogue"]["exclusions"] == {"no audit for this stream": 2}
    assert doc["proxies"]["svc-nginx"]["version"] == "nginx (a service)"
    assert doc["experiment"]["attached_paths"]["svc-nginx"] == ours.url
    assert doc["experiment"]["stub_listen"] == f"127.0.0.1:{stub_port}"
    assert list(scratch.iterdir()) == []  # every file the run made is gone: none for the paths it attached to


def test_an_attached_path_is_not_offered_tls_or_a_namespace() -> None:
    from tokenpath.proxies.attached import AttachedProxy

    proxy = AttachedProxy("svc", "http://127.0.0.1:9")
    assert "cannot give it TLS" in proxy.tls_unsupported  # the runner skips it in TLS conditions with this reason


def test_an_attached_https_path_is_measured_in_the_certified_matrix(tmp_path: Path) -> None:
    """Issue 21: a TLS ingress already running (here a TLS `pass` relay in front of the run's stub) is declared by
    its https URL and the CA that signed it, and measured in the TLS condition; skipped, saying why, in the plain."""
    from tokenpath.serve.tlscert import self_signed

    stub_port = free_port()
    files = self_signed(tmp_path / "ingress-tls", ["127.0.0.1"])
    relay = ServiceProcess(tokenpath_argv("relay", "--mode", "pass", "--listen", "127.0.0.1:0", "--upstream",
                                          f"127.0.0.1:{stub_port}", "--tls-cert", str(files.cert), "--tls-key",
                                          str(files.key)), "relay")  # fmt: skip
    with relay:
        assert relay.url is not None
        assert relay.url.startswith("https://")
        experiment = tmp_path / "ingress.toml"
        experiment.write_text(f"""name = "tls ingress"
frames = 10
runs = 2
[stub]
listen = "127.0.0.1:{stub_port}"
[[proxy]]
name = "ingress"
url = "{relay.url}"
cacert = "{files.cert}"
[conditions]
interval_ms = [50]
tls = [true, false]
""")
        out = tmp_path / "out"
        done = subprocess.run([sys.executable, "-m", "tokenpath", "matrix", str(experiment), "--out", str(out),
                               "--force"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((out / "results.json").read_text())
    rows = {(r["proxy"], r["tls"]): r for r in doc["rows"]}
    ingress = rows[("ingress", True)]
    assert ingress["excluded"] <= 1, ingress["exclusions"]  # its streams went over TLS to this run's stub: audited
    assert ingress["fpr_median"] is not None
    assert ("ingress", False) not in rows
    assert any(s["path"].startswith("ingress") and "tls = true" in s["reason"] for s in doc["skipped"])
    assert doc["experiment"]["attached_paths"]["ingress"] == relay.url
