"""`probe --client chromium --http3` (issue 38 item 2): headless Chromium with QUIC forced for the target's origin
(--origin-to-force-quic-on, the run's certificate trusted by its public-key pin) streams through Caddy 2.11's stock
TLS site over HTTP/3, and the DevTools Network events say h3 for the measured response; without --http3 the same
browser speaks h2 over TCP (QUIC off); against an origin with no QUIC the run fails, never a TCP figure as HTTP/3."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.caddyh3 import caddy_h3
from tests.helpers import stub_upstream
from tokenpath.chromium import find_chromium
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.serve.procs import tokenpath_argv
from tokenpath.serve.tlscert import TLSFiles, self_signed

pytestmark = pytest.mark.e2e

FRAMES = 12
PACING = {"interval_ms": 50, "frame_bytes": 60, "tokens": FRAMES, "format": "plain", "ttft_ms": 0}


@pytest.fixture(scope="module", autouse=True)
def chromium() -> None:
    if find_chromium() is None:
        pytest.skip("Chromium not installed: run `make test` as root, or apt-get install chromium")
    pytest.importorskip("playwright", reason="`tokenpath[browser]` (Playwright) is not installed")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return self_signed(tmp_path_factory.mktemp("tls"), ["127.0.0.1"])


@pytest.fixture(scope="module")
def caddy(tls_files: TLSFiles) -> Iterator[RunningProxy]:
    with stub_upstream() as stub, caddy_h3(stub, tls_files, "caddy-ch3") as running:
        yield running


def probe(url: str, cacert: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = tokenpath_argv("probe", url, "--client", "chromium", "--json", "--cacert", cacert, *args)
    argv += ["--body-json", json.dumps({"tokenpath": PACING}), "--total-timeout", "30"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_chromium_streams_over_http3_through_caddy(caddy: RunningProxy, tls_files: TLSFiles) -> None:
    done = probe(caddy.url, str(tls_files.cert), "--http3")
    assert done.returncode == 0, done.stderr[-2000:]
    doc: dict[str, Any] = json.loads(done.stdout)
    assert doc["client"] == "chromium"
    (run,) = doc["runs"]
    assert run["next_hop_protocol"] == "h3"  # and DevTools' response.protocol said h3, or the run would have failed
    assert run["http_version"] == "3"
    assert run["frames"] == FRAMES
    assert run["arrivals"] >= FRAMES // 2  # streams: 50 ms apart, (nearly) one per chunk


def test_without_http3_the_same_browser_speaks_h2_over_tcp(caddy: RunningProxy, tls_files: TLSFiles) -> None:
    done = probe(caddy.url, str(tls_files.cert))
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = json.loads(done.stdout)["runs"]
    assert run["next_hop_protocol"] == "h2"


def test_an_origin_with_no_quic_fails_the_run_not_a_tcp_figure(tls_files: TLSFiles) -> None:
    with stub_upstream() as stub:
        proxy = catalogue()["caddy-2.11"]
        site = Site(
            Endpoint("127.0.0.1", free_port()), stub, new_workdir("caddy-noh3"), proxy.variant("h2c"), tls_files
        )
        running = start(proxy, site)  # its h2c variant lists protocols h1 h2 h2c: no QUIC listener
        try:
            done = probe(running.url, str(tls_files.cert), "--http3", "--first-byte-timeout", "10")
        finally:
            running.stop()
    assert done.returncode != 0
    assert not done.stdout.strip().startswith("{"), done.stdout[:500]
    assert done.stderr.strip()
