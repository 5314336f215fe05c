"""`tokenpath monitor --exporter` as users run it: the Debian `prometheus` scrapes it through the blackbox pattern's
relabelling (examples/monitoring/prometheus-exporter.yml) for three targets (a stub, stock HAProxy in front of it,
an unreachable port); and the SSRF guard: by default nothing is probed, a target outside --allow is refused, and a
redirect is a failed probe whose Location is never contacted.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e.conftest import Start, netloc
from tests.e2e.test_monitor import EXAMPLES, PROMETHEUS, PROMTOOL, _query, needs_haproxy
from tests.helpers import accept_each
from tokenpath.proxies import lookup
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start

# 60-byte frames every 40 ms, which stock HAProxy 2.6 delivers in bursts (docs/findings.md); short enough that a
# probe through it ends inside a 1 s scrape timeout's budget (0.9 s)
STUB = ("stub", "--port", "0", "--api", "openai", "--format", "plain", "--frame-bytes", "60", "--interval-ms", "40",
        "--ttft-ms", "20", "--tokens", "10")  # fmt: skip
TTFT = "gen_ai_client_operation_time_to_first_chunk_seconds_count"


@pytest.fixture
def stub_behind_haproxy(service: Start) -> Iterator[tuple[str, str]]:
    stub = service(*STUB, name="stub")
    host, port = netloc(stub.url).rsplit(":", 1)
    site = Site(Endpoint("127.0.0.1", free_port()), Endpoint(host, int(port)), new_workdir("haproxy"))
    haproxy: RunningProxy = start(lookup("haproxy"), site)
    try:
        yield f"{haproxy.url}/v1", f"{stub.url}/v1"
    finally:
        haproxy.stop()


def scrape_config(exporter: str, targets: list[str]) -> str:
    """The shipped example with these targets and this exporter, every second."""
    text = (EXAMPLES / "prometheus-exporter.yml").read_text()
    text = text.replace("15s", "1s").replace("10s", "1s").replace("127.0.0.1:9465", exporter)
    listed = "".join(f"          - {t}\n" for t in targets)
    return re.sub(r"(      - targets:[^\n]*\n)(?:          - [^\n]*\n)+", lambda m: m.group(1) + listed, text, count=1)


@needs_haproxy
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (make test installs Debian's package as "
                    "root: scripts/install-proxies --all)")  # fmt: skip
def test_prometheus_probes_three_targets_through_the_exporter(
    tmp_path: Path, service: Start, stub_behind_haproxy: tuple[str, str]
) -> None:
    assert PROMETHEUS is not None
    via, direct = stub_behind_haproxy
    down = f"http://127.0.0.1:{free_port()}/v1"
    exporter = service("monitor", "--exporter", "--metrics-listen", "127.0.0.1:0", "--allow", "http://127.0.0.1:*",
                       "--metric-names", "otel", name="exporter")  # fmt: skip
    config = tmp_path / "prometheus.yml"
    config.write_text(scrape_config(netloc(exporter.url), [direct, via, down]))
    if PROMTOOL is not None:  # the shipped file as it is, and as the test runs it
        for path in (EXAMPLES / "prometheus-exporter.yml", config):
            checked = subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True,
                                     timeout=60)  # fmt: skip
            assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port()
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    prom = f"http://127.0.0.1:{port}"
    want = Seen({direct: 1.0, via: 1.0, down: 0.0}, 2.0, {direct, via}, ["connect"], 1.0)
    seen = Seen()
    try:
        deadline = time.monotonic() + 90  # ends as soon as Prometheus has it all; a loaded host's scrapes run late
        while time.monotonic() < deadline and not seen.reached(want):
            time.sleep(1)
            with contextlib.suppress(OSError):  # Prometheus is still starting
                seen.update(prom, via, down)
        assert seen.success == want.success, seen
        assert seen.coalescing > 1, seen  # HAProxy holds the frames and sends them in bursts
        assert seen.ttft == want.ttft, seen  # the OTel-named histogram, for the two that streamed
        assert seen.failure == want.failure, seen
        labels = _query(prom, f'{TTFT}{{instance="{via}"}}')[0]["metric"]
        assert (labels["gen_ai_operation_name"], labels["gen_ai_provider_name"], labels["tokenpath_hop"]) == (
            "chat", "openai", "via")  # fmt: skip
        assert seen.own_failures >= 1, seen  # the exporter's own /metrics, scraped by its own job
    finally:
        prometheus.terminate()
        try:
            prometheus.wait(10)
        except subprocess.TimeoutExpired:
            prometheus.kill()
            prometheus.wait(10)


@dataclass
class Seen:
    """What Prometheus has had: the latest probe_success by instance, the largest burst via HAProxy, the
    instances with a TTFT histogram, the unreachable target's failure reasons, the exporter's own count of failed
    probes; and each scrape's health, which a
    failure's message shows."""

    success: dict[str, float] = field(default_factory=dict)
    coalescing: float = 0.0
    ttft: set[str] = field(default_factory=set)
    failure: list[str] = field(default_factory=list)
    own_failures: float = 0.0
    up: dict[str, str] = field(default_factory=dict)

    def update(self, prom: str, via: str, down: str) -> None:
        self.success = {r["metric"]["instance"]: float(r["value"][1]) for r in _query(prom, "probe_success")}
        burst = _query(prom, f'tokenpath_probe_coalescing{{instance="{via}", route="via"}}')
        self.coalescing = max([self.coalescing, *(float(r["value"][1]) for r in burst)])
        self.ttft = {r["metric"]["instance"] for r in _query(prom, TTFT)}
        self.failure = [r["metric"]["reason"] for r in _query(prom, f'tokenpath_probe_failure{{instance="{down}"}}')]
        own = _query(prom, 'tokenpath_exporter_probes_total{job="tokenpath-exporter", outcome="connect"}')
        self.own_failures = max([0.0, *(float(r["value"][1]) for r in own)])
        self.up = {r["metric"]["instance"]: r["value"][1] for r in _query(prom, "up")}

    def reached(self, want: Seen) -> bool:
        return (self.success, self.ttft, self.failure) == (want.success, want.ttft, want.failure) and (
            self.coalescing >= want.coalescing and self.own_failures >= want.own_failures
        )


