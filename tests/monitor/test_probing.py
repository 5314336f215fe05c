from __future__ import annotations

from dataclasses import replace

import pytest

from tokenpath import errors
from tokenpath.errors import NetworkError
from tokenpath.monitor.config import from_dict
from tokenpath.monitor.probing import (
    INTERNAL,
    MONITOR_LIMITS,
    NO_CONTENT,
    OK,
    UNSUPPORTED_FORMAT,
    added_ttft_s,
    monitor_limits,
    probe_cycle,
    probe_route,
    reason_of,
)
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.trace import Trace, TraceRecorder
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind, StreamEnd

MS = 1_000_000
DONE = b"data: [DONE]\n\n"  # the format's final event: a stream without it was cut
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def trace_of(reads: list[tuple[int, bytes]], stream_id: str = "s") -> Trace:
    rec = TraceRecorder(stream_id, 0)
    for t_ms, data in reads:
        rec.on_read(t_ms * MS, data)
    return rec.trace


CONTENT = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (errors.ConnectError("x"), "connect"),
        (errors.ConnectTimeout("x"), "connect_timeout"),
        (errors.DNSError("x"), "dns"),
        (errors.TLSError("x"), "tls"),
        (errors.HTTPStatusError("x"), "http_status"),
        (errors.ContentTypeError("x"), "content_type"),
        (errors.FirstByteTimeout("x"), "first_byte_timeout"),
        (errors.IdleTimeout("x"), "idle_timeout"),
        (errors.TotalTimeout("x"), "total_timeout"),
        (errors.RemoteProtocolError("x"), "remote_protocol"),
        (errors.NetworkError("x"), "network"),
        (errors.BadRequest("x"), "bad_request"),
        (ValueError("x"), INTERNAL),
    ],
)
def test_each_failure_has_the_reason_its_error_class_names(exc: BaseException, reason: str) -> None:
    assert reason_of(exc) == reason


def test_a_probe_that_fails_is_an_outcome_with_its_reason_not_an_exception() -> None:
    def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
        raise errors.HTTPStatusError("HTTP 503 from http://x: \n overloaded")

    cfg = from_dict({"target": [{"name": "t", "url": "http://127.0.0.1:9"}]}).targets[0]
    out = probe_route("t", "via", cfg.routes["via"], prober)
    assert (out.outcome, out.metrics, out.ok) == ("http_status", None, False)
    assert out.message == "HTTP 503 from http://x: overloaded"  # one line


