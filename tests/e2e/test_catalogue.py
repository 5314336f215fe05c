"""Every installed catalogue proxy, every variant: its config starts, it relays a stream intact, it stops clean."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers import stub_upstream
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.transport import TLSOptions
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.serve.tlscert import self_signed

FRAMES = 10
PACING = {"interval_ms": 30, "frame_bytes": 60, "tokens": FRAMES, "format": "plain", "ttft_ms": 0}
CASES = [(p.name, v.name) for p in catalogue().values() if p.runnable and not p.openai_only for v in p.variants]


@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    with stub_upstream() as upstream:
        yield upstream


@pytest.mark.parametrize(("name", "variant"), CASES)
def test_proxy_relays_a_stream_intact(stub: Endpoint, name: str, variant: str) -> None:
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    if proxy.client_http_unsupported(proxy.variant(variant), False, "1.1"):  # nginx 1.22's cleartext h2c port
        pytest.skip(f"{name}:{variant}: {proxy.client_http_unsupported(proxy.variant(variant), False, '1.1')}")
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir(name), proxy.variant(variant))
    running = start(proxy, site)
    try:
        cfg = ProbeConfig(url=running.url, extra_body=(("tokenpath", PACING),), first_byte_timeout_s=10,
                          api_key=proxy.api_key(site))  # the gateway's jwt variant checks a bearer token  # fmt: skip
        trace = probe_stream(cfg)
        metrics = run_metrics(trace)
        assert metrics.status == 200
        assert metrics.frames == FRAMES
        assert [f.frame.data for f in trace.frames] == [f"{i} ".encode() + b"." * 50 for i in range(FRAMES)]
        assert running.effective.strip()
        assert proxy.version() not in ("", "unknown", "not installed")
        assert running.process is not None
        pid = running.process.pid
        pids = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    finally:
        running.stop()
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not site.workdir.exists()


TLS_CASES = [p.name for p in catalogue().values() if p.runnable and not p.openai_only and not p.tls_unsupported]


@pytest.mark.parametrize("name", TLS_CASES)
def test_proxy_terminates_tls_and_relays(stub: Endpoint, name: str, tmp_path: Path) -> None:
    """Each proxy that claims TLS termination starts with its TLS config (h2o's once did not: a YAML indent)."""
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir(name), proxy.variant("stock"), files)
    running = start(proxy, site)
    try:
        cfg = ProbeConfig(url=running.url, extra_body=(("tokenpath", PACING),), first_byte_timeout_s=10,
                          tls=TLSOptions(cacert=str(files.cert)))  # fmt: skip
        metrics = run_metrics(probe_stream(cfg))
    finally:
        running.stop()
    assert running.url.startswith("https://")
    assert metrics.status == 200
    assert metrics.frames == FRAMES


EVERY_PEER = [p.name for p in catalogue().values() if p.runnable]


@pytest.mark.parametrize("name", EVERY_PEER)
def test_every_peer_listens_on_loopback_only(stub: Endpoint, name: str) -> None:
    """Servers bind 127.0.0.1 unless told otherwise, the ones tokenpath starts too (Portkey takes a port and no
    address: a preload binds its listen to the site's host)."""
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir(name), proxy.variant("stock"))
    running = start(proxy, site)
    try:
        assert running.process is not None
        tree = psutil.Process(running.process.pid)
        pids = {tree.pid} | {c.pid for c in tree.children(recursive=True)}
        listening = {(c.laddr.ip, c.laddr.port) for c in psutil.net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN and c.pid in pids}  # fmt: skip
    finally:
        running.stop()
    assert listening, f"{name}: no listening socket found in its process tree"
    assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
