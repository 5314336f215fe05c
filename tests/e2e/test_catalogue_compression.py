"""Every compression variant of the catalogue, asked by a client that accepts gzip: it relays the stream intact in
the decoded body, answered with the coding measured here (docs/findings.md §10). The variants' relay without an
Accept-Encoding is test_catalogue.py's parametrization."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.proxies.timeouts import LONG_STREAMS
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

pytestmark = pytest.mark.e2e

FRAMES = 10
PACING = {"interval_ms": 30, "frame_bytes": 60, "tokens": FRAMES, "format": "plain", "ttft_ms": 0}
# What each answers a client that accepts gzip (Caddy 2.6.2's `encode` never compressed the stream here), or the
# variant's own coding (ACCEPTS). Starlette's GZipMiddleware excludes text/event-stream unless told otherwise.
ANSWERS = {
    ("nginx", "gzip"): "gzip",
    ("nginx", "gzip_buffering_off"): "gzip",
    ("haproxy", "compression"): "gzip",
    ("caddy", "encode"): "identity",
    ("caddy-2.11", "encode"): "gzip",
    ("envoy", "compressor"): "gzip",
    ("envoy", "compressor_brotli"): "br",
    ("envoy", "compressor_zstd"): "zstd",
    ("apache2", "deflate"): "gzip",
    ("apache2", "brotli"): "br",
    ("starlette", "gzip"): "identity",
    ("starlette", "gzip_sse"): "gzip",
    ("express", "naive"): "gzip",
    ("express", "flush"): "gzip",
}
ACCEPTS = {("envoy", "compressor_brotli"): "br", ("envoy", "compressor_zstd"): "zstd", ("apache2", "brotli"): "br"}
# every variant of theirs compresses, whatever its name, but stock and long_streams (the stream limits lifted)
APPLICATIONS = {"starlette", "express"}
# Measured here (the stub's 10 events 30 ms apart): held whole until the stream ends, or delivered one by one. Envoy's
# zstd compressor never flushes mid-stream; Express's compression() flushes only on res.flush().
HELD = {("express", "naive"), ("envoy", "compressor_zstd")}
STREAMED = {("express", "flush"), ("starlette", "gzip_sse"), ("envoy", "compressor_brotli"), ("apache2", "brotli")}


@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    with ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub") as proc:
        url = urlsplit(proc.url or "")
        assert url.hostname is not None
        assert url.port is not None
        yield Endpoint(url.hostname, url.port)


def test_every_compression_variant_of_these_proxies_is_covered() -> None:
    """(Traefik's `compress` middleware is tested with its own entry; haproxy3 is 2.6's variant, built on demand.)"""
    names = {name for name, _ in ANSWERS}
    variants = {(p.name, v.name) for p in catalogue().values() if p.name in names for v in p.variants}
    words = ("gzip", "compress", "encode", "deflate", "brotli")
    compressing = {
        (name, variant)
        for name, variant in variants
        if any(w in variant for w in words) or (name in APPLICATIONS and variant not in ("stock", LONG_STREAMS))
    }
    assert compressing == set(ANSWERS)


@pytest.mark.parametrize(("name", "variant"), sorted(ANSWERS))
def test_a_compression_variant_relays_the_decoded_stream_intact(stub: Endpoint, name: str, variant: str) -> None:
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir(name), proxy.variant(variant))
    running = start(proxy, site)
    try:
        cfg = ProbeConfig(url=running.url, extra_body=(("tokenpath", PACING),), first_byte_timeout_s=10,
                          accept_encoding=ACCEPTS.get((name, variant), "gzip"))  # fmt: skip
        trace = probe_stream(cfg)
    finally:
        running.stop()
    metrics = run_metrics(trace)
    assert metrics.frames == FRAMES
    assert [f.frame.data for f in trace.frames] == [f"{i} ".encode() + b"." * 50 for i in range(FRAMES)]
    assert trace.content_encoding == ANSWERS[(name, variant)]
    if (name, variant) in HELD:
        assert metrics.arrivals <= 2, metrics.bursts
    if (name, variant) in STREAMED:  # a margin for a loaded machine merging a few reads
        assert metrics.arrivals >= FRAMES // 2, metrics.bursts