def test_a_stream_without_content_is_no_content_and_keeps_its_figures() -> None:
    trace = trace_of([(1, HEAD + chunk(b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n')),
                      (2, chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")])  # fmt: skip
    cfg = from_dict({"target": [{"name": "t", "url": "http://127.0.0.1:9"}]}).targets[0]
    out = probe_route("t", "via", cfg.routes["via"], lambda c, s: trace)
    assert out.outcome == NO_CONTENT
    assert out.metrics is not None
    assert out.metrics.frames == 2


def test_a_cycle_probes_both_routes_in_the_order_asked_and_subtracts_direct_from_via() -> None:
    cfg = from_dict({"target": [{"name": "t", "url": "http://127.0.0.1:9", "direct_url": "http://127.0.0.1:10"}]})
    target = cfg.targets[0]
    seen: list[str] = []

    def prober(c: ProbeConfig, stream_id: str) -> Trace:
        seen.append(c.url)
        late = 250 if c.url.endswith(":9") else 50  # via 250 ms, direct 50 ms
        return trace_of([(1, HEAD), (late, chunk(CONTENT) + chunk(DONE) + b"0\r\n\r\n")])

    cycle = probe_cycle(target, prober, direct_first=True)
    assert seen == ["http://127.0.0.1:10", "http://127.0.0.1:9"]
    assert [o.route for o in cycle] == ["direct", "via"]
    assert all(o.outcome == OK for o in cycle)
    assert added_ttft_s(cycle) == pytest.approx(0.2)
    seen.clear()
    probe_cycle(target, prober, direct_first=False)
    assert seen == ["http://127.0.0.1:9", "http://127.0.0.1:10"]


def test_no_added_ttft_unless_both_routes_measured_one() -> None:
    cfg = from_dict({"target": [{"name": "t", "url": "http://127.0.0.1:9", "direct_url": "http://127.0.0.1:10"}]})

    def prober(c: ProbeConfig, stream_id: str) -> Trace:
        if c.url.endswith(":10"):
            raise errors.ConnectError("refused")
        return trace_of([(1, HEAD + chunk(CONTENT) + chunk(DONE) + b"0\r\n\r\n")])

    assert added_ttft_s(probe_cycle(cfg.targets[0], prober, direct_first=False)) is None


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (errors.ContentEncodingError("x"), "content_encoding"),
        (errors.ResponseTooLarge("x"), "response_too_large"),
        (errors.BadRequest("x"), "bad_request"),
    ],
)
def test_the_new_failures_are_named_like_their_classes(exc: BaseException, reason: str) -> None:
    assert reason_of(exc) == reason


def test_a_stream_in_another_api_format_is_unsupported_format_not_a_ttft() -> None:
    from tests.probe.hostile import ANTHROPIC_FRAMES

    trace = trace_of([(1, HEAD + chunk(ANTHROPIC_FRAMES[:200])), (40, chunk(ANTHROPIC_FRAMES[200:]) + b"0\r\n\r\n")])
    cfg = from_dict({"target": [{"name": "t", "url": "http://127.0.0.1:9"}]}).targets[0]
    out = probe_route("t", "via", cfg.routes["via"], lambda c, s: trace)
    assert out.outcome == UNSUPPORTED_FORMAT
    assert out.metrics is not None
    assert out.metrics.ttft_ms is None
    assert out.metrics.frames == 8
    assert "event: message_start" in out.message


def test_the_monitor_keeps_no_frame_and_a_bounded_number_of_reads_but_counts_them_all() -> None:
    rec = TraceRecorder("s", 0, MONITOR_LIMITS)
    rec.on_read(MS, HEAD)
    for i in range(MONITOR_LIMITS.reads + 500):
        rec.on_read((2 + i) * MS, chunk(CONTENT))
    trace = rec.trace
    assert trace.frames == []
    assert len(trace.reads) == MONITOR_LIMITS.reads
    assert trace.frame_count == MONITOR_LIMITS.reads + 500
    cfg = from_dict({"target": [{"name": "t", "url": "http://127.0.0.1:9"}]}).targets[0]
    out = probe_route("t", "via", cfg.routes["via"], lambda c, s: trace)
    assert out.ok
    assert out.metrics is not None
    assert out.metrics.ttft_ms == 2.0
    assert out.metrics.arrivals == MONITOR_LIMITS.reads + 500
    assert len(out.gaps_s) == MONITOR_LIMITS.reads - 2  # between the kept arrivals (the head's read has none)


def test_a_stream_ended_without_its_final_event_is_cut_silent_never_ok() -> None:
    cfg = from_dict({"target": [{"name": "t", "url": "http://127.0.0.1:9"}]}).targets[0]
    trace = trace_of([(1, HEAD), (40, chunk(CONTENT) + b"0\r\n\r\n")])  # the last chunk, no [DONE]
    out = probe_route("t", "via", cfg.routes["via"], lambda c, s: trace)
    assert out.outcome == "cut_silent"
    assert not out.ok
    assert out.end is not None
    assert out.end.kind is EndKind.CUT_SILENT
    assert "cut_silent (chunked)" in out.message
    whole = trace_of([(1, HEAD), (40, chunk(CONTENT) + chunk(DONE) + b"0\r\n\r\n")])
    out = probe_route("t", "via", cfg.routes["via"], lambda c, s: whole)
    assert out.ok
    assert out.end is not None
    assert out.end.kind is EndKind.COMPLETE


def test_a_probe_that_raised_on_a_reset_keeps_the_end_it_gave_the_stream() -> None:
    cfg = from_dict({"target": [{"name": "t", "url": "http://127.0.0.1:9"}]}).targets[0]
    end = StreamEnd(EndKind.CUT_ERROR, BodyEnd.RESET, 5_000_000, 1_000_000)

    def prober(c: ProbeConfig, stream_id: str) -> Trace:
        raise STREAM_END.attach(NetworkError("the connection was reset"), end)

    out = probe_route("t", "via", cfg.routes["via"], prober)
    assert out.outcome == "network"
    assert out.end == end


def test_a_probes_answer_is_bounded_by_what_it_asked_for() -> None:
    """64 KB per token asked for, at least 1 MB, 64 MB when no max_tokens is sent; the rest of MONITOR_LIMITS kept."""
    url = "http://127.0.0.1:9/v1"
    bounds = [monitor_limits(ProbeConfig(url, max_tokens=n)).response_bytes for n in (1, 32, 1000, None)]
    assert bounds == [1 << 20, 32 << 16, 1000 << 16, 64 << 20]
    assert replace(monitor_limits(ProbeConfig(url, max_tokens=8)), response_bytes=None) == MONITOR_LIMITS