@pytest.fixture
def listener() -> Iterator[Callable[[bytes], tuple[str, list[bytes]]]]:
    """Scripted servers on loopback in this process: each answers every request with the given bytes and keeps
    what it was sent, so a test can say a server was never contacted."""
    sockets: list[socket.socket] = []

    def serve(answer: bytes) -> tuple[str, list[bytes]]:
        sock = socket.create_server(("127.0.0.1", 0))
        sockets.append(sock)
        got: list[bytes] = []

        def handle(conn: socket.socket) -> None:
            with conn:
                conn.settimeout(5)
                got.append(conn.recv(65536))
                conn.sendall(answer)

        accept_each(sock, handle)
        return f"http://127.0.0.1:{sock.getsockname()[1]}", got

    yield serve
    for sock in sockets:
        sock.close()


def get(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"X-Prometheus-Scrape-Timeout-Seconds": "5"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def test_the_exporter_probes_only_what_allow_names_and_never_follows_a_redirect(
    service: Start, listener: Callable[[bytes], tuple[str, list[bytes]]]
) -> None:
    outside, outside_got = listener(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 0\r\n\r\n")
    redirect = f"HTTP/1.1 302 Found\r\nLocation: {outside}/v1/chat/completions\r\nContent-Length: 0\r\n\r\n"
    redirector, redirector_got = listener(redirect.encode())
    closed = service("monitor", "--exporter", "--metrics-listen", "127.0.0.1:0", name="exporter-default")
    status, body = get(f"{closed.url}/probe?target={urllib.parse.quote(redirector)}")
    assert status == 403
    assert "--allow" in body  # by default nothing is probed, and the answer says how to allow
    exporter = service("monitor", "--exporter", "--metrics-listen", "127.0.0.1:0", "--allow", f"{redirector}/*",
                       name="exporter")  # fmt: skip
    status, body = get(f"{exporter.url}/probe?target={urllib.parse.quote(outside)}")
    assert status == 403, body
    assert "not matched by any --allow pattern" in body
    status, body = get(f"{exporter.url}/probe?target={urllib.parse.quote(redirector)}/v1&module=openai")
    assert status == 200, body
    assert "probe_success 0.0" in body
    assert "probe_http_status_code 302.0" in body
    assert 'tokenpath_probe_failure{reason="http_status",route="via"} 1.0' in body
    assert len(redirector_got) == 1
    assert outside_got == []  # neither the refused target nor the redirect's Location was ever contacted
    status, own = get(f"{exporter.url}/metrics")
    assert 'tokenpath_exporter_probes_refused_total{reason="not_allowed"} 1.0' in own
    assert 'tokenpath_exporter_probes_total{module="openai",outcome="http_status"} 1.0' in own
    assert status == 200
