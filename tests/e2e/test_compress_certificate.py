"""The compressing controls certified on real processes, as cork and buffer are (test_certificate.py): a client
that sends a browser's Accept-Encoding and counts frames in the decoded stream must see gzip-hold as late bursts
and gzip-flush as a stream, and the direct path at the floor in the same run.

40 frames of 60 B every 50 ms; the paths are read at the same time, each its own stream (one stream's wait)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from tests.controls.decoding_client import DecodedStream, stream_decoded
from tests.e2e.conftest import Start, netloc

FRAMES, INTERVAL_MS, TTFT_MS = 40, 50, 20
STREAM_MS = TTFT_MS + (FRAMES - 1) * INTERVAL_MS
BROWSER = "gzip, deflate, br, zstd"
PATHS = ("direct", "gzip-hold", "gzip-flush")


@pytest.fixture(scope="module")
def ports(module_service: Start) -> dict[str, int]:
    stub = module_service(
        "stub", "--port", "0", "--api", "openai", "--format", "plain", "--tokens", str(FRAMES),
        "--interval-ms", str(INTERVAL_MS), "--ttft-ms", str(TTFT_MS), "--frame-bytes", "60", name="stub",
    )  # fmt: skip

    def relay(mode: str) -> int:
        proc = module_service("relay", "--upstream", netloc(stub.url), "--mode", mode, name=mode)
        port = urlsplit(proc.url).port
        assert port is not None
        return port

    with ThreadPoolExecutor(2) as pool:
        hold, flush = pool.map(relay, ("gzip-hold", "gzip-flush"))
    direct = urlsplit(stub.url).port
    assert direct is not None
    return {"direct": direct, "gzip-hold": hold, "gzip-flush": flush}


@pytest.fixture(scope="module")
def streams(ports: dict[str, int]) -> dict[str, DecodedStream]:
    """Every path read at once with a browser's Accept-Encoding, plus gzip-hold by a client that asks for none."""
    jobs = {name: (ports[name], BROWSER) for name in PATHS}
    jobs["gzip-hold, no Accept-Encoding"] = (ports["gzip-hold"], None)  # type: ignore[assignment]
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(stream_decoded, port, accept) for name, (port, accept) in jobs.items()}
        return {name: f.result(timeout=30) for name, f in futures.items()}


def test_direct_streams_at_the_floor_uncompressed(streams: dict[str, DecodedStream]) -> None:
    got = streams["direct"]
    assert got.encoding == "identity"  # the stub does not compress: the relays' doing is all there is
    assert got.frames == FRAMES
    assert got.frames_per_arrival <= 1.05


def test_gzip_flush_streams_each_event_its_own_arrival(streams: dict[str, DecodedStream]) -> None:
    got = streams["gzip-flush"]
    assert got.encoding == "gzip"
    assert got.frames == FRAMES
    assert got.frames_per_arrival <= 1.05
    assert (got.first_arrival_ms or 0) < STREAM_MS / 2


def test_gzip_hold_is_seen_as_late_bursts(streams: dict[str, DecodedStream]) -> None:
    got = streams["gzip-hold"]
    assert got.encoding == "gzip"
    assert got.frames == FRAMES
    assert got.frames_per_arrival >= 2 or len(got.arrivals) == 1
    assert got.reads > len(got.arrivals)  # reads that only fed the decompressor (the head, the gzip header)
    assert (got.first_arrival_ms or 0) >= 0.9 * STREAM_MS


def test_gzip_hold_leaves_a_client_that_did_not_ask_streaming(streams: dict[str, DecodedStream]) -> None:
    got = streams["gzip-hold, no Accept-Encoding"]
    assert got.encoding == "identity"
    assert got.frames == FRAMES
    assert got.frames_per_arrival <= 1.05
