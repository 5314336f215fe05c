"""The catalogue over HTTP/2 to the client (issue 25 §3), with real proxies, the real stub (h2c to the relays) and
the probe's HTTP/2 client: nginx and Caddy 2.11 over TLS serve h2 by ALPN, the controls are seen over h2 as over 1.1,
and a path that speaks HTTP/1.1 only fails the h2 probe instead of falling back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import stub_upstream
from tokenpath.errors import TokenpathError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import RunMetrics, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.transport import TLSOptions
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.serve.tlscert import TLSFiles, self_signed
from tokenpath.wire.httpversion import HttpVersion

pytestmark = pytest.mark.e2e

FRAMES = 12
PACING = {"interval_ms": 50, "frame_bytes": 60, "tokens": FRAMES, "format": "plain", "ttft_ms": 0}  # certification's


@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    with stub_upstream() as upstream:
        yield upstream


def started(stub: Endpoint, name: str, variant: str = "stock", tls: TLSFiles | None = None) -> RunningProxy:
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    return start(proxy, Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir(name), proxy.variant(variant), tls))


def h2_run(running: RunningProxy, cacert: Path | None = None) -> RunMetrics:
    tls = TLSOptions(cacert=str(cacert)) if cacert else TLSOptions()
    cfg = ProbeConfig(
        url=running.url,
        http_version=HttpVersion.HTTP2,
        tls=tls,
        first_byte_timeout_s=10,
        extra_body=(("tokenpath", PACING),),
    )
    trace = probe_stream(cfg)
    assert [(f.frame.data or b"").split(b" ")[0] for f in trace.frames] == [
        str(i).encode() for i in range(FRAMES)
    ]  # intact
    return run_metrics(trace)


# The two (nginx, Caddy 2.11 over TLS), and each variant whose line is what makes h2 (fails if ignored).
H2_PATHS = [
    ("nginx", "http2_buffering_off", True),
    ("caddy-2.11", "stock", True),
    ("haproxy", "h2", True),
    ("envoy", "http2", True),
    ("apache2", "http2", True),
    ("caddy", "h2c", False),
    ("varnish", "http2", False),
]


@pytest.mark.parametrize(("name", "variant", "tls"), H2_PATHS)
def test_a_proxy_serves_h2_to_the_probe(stub: Endpoint, tmp_path: Path, name: str, variant: str, tls: bool) -> None:
    files = self_signed(tmp_path / "tls", ["127.0.0.1"]) if tls else None
    running = started(stub, name, variant, files)
    try:
        metrics = h2_run(running, files.cert if files else None)
    finally:
        running.stop()
    assert metrics.http_version == "2"
    assert metrics.status == 200
    assert metrics.frames == FRAMES


def test_a_path_without_h2_fails_the_h2_probe_rather_than_fall_back(stub: Endpoint, tmp_path: Path) -> None:
    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    running = started(stub, "nginx", "stock", files)  # `listen ... ssl` without http2: ALPN offers http/1.1 only
    proxy = running.proxy
    try:
        assert proxy.client_http_unsupported(running.site.variant, True, "2")  # the runner's skip reason
        with pytest.raises(TokenpathError, match=r"(?i)h2|http/2"):
            h2_run(running, files.cert)
    finally:
        running.stop()


def test_the_controls_are_seen_over_h2(stub: Endpoint) -> None:
    """What certification checks over 1.1 (runner._certify), over h2 through the relays in front of the stub's h2c:
    buffer = one arrival, cork = bursts, pass = the direct path's one frame per read. Counts, not times."""
    relays = {mode: started(stub, mode) for mode in ("pass", "buffer", "cork")}
    try:
        runs = {mode: [h2_run(r) for _ in range(2)] for mode, r in relays.items()}
    finally:
        for r in relays.values():
            r.stop()
    for mode, metrics in runs.items():
        assert {m.http_version for m in metrics} == {"2"}, mode
    assert all(m.arrivals == 1 for m in runs["buffer"])
    assert all((m.frames_per_read or 0) >= 2 for m in runs["cork"])
    assert min(m.arrivals for m in runs["pass"]) >= FRAMES // 2
