"""The probe's HTTP/2 path reads a stream by the HTTP/1.1 path's rules: the stub probed once over each (h2c prior
knowledge on the same port), paced so that every frame is its own arrival on both, gives the same frames, the same
first-token and first-content frames, the same Trace fields. Only http_version and the h2 figures differ."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.wire.httpversion import HttpVersion

# 30 ms apart: each frame is its own write, its own read, on a loaded machine too (the fields compared are counts)
PACING = {"tokens": 6, "reasoning_tokens": 2, "interval_ms": 30, "ttft_ms": 0, "heartbeat_ms": 1000}


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub") as proc:
        assert proc.url is not None
        yield proc.url


def probe(url: str, http2: bool) -> Trace:
    cfg = ProbeConfig(
        url=url, http_version=HttpVersion.of(http2), first_byte_timeout_s=10, extra_body=(("tokenpath", PACING),)
    )
    return probe_stream(cfg)


def test_the_same_stream_reads_the_same_over_http11_and_http2(stub_url: str) -> None:
    one, two = probe(stub_url, http2=False), probe(stub_url, http2=True)
    assert (one.http_version, two.http_version) == ("1.1", "2")
    assert one.h2 is None
    assert two.h2 is not None
    assert two.h2.data_frames > 0
    for trace in (one, two):
        assert trace.head is not None
        assert trace.head.status == 200
        assert trace.t_first_byte_ns is not None
        assert trace.t_first_content_ns is not None
        assert trace.t_first_token_ns is not None
        assert trace.t_first_token_ns <= trace.t_first_content_ns
    same = ("frame_count", "first_content", "first_token", "content_encoding", "foreign_frames", "trailing_bytes",
            "invalid_utf8_frames", "api", "error_hint")  # fmt: skip
    assert {f: getattr(one, f) for f in same} == {f: getattr(two, f) for f in same}
    assert one.head.content_type == two.head.content_type  # type: ignore[union-attr]
    # the frames' kinds and texts: token text varies by stream (the stub's ids), so compare what each frame is
    assert [_shape(f.frame.data) for f in one.frames] == [_shape(f.frame.data) for f in two.frames]
    m1, m2 = run_metrics(one), run_metrics(two)
    assert (m1.frames, m1.status, m1.content_encoding) == (m2.frames, m2.status, m2.content_encoding)
    assert (m1.http_version, m2.http_version) == ("1.1", "2")


def _shape(data: bytes | None) -> str:
    """What a frame is, without the per-stream ids and times in it."""
    data = data or b""
    for marker in (b"[DONE]", b'"role"', b'"reasoning', b'"content"', b'"finish_reason":"stop"'):
        if marker in data:
            return marker.decode()
    return data[:8].decode("utf-8", "replace")
