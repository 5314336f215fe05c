"""`tokenpath monitor` as users run it: a real stub behind stock HAProxy (which coalesces), the monitor process
probing both routes, and the Debian `prometheus` package scraping it with the shipped alerting rules.

make test installs prometheus (scripts/install-proxies --all, as root); where it is missing the Prometheus test is
skipped with that reason and the rest still runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.proxies import lookup
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.serve.procs import tokenpath_argv

EXAMPLES = Path(__file__).parents[2] / "examples" / "monitoring"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_haproxy = pytest.mark.skipif(lookup("haproxy").binary() is None, reason="haproxy is not installed "
                                   "(make test installs it as root: scripts/install-proxies)")  # fmt: skip
# HAProxy 2.6 holds 60-byte frames sent every 50 ms and delivers them in bursts of ~5 (docs/findings.md)
STUB = ("stub", "--port", "0", "--format", "plain", "--frame-bytes", "60", "--interval-ms", "50", "--ttft-ms", "20",
        "--tokens", "16")  # fmt: skip


@pytest.fixture
def stub_and_haproxy(service: Start) -> Iterator[tuple[str, str]]:
    stub = service(*STUB, name="stub")
    host, port = netloc(stub.url).rsplit(":", 1)
    site = Site(Endpoint("127.0.0.1", free_port()), Endpoint(host, int(port)), new_workdir("haproxy"))
    haproxy: RunningProxy = start(lookup("haproxy"), site)
    try:
        yield haproxy.url, stub.url or ""
    finally:
        haproxy.stop()


def write_config(tmp_path: Path, via: str, direct: str, **monitor: Any) -> Path:
    settings = {"interval_s": 0.5, "metrics_listen": "127.0.0.1:0", **monitor}
    lines = ["[monitor]", *(f"{k} = {json.dumps(v)}" for k, v in settings.items()),
             "[[target]]", 'name = "haproxy"', f'url = "{via}"', f'direct_url = "{direct}"',
             "[[target]]", 'name = "down"', f'url = "http://127.0.0.1:{free_port()}"',
             "connect_timeout_s = 1"]  # fmt: skip
    path = tmp_path / "monitor.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tokenpath_argv("monitor", *args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})  # fmt: skip


@needs_haproxy
def test_once_gates_a_pipeline_on_coalescing_and_names_the_rule(
    tmp_path: Path, stub_and_haproxy: tuple[str, str]
) -> None:
    via, direct = stub_and_haproxy
    config = write_config(tmp_path, via, direct)
    out = run_cli(str(config), "--once", "--probes", "2", "--fail-on", "coalescing>1.5,ttft_p95>60s")
    assert out.returncode == 14, out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("tokenpath monitor: error:")]
    assert len(errors) == 1, out.stderr
    assert re.search(r"coalescing>1\.5 breached on haproxy: [2-9]", errors[0]), errors
    assert "ttft_p95>60s breached on down: nothing measured" in out.stderr  # the unreachable target fails closed
    assert "haproxy" in out.stdout
    assert "connect 2" in out.stdout
    direct_only = tmp_path / "direct.toml"
    direct_only.write_text(f'[[target]]\nname = "stub"\nurl = "{direct}"\n')
    # Three probes: the gate reads the median, so one probe a busy host stalled (16 frames in 6 reads once, with the
    # test suite six-wide beside it) cannot move it; a path that coalesces moves every probe.
    ok = run_cli(str(direct_only), "--once", "--probes", "3", "--fail-on", "coalescing>1.5,fpr>1.5")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_bad_input_is_one_line_and_its_own_exit_code(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[monitor]\nintervall_s = 5\n[[target]]\nname = "a"\nurl = "http://127.0.0.1:9"\n')
    out = run_cli(str(bad))
    assert out.returncode == 2, out.stderr
    assert "unknown key(s) ['intervall_s']" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = run_cli("--url", "http://127.0.0.1:9", "--fail-on", "fpr>1")
    assert out.returncode == 2
    assert "--fail-on goes with --once" in out.stderr
    out = run_cli("--url", "http://127.0.0.1:9", "--once", "--fail-on", "latency>1")
    assert out.returncode == 2
    assert "unknown metric 'latency'" in out.stderr
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out = run_cli("--url", "http://127.0.0.1:9", "--metrics-listen", f"127.0.0.1:{port}", timeout=30)
    assert out.returncode == 2, out.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_sigterm_stops_the_monitor_while_a_probe_hangs(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        config = tmp_path / "hang.toml"
        port = silent.getsockname()[1]
        config.write_text(f'[monitor]\nmetrics_listen = "127.0.0.1:0"\ninterval_s = 1\n[[target]]\nname = "hang"\n'
                          f'url = "http://127.0.0.1:{port}"\nfirst_byte_timeout_s = 60\n')  # fmt: skip
        with subprocess.Popen(tokenpath_argv("monitor", str(config)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as proc:  # fmt: skip
            try:
                assert proc.stdout is not None
                assert proc.stderr is not None
                assert "listening on http://127.0.0.1:" in proc.stdout.readline()
                conn, _ = silent.accept()  # the probe is in flight now
                sent = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                rc = proc.wait(30)
                assert time.monotonic() - sent < 10  # its probe's timeout is 60 s
                conn.close()
                assert rc == 0, proc.stderr.read()
                assert "tokenpath monitor: stopped" in proc.stdout.read()
            finally:
                proc.kill()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    doc = _get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert doc["status"] == "success", (expr, doc)
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def _panel_exprs() -> list[str]:
    dash = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs
    assert all(p["datasource"]["type"] == "prometheus" for p in dash["panels"])
    # Grafana's variables, as a dashboard with "All" targets would send them
    return [e.replace("$target", ".*").replace("$__rate_interval", "1m").replace("$__interval", "1m") for e in exprs]


@needs_haproxy
@pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus is not installed (make test "
                    "installs Debian's package as root: scripts/install-proxies --all)")  # fmt: skip
def test_prometheus_scrapes_the_monitor_and_sees_haproxy_coalesce(
    tmp_path: Path, stub_and_haproxy: tuple[str, str]
) -> None:
    assert PROMETHEUS is not None
    assert PROMTOOL is not None
    checked = subprocess.run([PROMTOOL, "check", "rules", str(EXAMPLES / "alerts.yml")], capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    via, direct = stub_and_haproxy
    with subprocess.Popen(tokenpath_argv("monitor", str(write_config(tmp_path, via, direct))),
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as monitor:  # fmt: skip
        _scrape_and_check(tmp_path, monitor)


def _scrape_and_check(tmp_path: Path, monitor: subprocess.Popen[str]) -> None:
    assert PROMETHEUS is not None
    prometheus = None
    try:
        assert monitor.stdout is not None
        line = monitor.stdout.readline()
        metrics_at = re.search(r"listening on http://([0-9.]+:\d+)/metrics", line)
        assert metrics_at, line
        scrape = tmp_path / "prometheus.yml"
        shutil.copy(EXAMPLES / "alerts.yml", tmp_path / "alerts.yml")
        scrape.write_text((EXAMPLES / "prometheus.yml").read_text().replace("15s", "1s")
                          .replace("127.0.0.1:9465", metrics_at.group(1)))  # fmt: skip
        port = free_port()
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={scrape}", f"--web.listen-address=127.0.0.1:{port}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        prom = f"http://127.0.0.1:{port}"
        via_gauge = 'tokenpath_monitor_coalescing{target="haproxy", route="via"}'
        direct_gauge = 'tokenpath_monitor_coalescing{target="haproxy", route="direct"}'
        deadline = time.monotonic() + 90
        seen: dict[str, float] = {}
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                for expr in (via_gauge, direct_gauge, 'tokenpath_monitor_probes_total{target="down"}'):
                    result = _query(prom, expr)
                    if result:
                        seen[expr] = max(float(r["value"][1]) for r in result)
            except OSError:
                continue  # Prometheus is still starting
            if len(seen) == 3 and seen[via_gauge] > 1:
                break
        assert seen.get(via_gauge, 0) > 1, seen  # HAProxy holds frames and sends them in bursts
        assert seen.get(direct_gauge) == 1, seen  # the same stub around it streams
        failures = _query(prom, 'tokenpath_monitor_probes_total{target="down", outcome="connect"}')
        assert failures
        assert float(failures[0]["value"][1]) >= 1
        assert _query(prom, 'tokenpath_monitor_ttft_seconds_count{target="haproxy", route="via"}')
        rules = _get(f"{prom}/api/v1/rules")["data"]["groups"][0]["rules"]
        assert {r["name"] for r in rules} >= {"TokenpathCoalescing", "TokenpathProbeStale", "TokenpathTTFTHigh"}
        assert all(r["health"] != "err" for r in rules), rules
        with urllib.request.urlopen(f"http://{metrics_at.group(1)}/metrics", timeout=5) as response:
            exported = set(re.findall(r"^# TYPE (\w+)", response.read().decode(), re.M))
        for expr in _panel_exprs():  # every panel's query runs on a real Prometheus and names an exported metric
            names = set(re.findall(r"\b(tokenpath_monitor_\w+)", expr))
            assert names, expr
            for name in names:
                assert re.sub(r"_(bucket|count|sum)$", "", name) in exported, (name, expr)
            _query(prom, expr)
        assert monitor.poll() is None  # still probing
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(10)
        monitor.send_signal(signal.SIGTERM)
        monitor.wait(30)
