"""Caddy 2.11's stock TLS site, which serves HTTP/3 on its port over UDP beside h2 and HTTP/1.1 over TCP: the one
front the HTTP/3 e2e files (probe, browser, load, diagnose and monitor) measure through, started one way for all."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.serve.tlscert import TLSFiles


@contextmanager
def caddy_h3(upstream: Endpoint, tls_files: TLSFiles, name: str = "caddy-h3") -> Iterator[RunningProxy]:
    """Caddy 2.11 stock in front of `upstream` on a free loopback port, with the run's certificate; the test is
    skipped (with why) where Caddy 2.11 is not in the tools folder."""
    proxy = catalogue()["caddy-2.11"]
    if proxy.missing_reason():
        pytest.skip(f"caddy-2.11: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), upstream, new_workdir(name), proxy.variant("stock"), tls_files)
    running = start(proxy, site)
    try:
        yield running
    finally:
        running.stop()
