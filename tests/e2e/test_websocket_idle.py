"""Idle survival over WebSocket (issue 38): a Responses stream over the WebSocket mode with a silence mid-stream (the
stub's pause), through nginx with its documented WebSocket lines and a 1 s proxy_read_timeout (Site.timeouts, the
stock 60 s made short). Without pings the silence outlasts the timer: nginx ends the tunnel, and the probe reports
the stream cut (closed without response.completed), never complete. With the client's pings (--ws-ping-s) more
often than the timer the same stream survives (measured: below)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import stub_upstream
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import RunMetrics, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.proxies.timeouts import StreamTimeouts
from tokenpath.wire.apis import Api

pytestmark = pytest.mark.e2e

READ_TIMEOUT_S = 1.0
TOKENS = 6
PAUSE = {"ttft_ms": 20, "interval_ms": 20, "tokens": TOKENS, "pause_ms": 3000, "pause_after": 2}  # 3 s after token 2


@pytest.fixture(scope="module")
def nginx() -> Iterator[RunningProxy]:
    proxy = catalogue()["nginx"]
    if proxy.missing_reason():
        pytest.skip(f"nginx: {proxy.missing_reason()}")
    with stub_upstream() as stub:
        site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir("nginx-ws-idle"), proxy.variant("websocket"))
        site.timeouts = StreamTimeouts(idle_s=READ_TIMEOUT_S)
        running = start(proxy, site)
        try:
            assert "proxy_read_timeout 1s;" in running.effective
            yield running
        finally:
            running.stop()


def _run(url: str, ping_s: float | None) -> RunMetrics:
    cfg = ProbeConfig(
        url=url,
        api=Api.RESPONSES,
        transport="websocket",
        ws_ping_s=ping_s,
        first_byte_timeout_s=10,
        idle_timeout_s=10,  # the probe's own, well past the silence: only the path may cut
        extra_body=(("tokenpath", PAUSE),),
    )
    return run_metrics(probe_stream(cfg))


def test_a_silence_past_nginx_s_read_timeout_cuts_the_websocket_stream(nginx: RunningProxy) -> None:
    metrics = _run(nginx.url, None)
    ws = metrics.ws
    assert ws is not None
    assert ws.upgraded
    assert not ws.final_event
    assert ws.cut
    assert ws.closed_by == "server"
    assert "before the final event: cut" in ws.note
    assert metrics.end is not None
    assert metrics.end.cut  # never complete
    assert metrics.ttft_ms is not None  # the tokens before the silence arrived
    assert ws.close_code == 1006  # nginx ended the tunnel's socket: no close frame
    since = metrics.end.since_last_byte_ns
    assert since is not None
    assert since >= 0.5e9  # nginx's 1 s read timeout (its cached clock ran ~40 ms early here), never at once
    print(f"cut {since / 1e6:.0f} ms after the last byte, {(metrics.end.at_ns or 0) / 1e6:.0f} ms after the request")


def test_the_client_s_pings_keep_the_stream_through_nginx_s_read_timeout(nginx: RunningProxy) -> None:
    """Measured: with a ping every 0.3 s the same 3 s silence survives nginx's 1 s read timeout, and the stream ends
    complete. Each ping goes upstream and the stub's pong comes back through nginx (a read from the upstream, the
    only kind proxy_read_timeout counts); nginx's tunnel also re-arms its upstream timer on the client's side of
    the exchange, so this run cannot say which of the two did it, only that an agent's pings are enough."""
    metrics = _run(nginx.url, 0.3)
    ws = metrics.ws
    assert ws is not None
    assert ws.final_event
    assert not ws.cut
    assert ws.close_code == 1000
    assert metrics.end is not None
    assert not metrics.end.cut
    assert ws.pings_sent >= 5  # the 3 s silence alone spans ten intervals
    assert ws.pongs >= 5  # answered through the path: nginx carries control frames both ways
