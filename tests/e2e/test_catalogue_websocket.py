"""The Responses WebSocket mode through real proxies (issue 38 item 1): the real stub behind nginx, the probe's
WebSocket client in front. Stock nginx does not carry the upgrade (it drops the hop-by-hop Upgrade and Connection
headers and speaks HTTP/1.0 upstream, so the stub sees a plain GET): the probe reports the status that came instead
of 101 (stock Envoy refuses it: 403). nginx's and Envoy's documented WebSocket lines carry it, as HAProxy and Caddy
do on their stock configs, and the stream arrives one event per message, intact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import stub_upstream
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import RunMetrics, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.transport import TLSOptions
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.serve.tlscert import self_signed
from tokenpath.wire.apis import Api

pytestmark = pytest.mark.e2e

TOKENS = 8
PACING = {"interval_ms": 30, "tokens": TOKENS, "ttft_ms": 20}


@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    with stub_upstream() as upstream:
        yield upstream


def started(stub: Endpoint, name: str, variant: str) -> RunningProxy:
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    return start(proxy, Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir(name), proxy.variant(variant)))


def _sse_cfg(url: str) -> ProbeConfig:
    return ProbeConfig(url=url, api=Api.RESPONSES, first_byte_timeout_s=10, extra_body=(("tokenpath", PACING),))


def ws_run(url: str) -> RunMetrics:
    cfg = ProbeConfig(
        url=url,
        api=Api.RESPONSES,
        transport="websocket",
        first_byte_timeout_s=10,
        extra_body=(("tokenpath", PACING),),
    )
    trace = probe_stream(cfg)
    deltas = [f for f in trace.frames if b"response.output_text.delta" in f.frame.raw]
    assert len(deltas) in (0, TOKENS)  # none (not carried) or every one: never a part
    for f in deltas:
        assert json.loads(f.frame.data or b"{}")["type"] == "response.output_text.delta"
    return run_metrics(trace)


def test_direct_the_stub_streams_over_websocket(stub: Endpoint) -> None:
    metrics = ws_run(f"http://{stub.hostport}")
    assert metrics.ws is not None
    assert metrics.ws.upgraded
    assert metrics.ws.final_event


# What each stock proxy answers instead of 101: nginx drops the Upgrade and Connection headers, so the stub sees a
# plain GET on its POST route (405); Envoy refuses an upgrade type its connection manager does not list (403);
# Apache without `upgrade=websocket` forwards the plain GET (405); h2o, lighttpd and Squid drop the Upgrade header
# (405).
STOCK_ANSWERS = [("nginx", 405), ("envoy", 403), ("apache2", 405), ("h2o", 405), ("lighttpd", 405), ("squid", 405)]


@pytest.mark.parametrize(("name", "status"), STOCK_ANSWERS)
def test_a_stock_proxy_does_not_carry_the_upgrade_and_the_probe_says_so(stub: Endpoint, name: str, status: int) -> None:
    running = started(stub, name, "stock")
    try:
        metrics = ws_run(running.url)
    finally:
        running.stop()
    ws = metrics.ws
    assert ws is not None
    assert not ws.upgraded
    assert ws.upgrade_status == status
    assert "not carried" in ws.note
    assert metrics.ttft_ms is None


# nginx, Envoy, Apache, h2o, lighttpd and Squid with their documented lines; HAProxy and Caddy carry an upgrade on
# their stock configs.
CARRIED = [
    ("nginx", "websocket"),
    ("envoy", "websocket"),
    ("haproxy", "stock"),
    ("caddy-2.11", "stock"),
    ("apache2", "websocket"),
    ("h2o", "websocket"),
    ("lighttpd", "websocket"),
    ("squid", "websocket"),
]


@pytest.mark.parametrize(("name", "variant"), CARRIED)
def test_a_path_that_carries_the_upgrade_streams_every_event(stub: Endpoint, name: str, variant: str) -> None:
    running = started(stub, name, variant)
    try:
        metrics = ws_run(running.url)
        sse = run_metrics(
            probe_stream(
                ProbeConfig(
                    url=running.url, api=Api.RESPONSES, first_byte_timeout_s=10, extra_body=(("tokenpath", PACING),)
                )
            )
        )
    finally:
        running.stop()
    ws = metrics.ws
    assert ws is not None
    assert ws.upgraded
    assert ws.final_event
    assert ws.close_code == 1000
    assert metrics.ttft_ms is not None
    assert metrics.frames == sse.frames  # the same events as the SSE stream through the same variant


def test_stock_haproxy_bursts_the_sse_stream_but_tunnels_the_websocket_one(stub: Endpoint) -> None:
    """After a 101 HAProxy is a tunnel: its flush rule for HTTP bodies (a full segment or ~200 ms) no longer applies."""
    running = started(stub, "haproxy", "stock")
    try:
        ws = ws_run(running.url)
        sse = run_metrics(probe_stream(_sse_cfg(running.url)))
    finally:
        running.stop()
    assert sse.frames_per_read is not None
    assert ws.frames_per_read is not None
    assert sse.frames_per_read >= 4  # held and released in bursts
    assert ws.frames_per_read < 2  # each event alone (the lead events leave together, as direct)


def test_over_tls_the_upgrade_is_carried_the_same_way(stub: Endpoint, tmp_path: Path) -> None:
    """wss://: the probe's TLS (ALPN http/1.1: an upgrade is HTTP/1.1's), nginx terminating it."""
    tls = self_signed(tmp_path, ["127.0.0.1"])
    proxy = catalogue()["nginx"]
    if proxy.missing_reason():
        pytest.skip(f"nginx: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir("nginx"), proxy.variant("websocket"), tls)
    running = start(proxy, site)
    try:
        cfg = ProbeConfig(
            url=running.url,
            api=Api.RESPONSES,
            transport="websocket",
            tls=TLSOptions(cacert=str(tls.cert)),
            extra_body=(("tokenpath", PACING),),
        )
        metrics = run_metrics(probe_stream(cfg))
    finally:
        running.stop()
    assert running.url.startswith("https://")
    assert metrics.ws is not None
    assert metrics.ws.upgraded
    assert metrics.ws.final_event
