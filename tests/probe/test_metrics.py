from __future__ import annotations

from tokenpath.probe.metrics import probe_results, run_metrics
from tokenpath.probe.trace import TraceRecorder

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
ROLE = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
MS = 1_000_000


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
    for burst_size in (1, 3, 5):
        body = b"".join(content(i) for i in range(burst_size))
        runs.append(run_metrics(record([(1 * MS, HEAD), (10 * MS, body)]).trace))
    doc = probe_results("http://x", runs).to_json()
    assert doc["schema_version"] == 1
    assert doc["summary"]["frames_per_read"] == 3.0
    assert [r["frames_per_read"] for r in doc["runs"]] == [1.0, 3.0, 5.0]
    assert doc["runs"][2]["bursts"] == {"5": 1}
