"""Traefik from the tools folder in front of the stub: the `compress` variant answers a client that accepts gzip with
a gzip stream whose decoded frames are the stub's; stock answers the same client uncompressed (the middleware is
what turns it on). Relaying intact, TLS and loopback-only binding are in test_catalogue.py, as for every entry."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.proxies import lookup
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

pytestmark = pytest.mark.e2e

FRAMES = 12
PACING = {"interval_ms": 20, "frame_bytes": 60, "tokens": FRAMES, "format": "plain", "ttft_ms": 0}
EXPECTED = [f"{i} ".encode().ljust(52, b".") for i in range(FRAMES)]  # 60-byte frames: `data: `, 52, `\n\n`


@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    with ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub") as proc:
        url = urlsplit(proc.url or "")
        assert url.hostname is not None
        assert url.port is not None
        yield Endpoint(url.hostname, url.port)


@pytest.mark.parametrize(("variant", "encoding"), [("compress", "gzip"), ("stock", "identity")])
def test_compress_answers_a_gzip_client_with_gzip_and_the_stubs_frames(
    stub: Endpoint, variant: str, encoding: str
) -> None:
    proxy = lookup("traefik")
    if proxy.missing_reason():
        pytest.skip(f"traefik: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir("traefik"), proxy.variant(variant))
    running = start(proxy, site)
    try:
        cfg = ProbeConfig(url=running.url, extra_body=(("tokenpath", PACING),), first_byte_timeout_s=10,
                          accept_encoding="gzip")  # fmt: skip
        trace = probe_stream(cfg)
    finally:
        running.stop()
    metrics = run_metrics(trace)
    assert metrics.status == 200
    assert metrics.content_encoding == encoding
    assert [f.frame.data for f in trace.frames] == EXPECTED  # decoded, every frame, in order
    assert "compress: {}" in running.effective if variant == "compress" else "compress" not in running.effective
