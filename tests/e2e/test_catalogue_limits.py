"""Issue 36 item 4: each proxy's stream limit is real, and its long_streams variant lifts it. The limits are made
tiny through the Site (1 s), never by editing a stock value: a silence of 4 s mid-stream cuts the stock variant
and passes through long_streams intact."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from tests.helpers import stub_upstream
from tokenpath.errors import TokenpathError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.proxies.timeouts import LONG_STREAMS, StreamTimeouts
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.wire.ending import STREAM_END

pytestmark = pytest.mark.e2e

FRAMES = 4
SILENCE_MS = 4000  # after the first token: past the 1 s limit by more than lighttpd's once-a-second check (cuts ~3 s)
PACING = {
    "interval_ms": 20,
    "frame_bytes": 60,
    "tokens": FRAMES,
    "format": "plain",
    "ttft_ms": 0,
    "pause_ms": SILENCE_MS,
    "pause_after": 1,
}
ONE_SECOND = StreamTimeouts(idle_s=1.0)
# The entries whose config has an idle timer between two reads from the upstream (Traefik has none): the Starlette
# relay's is httpx's read timeout, the gateway's its own [limits] idle_timeout_s, the Node peer's fetch's bodyTimeout.
IDLE_LIMITED = [
    "nginx",
    "haproxy",
    "envoy",
    "apache2",
    "h2o",
    "lighttpd",
    "varnish",
    "squid",
    "caddy",
    "starlette",
    "gateway",
    "node",
]


@pytest.fixture(scope="module")
def stub() -> Iterator[Endpoint]:
    with stub_upstream() as upstream:
        yield upstream


def frames_through(
    stub: Endpoint,
    name: str,
    variant: str,
    limits: StreamTimeouts = ONE_SECOND,
    pacing: dict[str, object] = PACING,
    frames: int = FRAMES,
) -> int:
    """Frames a client got through `name:variant` with tiny limits (fewer than asked for: the path cut it)."""
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir(name), proxy.variant(variant))
    site.timeouts = limits
    running = start(proxy, site)
    try:
        cfg = ProbeConfig(url=running.url, extra_body=(("tokenpath", pacing),), idle_timeout_s=10)
        try:
            metrics = run_metrics(probe_stream(cfg))
        except TokenpathError:  # a reset, or an error the proxy answered in place of the stream
            return 0
        return min(metrics.frames, frames) if metrics.status == 200 else 0
    finally:
        running.stop()


def stock_and_long_streams(
    stub: Endpoint,
    name: str,
    limits: StreamTimeouts = ONE_SECOND,
    pacing: dict[str, object] = PACING,
    frames: int = FRAMES,
) -> tuple[int, int]:
    """Frames through the stock variant and through long_streams, each its own proxy, side by side: the stock cut
    and the long stream's whole silence are one wait, not two."""
    with ThreadPoolExecutor(2) as pool:
        stock, lifted = pool.map(
            lambda variant: frames_through(stub, name, variant, limits, pacing, frames), ("stock", LONG_STREAMS)
        )
    return stock, lifted


@pytest.mark.parametrize("name", IDLE_LIMITED)
def test_a_silence_longer_than_the_idle_limit_cuts_stock_and_long_streams_survives(stub: Endpoint, name: str) -> None:
    stock, lifted = stock_and_long_streams(stub, name)
    assert stock < FRAMES
    assert lifted == FRAMES


STEADY_FRAMES = 30
STEADY = {"interval_ms": 100, "frame_bytes": 60, "tokens": STEADY_FRAMES, "format": "plain", "ttft_ms": 0}  # 3 s
TOTAL_1_5_S = StreamTimeouts(total_s=1.5)
# route timeout, send_timeout, the entry point's writeTimeout, the gateway's total_timeout_s
TOTAL_LIMITED = ["envoy", "varnish", "traefik", "gateway"]


@pytest.mark.parametrize("name", TOTAL_LIMITED)
def test_a_stream_longer_than_the_total_limit_cuts_stock_and_long_streams_survives(stub: Endpoint, name: str) -> None:
    """A steady 3 s stream, never silent for more than 100 ms: only a total limit (1.5 s here) ends it early."""
    stock, lifted = stock_and_long_streams(stub, name, TOTAL_1_5_S, STEADY, STEADY_FRAMES)
    assert stock < STEADY_FRAMES
    assert lifted == STEADY_FRAMES


def test_litellms_request_timeout_cuts_a_silence_and_long_streams_survives() -> None:
    """LiteLLM's one stream limit, `request_timeout` (1 s here), between two chunks of its upstream: a 4 s silence
    after the first token ends the stream without its [DONE] through stock; long_streams (the default, 6000 s, stated)
    carries it. The stub is paced by its flags: LiteLLM does not pass the body's `tokenpath` member on."""
    proxy = catalogue()["litellm"]
    if proxy.missing_reason():
        pytest.skip(f"litellm: {proxy.missing_reason()}")
    paced = ["--tokens", "3", "--interval-ms", "20", "--ttft-ms", "0", "--pause-ms", "4000", "--pause-after", "1"]
    ends = {}
    with ServiceProcess(tokenpath_argv("stub", "--port", "0", *paced), "stub") as stub_proc:
        url = urlsplit(stub_proc.url or "")
        upstream = Endpoint(url.hostname or "127.0.0.1", url.port or 0)
        for variant in ("stock", LONG_STREAMS):
            site = Site(Endpoint("127.0.0.1", free_port()), upstream, new_workdir("litellm"), proxy.variant(variant))
            site.timeouts = ONE_SECOND
            running = start(proxy, site)
            try:
                cfg = ProbeConfig(url=running.url, api_key=proxy.api_key(site), idle_timeout_s=10)
                try:
                    trace = probe_stream(cfg)
                    ends[variant] = trace.end.kind.value if trace.end else None
                except TokenpathError as exc:
                    end = STREAM_END.of(exc)
                    ends[variant] = end.kind.value if end else type(exc).__name__
            finally:
                running.stop()
    assert ends["stock"] != "complete", ends
    assert ends[LONG_STREAMS] == "complete", ends
