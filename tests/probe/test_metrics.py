from __future__ import annotations

import pytest

from tokenpath.errors import RemoteProtocolError
from tokenpath.probe.metrics import RunMetrics, probe_results, run_metrics
from tokenpath.probe.trace import TraceRecorder
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
ROLE = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
MS = 1_000_000
DONE = b"data: [DONE]\n\n"


def content(i: int) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i


def record(reads: list[tuple[int, bytes]], sent: int = 0) -> TraceRecorder:
    rec = TraceRecorder("s", sent)
    for t, data in reads:
        rec.on_read(t, data)
    rec.on_eof(reads[-1][0] + MS)
    return rec


def test_frames_per_read_counts_reads_not_frames() -> None:
    # Five frames in one recv() are ONE arrival: fpr 5.0. Counting per frame would give 1.0 and hide the burst.
    burst = b"".join(content(i) for i in range(5))
    metrics = run_metrics(record([(1 * MS, HEAD), (200 * MS, burst)]).trace)
    assert metrics.frames == 5
    assert metrics.arrivals == 1
    assert metrics.frames_per_read == 5.0
    assert metrics.bursts == {5: 1}


def test_one_frame_per_read_is_fpr_one() -> None:
    reads = [(1 * MS, HEAD)] + [((10 + i * 50) * MS, content(i)) for i in range(4)]
    metrics = run_metrics(record(reads).trace)
    assert metrics.frames_per_read == 1.0
    assert metrics.arrivals == 4
    assert metrics.gaps_ms == {"p50": 50.0, "p90": 50.0, "max": 50.0}


def test_a_read_that_completes_no_frame_is_not_an_arrival() -> None:
    half = content(0)
    reads = [(1 * MS, HEAD + half[:10]), (5 * MS, half[10:]), (9 * MS, content(1)[:4])]
    metrics = run_metrics(record(reads).trace)
    assert metrics.arrivals == 1
    assert metrics.frames == 1


def test_ttft_skips_role_delta_and_comments_ttfb_is_first_byte() -> None:
    reads = [
        (2 * MS, HEAD + ROLE),
        (30 * MS, b": ping\n\n"),
        (95 * MS, content(0)),
        (110 * MS, b"data: [DONE]\n\n"),
    ]
    metrics = run_metrics(record(reads, sent=1 * MS).trace)
    assert metrics.ttfb_ms == 1.0
    assert metrics.ttft_ms == 94.0
    assert metrics.frames == 4


def test_no_content_means_no_ttft() -> None:
    metrics = run_metrics(record([(2 * MS, HEAD + ROLE + b"data: [DONE]\n\n")]).trace)
    assert metrics.ttft_ms is None
    assert metrics.frames_per_read == 2.0


def test_summary_is_the_median_over_runs() -> None:
    runs = []
    for burst_size in (1, 3, 5):  # each stream whole: its last frame the format's final event
        body = b"".join(content(i) for i in range(burst_size - 1)) + DONE
        runs.append(run_metrics(record([(1 * MS, HEAD), (10 * MS, body)]).trace))
    doc = probe_results("http://x", runs).to_json()
    assert doc["schema_version"] == 1
    assert doc["summary"]["frames_per_read"] == 3.0
    assert [r["frames_per_read"] for r in doc["runs"]] == [1.0, 3.0, 5.0]
    assert doc["runs"][2]["bursts"] == {"5": 1}
    assert doc["summary"]["ends"] == {"complete": 3}


def test_a_stream_closed_before_its_final_event_is_cut_silent_and_never_in_the_summary() -> None:
    whole = run_metrics(record([(1 * MS, HEAD), (10 * MS, content(0)), (20 * MS, DONE)]).trace)
    cut = run_metrics(record([(1 * MS, HEAD), (3 * MS, content(0) + content(1) + content(2))]).trace)
    assert whole.end is not None
    assert whole.end.kind is EndKind.COMPLETE
    assert cut.end is not None
    assert cut.end.kind is EndKind.CUT_SILENT  # a close-delimited body: HTTP saw a normal end
    assert cut.end.how is BodyEnd.CLOSE
    assert cut.end.at_ns == 4 * MS  # EOF 1 ms after the last read, 4 ms after the request
    assert cut.end.since_last_byte_ns == 1 * MS
    doc = probe_results("http://x", [whole, cut]).to_json()
    assert doc["summary"]["ends"] == {"complete": 1, "cut_silent": 1}
    assert doc["summary"]["ttft_ms"] == whole.ttft_ms  # the cut run's (2 ms) never averaged in
    assert doc["summary"]["frames_per_read"] == 1.0
    assert doc["runs"][1]["end"]["kind"] == "cut_silent"
    assert doc["runs"][1]["end"]["since_last_byte_ms"] == 1.0
    assert RunMetrics.from_json(doc["runs"][1]).end == cut.end


def test_a_chunked_body_ended_before_its_final_event_is_cut_silent() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    frame = content(0)
    rec = TraceRecorder("s", 0)
    rec.on_read(1 * MS, head + b"%x\r\n" % len(frame) + frame + b"\r\n")
    rec.on_read(5 * MS, b"0\r\n\r\n")  # the gateway's kind of cut: its upstream went, it ended its response
    assert rec.complete
    end = rec.trace.end
    assert end is not None
    assert (end.kind, end.how) == (EndKind.CUT_SILENT, BodyEnd.CHUNKED)


def test_a_chunked_body_broken_off_raises_with_its_end_attached() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    frame = content(0)
    rec = TraceRecorder("s", 0)
    rec.on_read(1 * MS, head + b"%x\r\n" % len(frame) + frame + b"\r\n")
    with pytest.raises(RemoteProtocolError) as info:
        rec.on_eof(7 * MS)  # no last chunk: every HTTP client raises
    end = STREAM_END.of(info.value)
    assert end is not None
    assert (end.kind, end.how, end.at_ns, end.since_last_byte_ns) == (
        EndKind.CUT_ERROR,
        BodyEnd.TRUNCATED,
        7 * MS,
        6 * MS,
    )
    assert rec.trace.end == end


def test_the_formats_error_frame_is_a_cut_error() -> None:
    error = b'data: {"error":{"message":"boom","type":"server_error"}}\n\n'
    metrics = run_metrics(record([(1 * MS, HEAD), (3 * MS, content(0) + error)]).trace)
    assert metrics.end is not None
    assert metrics.end.kind is EndKind.CUT_ERROR


def test_the_table_names_each_run_s_end_and_a_cut_s_times() -> None:
    from rich.console import Console

    from tokenpath.probe.table import probe_table

    whole = run_metrics(record([(1 * MS, HEAD), (10 * MS, content(0) + DONE)]).trace)
    cut = run_metrics(record([(1 * MS, HEAD), (3 * MS, content(0))]).trace)
    console = Console(width=250, record=True)
    console.print(probe_table(probe_results("http://x", [whole, cut])))
    text = console.export_text()
    assert "complete" in text
    assert "run 2: cut_silent (close) 4.0 ms after the request, 1.0 ms after the last byte" in text
