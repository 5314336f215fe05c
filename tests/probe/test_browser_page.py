"""The browser probe's page, without a browser: the fetch built from a ProbeConfig, the page's result checked, and
its chunks turned into the probe's Trace by the same recorder and frame reader as the raw probe's reads."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from tokenpath.errors import (
    BadRequest,
    ConnectError,
    ContentTypeError,
    DNSError,
    FirstByteTimeout,
    HTTPStatusError,
    IdleTimeout,
    NetworkError,
    ResponseTooLarge,
    TLSError,
    TotalTimeout,
    UsageError,
)
from tokenpath.probe.browser_page import (
    PageClock,
    PageResultError,
    check_outcome,
    fetch_spec,
    http_version,
    parse_result,
    to_trace,
)
from tokenpath.probe.client import ProbeConfig, request_bytes
from tokenpath.probe.h3figures import parse_h3_window
from tokenpath.probe.metrics import run_metrics
from tokenpath.wire.apis import Api
from tokenpath.wire.httpversion import HttpVersion

ORIGIN_MS = 1_796_215_566_543.6


def chunk(t: float, data: bytes) -> list[Any]:
    return [t, base64.b64encode(data).decode()]


def sse(n: int) -> bytes:
    return f'data: {{"choices":[{{"delta":{{"content":"t{n}"}}}}]}}\n\n'.encode()


ROLE = b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'


def page(chunks: list[list[Any]], **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "timeOrigin": ORIGIN_MS, "tCall": 10.0, "tHead": 12.0, "tEnd": 500.0, "status": 200,
        "contentType": "text/event-stream; charset=utf-8", "contentEncoding": None, "chunks": chunks,
        "resource": {"requestStart": 11.0, "responseStart": 11.5, "nextHopProtocol": "h2"},
    }  # fmt: skip
    result.update(extra)
    return result


# -- the fetch -----------------------------------------------------------------------------------------------------


def test_fetch_is_the_raw_probes_request() -> None:
    cfg = ProbeConfig(url="http://127.0.0.1:8000", headers=(("X-Team", "a"),), api_key="k", max_tokens=5,
                      extra_body=(("tokenpath", {"ttft_ms": 1}),))  # fmt: skip
    spec = fetch_spec(cfg, "tp-1")
    raw = request_bytes(cfg, cfg.target, "tp-1")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert spec.url == "http://127.0.0.1:8000/v1/chat/completions"
    assert json.loads(spec.body) == json.loads(body)  # the same JSON body, stream id and pacing included
    raw_headers = [line.split(": ", 1) for line in head.decode().split("\r\n")[1:]]
    browser_names = [name.lower() for name, _ in spec.headers]
    for name, value in raw_headers:  # every header the raw probe sends, but those the browser owns
        if name.lower() in ("host", "content-length", "connection"):
            assert name.lower() not in browser_names
        else:
            assert (name, value) in spec.headers
    assert ("Authorization", "Bearer k") in spec.headers
    assert spec.to_js()["headers"][0] == ["Content-Type", "application/json"]


def test_fetch_uses_the_formats_route_accept_and_timeouts() -> None:
    cfg = ProbeConfig(url="https://api.example:8443/v1", api=Api.ANTHROPIC, api_key="sk", first_byte_timeout_s=2,
                      idle_timeout_s=3, total_timeout_s=4)  # fmt: skip
    spec = fetch_spec(cfg, "tp-2")
    assert spec.url == "https://api.example:8443/v1/messages"
    assert ("Accept", "text/event-stream") in spec.headers
    assert ("x-api-key", "sk") in spec.headers
    js = spec.to_js()
    assert (js["firstByteMs"], js["idleMs"], js["totalMs"]) == (2000, 3000, 4000)


@pytest.mark.parametrize("name", ["Accept-Encoding", "host", "Cookie", "Sec-Fetch-Mode", "Proxy-Authorization"])
def test_headers_a_page_cannot_set_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match="may not set"):
        fetch_spec(ProbeConfig(url="http://h", headers=((name, "x"),)), "tp")


def test_accept_encoding_and_http2_are_the_browsers_own() -> None:
    with pytest.raises(UsageError, match="its own Accept-Encoding"):
        fetch_spec(ProbeConfig(url="http://h", accept_encoding="gzip"), "tp")
    with pytest.raises(UsageError, match="negotiates h2 by itself"):
        fetch_spec(ProbeConfig(url="https://h", http_version=HttpVersion.HTTP2), "tp")
    window = parse_h3_window("browser")
    with pytest.raises(UsageError, match="its own QUIC windows"):
        fetch_spec(ProbeConfig(url="https://h", http_version=HttpVersion.HTTP3, h3_window=window), "tp")
    fetch_spec(ProbeConfig(url="https://h", http_version=HttpVersion.HTTP3), "tp")  # HTTP/3 itself: QUIC forced


# -- the result ----------------------------------------------------------------------------------------------------


def test_result_is_parsed_and_decoded() -> None:
    result = parse_result(page([chunk(20.0, ROLE), chunk(311.0, sse(1))]))
    assert [c.data for c in result.chunks] == [ROLE, sse(1)]
    assert result.t_sent_ms == 11.0  # resource timing's requestStart, not the call
    assert result.sent_at == "requestStart"
    assert result.protocol == "h2"
    assert http_version(result.protocol) == "2"
    assert http_version("http/1.1") == "1.1"
    assert http_version(None) is None


def test_without_resource_timing_the_call_is_the_send() -> None:
    result = parse_result(page([], resource=None))
    assert (result.t_sent_ms, result.sent_at) == (10.0, "fetch()")


@pytest.mark.parametrize(
    "broken",
    [
        None,
        [],
        {"tCall": 1, "chunks": []},  # no timeOrigin
        page([]) | {"chunks": "x"},
        page([[1.0]]),
        page([[True, ""]]),
        page([[1.0, "not base64!"]]),
        page([chunk(5.0, b"a"), chunk(4.0, b"b")]),  # time goes backwards
        page([]) | {"status": "200"},
        page([]) | {"contentType": 7},
        page([]) | {"resource": []},
    ],
)
def test_a_result_of_another_shape_is_refused(broken: object) -> None:
    with pytest.raises(PageResultError):
        parse_result(broken)


# -- the trace -----------------------------------------------------------------------------------------------------


def test_chunks_become_reads_frames_and_ttft() -> None:
    cfg = ProbeConfig(url="http://h")
    # The role delta alone, then content: two frames in one chunk (one arrival of 2), the last frame split across
    # two chunks (the first of them completes none: a read, not an arrival).
    two = sse(2) + sse(3)
    chunks = [chunk(20.0, ROLE), chunk(311.0, sse(1)), chunk(361.0, two), chunk(411.0, sse(4)[:9]),
              chunk(412.0, sse(4)[9:] + b"data: [DONE]\n\n")]  # fmt: skip
    trace = to_trace(parse_result(page(chunks)), "tp-3", cfg, wall_minus_mono_ns=0)
    m = run_metrics(trace)
    assert m.status == 200
    assert m.frames == 6
    assert m.reads == 6  # the head, and five chunks
    assert m.arrivals == 4
    assert m.bursts == {1: 2, 2: 2}
    assert m.ttfb_ms == pytest.approx(1.0)  # fetch() resolved 1 ms after requestStart
    assert m.ttft_ms == pytest.approx(300.0)  # the first content chunk, from requestStart
    assert m.total_ms == pytest.approx(489.0)
    assert m.gaps_ms["max"] == pytest.approx(291.0)
    assert m.http_version == "2"  # the browser's nextHopProtocol, h2


def test_page_times_land_on_the_monotonic_clock() -> None:
    clock = PageClock(ORIGIN_MS, wall_minus_mono_ns=1_796_000_000_000_000_000)
    assert clock.ns(0.0) == 215_566_543_600_000
    assert clock.ns(1.5) - clock.ns(0.0) == 1_500_000  # exact differences whatever the origin


def test_the_encoding_is_the_one_the_browser_decoded() -> None:
    result = parse_result(page([chunk(20.0, sse(1))], contentEncoding="gzip"))
    trace = to_trace(result, "tp", ProbeConfig(url="http://h"), 0)
    assert trace.content_encoding == "gzip"
    assert trace.frame_count == 1  # the chunks are already decoded: never fed to a decompressor again
    assert gzip.compress(sse(1)) != sse(1)


def test_binary_event_stream_chunks_are_read_by_the_formats_reader() -> None:
    from tokenpath.wire.eventstream import encode_message

    message = encode_message({":event-type": "contentBlockDelta", ":message-type": "event",
                              ":content-type": "application/json"},
                             b'{"contentBlockIndex":0,"delta":{"text":"hi"}}')  # fmt: skip
    cfg = ProbeConfig(url="http://h", api=Api.BEDROCK, model="m")
    result = parse_result(page([chunk(50.0, message[:7]), chunk(60.0, message[7:])],
                               contentType="application/vnd.amazon.eventstream"))  # fmt: skip
    m = run_metrics(to_trace(result, "tp", cfg, 0))
    assert (m.frames, m.arrivals) == (1, 1)
    assert m.ttft_ms == pytest.approx(49.0)  # the chunk that completed the message, from requestStart


# -- failures ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"why": "first_byte", "error": "aborted"}, FirstByteTimeout),
        ({"why": "idle", "error": "aborted"}, IdleTimeout),
        ({"why": "total", "error": "aborted"}, TotalTimeout),
        ({"why": "too_large"}, ResponseTooLarge),
        ({"status": 404}, HTTPStatusError),
        ({"status": 400}, BadRequest),
        ({"status": 0, "redirected": True}, HTTPStatusError),
        ({"contentType": "application/json"}, ContentTypeError),
        ({"error": "Failed to fetch", "status": None}, NetworkError),
    ],
)
def test_failures_are_the_probes_own_errors(extra: dict[str, Any], error: type[Exception]) -> None:
    result = parse_result(page([chunk(20.0, b'{"error":"nope"}')], **extra))
    with pytest.raises(error):
        check_outcome(result, ProbeConfig(url="http://h"))


def test_an_error_status_shows_its_body() -> None:
    result = parse_result(page([chunk(20.0, b'{"error":"no such model"}')], status=404))
    with pytest.raises(HTTPStatusError, match=r"HTTP 404 from http://h:.*no such model"):
        check_outcome(result, ProbeConfig(url="http://h"))


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        ("net::ERR_CONNECTION_REFUSED", ConnectError),
        ("net::ERR_NAME_NOT_RESOLVED", DNSError),
        ("net::ERR_CERT_AUTHORITY_INVALID", TLSError),
        ("net::ERR_HTTP2_PROTOCOL_ERROR", NetworkError),
    ],
)
def test_the_browsers_net_error_picks_the_class(failure: str, error: type[Exception]) -> None:
    result = parse_result(page([], error="Failed to fetch", status=None))
    with pytest.raises(error, match=failure) as caught:
        check_outcome(result, ProbeConfig(url="http://h"), failure)
    assert type(caught.value) is error


def test_a_stream_that_passed_every_check_raises_nothing() -> None:
    check_outcome(parse_result(page([chunk(20.0, sse(1))])), ProbeConfig(url="http://h"))
