"""`tokenpath probe --accept-encoding gzip` through the compressing relays in front of the stub, all real processes:
gzip-flush decoded as a stream (one frame per arrival), gzip-hold decoded as one late burst with reads that only fed
the decompressor; without the option the relay does not compress, so a probe that ignored it fails here. With
`--stub-url` the runs are joined to the stub's write log: added TTFT and each later frame's added delay.

20 frames of 60 B every 30 ms; the three probes run at once, each its own stream."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.serve.procs import tokenpath_argv

FRAMES, INTERVAL_MS, TTFT_MS = 20, 30, 20
STREAM_MS = TTFT_MS + (FRAMES - 1) * INTERVAL_MS
# `--format plain`: the stub writes one frame per token and nothing else
WIRE_FRAMES = FRAMES


@pytest.fixture(scope="module")
def urls(module_service: Start) -> dict[str, str]:
    """The relays, and the stub as "stub" (its write log: --stub-url)."""
    stub = module_service(
        "stub", "--port", "0", "--api", "openai", "--format", "plain", "--tokens", str(FRAMES),
        "--interval-ms", str(INTERVAL_MS), "--ttft-ms", str(TTFT_MS), "--frame-bytes", "60", name="stub",
    )  # fmt: skip

    def relay(mode: str) -> str:
        proc = module_service("relay", "--upstream", netloc(stub.url), "--mode", mode, name=mode)
        assert proc.url is not None
        return proc.url

    with ThreadPoolExecutor(2) as pool:
        hold, flush = pool.map(relay, ("gzip-hold", "gzip-flush"))
    assert stub.url is not None
    return {"gzip-hold": hold, "gzip-flush": flush, "stub": stub.url}


def probe(url: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        tokenpath_argv("probe", url, "--json", *args), capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


@pytest.fixture(scope="module")
def docs(urls: dict[str, str]) -> dict[str, dict[str, Any]]:
    joined = ("--stub-url", urls["stub"])
    jobs = {
        "flush": (urls["gzip-flush"], "--accept-encoding", "gzip", *joined),
        "hold": (urls["gzip-hold"], "--accept-encoding", "gzip", *joined),
        "hold, none asked": (urls["gzip-hold"],),
    }
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(probe, *args) for name, args in jobs.items()}
        return {name: f.result(timeout=40) for name, f in futures.items()}


def test_gzip_flush_is_decoded_as_a_stream(docs: dict[str, dict[str, Any]]) -> None:
    doc = docs["flush"]
    run = doc["runs"][0]
    assert doc["accept_encoding"] == "gzip"
    assert doc["content_encoding"] == run["content_encoding"] == "gzip"
    assert run["frames"] == WIRE_FRAMES
    assert run["frames_per_read"] <= 1.1
    assert run["ttft_ms"] < STREAM_MS / 2
    assert run["added_ttft_ms"] < INTERVAL_MS / 2
    assert run["added_frame_delay_ms"]["p50"] < INTERVAL_MS / 2  # the later frames on time too


def test_gzip_hold_is_decoded_as_one_late_burst(docs: dict[str, dict[str, Any]]) -> None:
    run = docs["hold"]["runs"][0]
    assert run["content_encoding"] == "gzip"
    assert run["frames"] == WIRE_FRAMES
    assert run["frames_per_read"] >= 2 or run["arrivals"] == 1
    assert run["reads"] > run["arrivals"]  # reads that only fed the decompressor (the head, the gzip header)
    assert run["ttft_ms"] >= STREAM_MS  # held to the stream's end; sent time read before the write (SENT_RULE)
    # Joined to the stub's writes: held from the first token, and every later frame by what was left of the stream.
    assert run["added_ttft_ms"] >= 0.9 * (STREAM_MS - TTFT_MS)
    assert run["added_frame_delay_ms"]["p50"] >= 0.4 * (STREAM_MS - TTFT_MS)


def test_without_accept_encoding_nothing_is_compressed(docs: dict[str, dict[str, Any]]) -> None:
    doc = docs["hold, none asked"]
    assert doc["accept_encoding"] is None
    assert doc["runs"][0]["content_encoding"] == "identity"
    assert doc["runs"][0]["frames_per_read"] <= 1.1
