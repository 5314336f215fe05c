"""`tokenpath probe --http3` through Caddy 2.11 (issue 38 item 2): its stock TLS site serves HTTP/3 on the same port
over UDP in front of the real stub; the probe reports HTTP/3 and its arrivals, and agrees with an HTTP/2 probe of the
same path (same frames, both streaming, both TTFTs bounded: counts and wide bounds, never tight times)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.caddyh3 import caddy_h3
from tests.helpers import stub_upstream
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import RunMetrics, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.transport import TLSOptions
from tokenpath.proxies.base import RunningProxy
from tokenpath.serve.tlscert import TLSFiles, self_signed
from tokenpath.wire.httpversion import HttpVersion

pytestmark = pytest.mark.e2e

FRAMES = 12
PACING = {"interval_ms": 50, "frame_bytes": 60, "tokens": FRAMES, "format": "plain", "ttft_ms": 0}  # certification's
TTFT_BOUND_MS = 2000  # the stub's first frame leaves at once: a clean path is far below this on any loaded machine


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return self_signed(tmp_path_factory.mktemp("tls"), ["127.0.0.1"])


@pytest.fixture(scope="module")
def caddy(tls_files: TLSFiles) -> Iterator[RunningProxy]:
    with stub_upstream() as stub, caddy_h3(stub, tls_files) as running:
        yield running


def run(running: RunningProxy, cacert: Path, version: HttpVersion) -> RunMetrics:
    cfg = ProbeConfig(
        url=running.url,
        http_version=version,
        tls=TLSOptions(cacert=str(cacert)),
        connect_timeout_s=10,
        first_byte_timeout_s=10,
        idle_timeout_s=10,
        extra_body=(("tokenpath", PACING),),
    )
    trace = probe_stream(cfg)
    assert [(f.frame.data or b"").split(b" ")[0] for f in trace.frames] == [
        str(i).encode() for i in range(FRAMES)
    ]  # intact, in order
    return run_metrics(trace)


def test_probe_http3_through_caddy_agrees_with_http2(caddy: RunningProxy, tls_files: TLSFiles) -> None:
    h3 = run(caddy, tls_files.cert, HttpVersion.HTTP3)
    h2 = run(caddy, tls_files.cert, HttpVersion.HTTP2)
    assert h3.http_version == "3"
    assert h2.http_version == "2"
    assert h3.h3 is not None
    assert h3.frames == h2.frames == FRAMES
    # Clean on both: frames 50 ms apart arrive (nearly) one per read over each version.
    assert h3.arrivals >= FRAMES // 2
    assert h2.arrivals >= FRAMES // 2
    for m in (h3, h2):
        assert m.ttft_ms is not None
        assert 0 < m.ttft_ms < TTFT_BOUND_MS
    assert h3.h3.handshake_ms > 0  # timed apart: the request leaves after it, TTFT counts from the request
    assert len(h3.h3.arrivals_ms) == h3.arrivals
    assert h3.h3.data_reads >= h3.arrivals


def test_the_cli_prints_http3_and_its_arrivals(caddy: RunningProxy, tls_files: TLSFiles) -> None:
    argv = [sys.executable, "-m", "tokenpath", "probe", caddy.url, "--http3", "--h3-window", "browser", "--json"]
    argv += ["--cacert", str(tls_files.cert), "--body-json", json.dumps({"tokenpath": PACING})]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["http_version"] == "3"
    run_doc = doc["runs"][0]
    assert run_doc["frames"] == FRAMES
    assert run_doc["h3"]["window"] == "browser"
    assert len(run_doc["h3"]["arrivals_ms"]) == run_doc["arrivals"] >= FRAMES // 2
