"""`tokenpath diagnose --http3` and `tokenpath monitor --http3` through Caddy 2.11's stock TLS site (HTTP/3 on the
same port over UDP) in front of the real stub (issue 38 item 2; tests/e2e/test_probe_http3.py starts it the same
way): the diagnosis paces the stub named by --stub-url and every run streams over QUIC; the monitor's probes say
HTTP/3 in their log lines (the trace's own version, not the flag's) and stream, as the exporter's probes of a module
with http_version = "3" do. Counts and outcomes, never times."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.caddyh3 import caddy_h3
from tests.helpers import stub_upstream
from tokenpath.monitor import exporter as ex
from tokenpath.monitor.allowlist import AllowList
from tokenpath.monitor.modules import ModuleSpec, build
from tokenpath.monitor.probing import Aborter
from tokenpath.proxies.base import Endpoint, RunningProxy
from tokenpath.serve.procs import tokenpath_argv
from tokenpath.serve.tlscert import TLSFiles, self_signed

pytestmark = pytest.mark.e2e

PROBES = 3


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return self_signed(tmp_path_factory.mktemp("tls"), ["127.0.0.1"])


@pytest.fixture(scope="module")
def caddy(tls_files: TLSFiles) -> Iterator[tuple[RunningProxy, Endpoint]]:
    with stub_upstream() as stub, caddy_h3(stub, tls_files) as running:
        yield running, stub


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tokenpath_argv(*args), capture_output=True, text=True, timeout=120, env=os.environ.copy())


def test_diagnose_over_http3_paces_the_stub_and_streams(
    caddy: tuple[RunningProxy, Endpoint], tls_files: TLSFiles
) -> None:
    running, stub = caddy
    argv = ["diagnose", running.url, "--http3", "--h3-window", "browser", "--cacert", str(tls_files.cert)]
    out = run(*argv, "--stub-url", f"http://{stub.hostport}", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    doc: dict[str, Any] = json.loads(out.stdout)
    assert doc["paced"] is True
    assert doc["verdict"]["cause"] == "streams"
    assert {"base", "slow", "large"} <= {r["name"] for r in doc["runs"]}
    assert all(r["frames"] > 0 for r in doc["runs"])
    assert {r["http_version"] for r in doc["runs"]} == {"3"}  # each run's trace: QUIC, never a TCP fallback


def test_diagnose_over_http3_refuses_what_it_cannot_do(caddy: tuple[RunningProxy, Endpoint]) -> None:
    running, _ = caddy
    plain = running.url.replace("https://", "http://", 1)
    out = run("diagnose", plain, "--http3")
    assert out.returncode == 2
    assert "--http3 needs an https:// URL" in out.stderr


def test_monitor_once_over_http3_streams_and_says_http3(
    caddy: tuple[RunningProxy, Endpoint], tls_files: TLSFiles
) -> None:
    running, _ = caddy
    argv = ["monitor", "--url", running.url, "--http3", "--cacert", str(tls_files.cert), "--once"]
    out = run(*argv, "--probes", str(PROBES), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    records = [r for r in lines if r.get("event") == "probe"]  # one JSON line per probe (monitor/runner.py)
    assert len(records) == PROBES, out.stderr[-2000:]
    assert {(r["outcome"], r["http_version"]) for r in records} == {("ok", "3")}


def test_the_exporter_probes_an_http3_module_and_its_log_line_says_http3(
    caddy: tuple[RunningProxy, Endpoint], tls_files: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    running, _ = caddy
    caplog.set_level(logging.INFO, logger="tokenpath.monitor")
    module = build("h3", ModuleSpec(http_version="3", cacert=str(tls_files.cert)), {})
    config = ex.ExporterConfig({"h3": module}, AllowList.parse(["https://127.0.0.1:*"]))
    answer = ex.ProbeExporter(config, ex.sniffing_prober(Aborter())).handle(
        "GET", "/probe", f"target={running.url}/v1&module=h3", "10"
    )
    assert answer.status == 200, answer.body
    values = {
        s.name: s.value
        for family in text_string_to_metric_families(answer.body.decode())
        for s in family.samples
        if not s.labels
    }
    assert values["probe_success"] == 1
    assert values["probe_http_status_code"] == 200
    records = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert [(r["outcome"], r["http_version"]) for r in records] == [("ok", "3")]
