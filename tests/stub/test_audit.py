from __future__ import annotations

import pytest

from tokenpath.audit import StreamLog, Write, audit_stream, tolerance_ns
from tokenpath.stub.audit import AuditStore, StreamRecorder

MS = 1_000_000


@pytest.mark.parametrize(("interval", "tol_ms"), [(5, 2.0), (10, 2.0), (14, 2.8), (50, 10.0)])
def test_tolerance_is_max_of_2ms_and_20_percent(interval: float, tol_ms: float) -> None:
    assert tolerance_ns(interval) == round(tol_ms * MS)


def log_with(drifts_ms: list[float], interval: float = 50) -> StreamRecorder:
    log = StreamRecorder("s", interval, 0)
    for i, d in enumerate(drifts_ms):
        log.record(i * 50 * MS, i * 50 * MS + round(d * MS), 60)
    log.state = "complete"
    return log


def test_on_schedule_passes() -> None:
    verdict = audit_stream(log_with([0.1, 0.3, 9.9]))
    assert verdict.passed
    assert verdict.late_writes == 0
    assert verdict.drift_max_ms == pytest.approx(9.9)


def test_one_late_write_fails_the_stream() -> None:
    verdict = audit_stream(log_with([0.1, 10.1, 0.2]))
    assert not verdict.passed
    assert verdict.late_writes == 1


def test_an_early_write_fails_the_stream() -> None:
    assert not audit_stream(log_with([0.1, -0.5])).passed


def test_a_finished_stream_without_writes_fails() -> None:
    assert not audit_stream(log_with([])).passed


def test_store_keeps_newest_and_bounds_memory() -> None:
    store = AuditStore(max_streams=3)
    for i in range(5):
        store.open(f"s{i}", 14, 0)
    assert store.get("s0") is None
    assert store.get("s4") is not None
    assert len(store.all()) == 3


def test_the_log_names_its_first_content_write_and_reads_an_older_stub_s_log() -> None:
    store = AuditStore()
    rec = store.open("s", 10.0, 0, first_content=2)
    for k in range(4):
        rec.record(k * 10, k * 10 + 1, 60)
    log = rec.snapshot()
    assert log.first_content_write == Write(2, 20, 21, 60)
    again = StreamLog.from_json(log.to_json())
    assert again == log
    older = {k: v for k, v in log.to_json().items() if k != "first_content"}
    assert StreamLog.from_json(older).first_content_write is None


def test_the_recorder_and_its_answered_log_get_the_same_verdict() -> None:
    """audit_stream (tokenpath/audit.py) judges the stub's columns directly and a client's StreamLog alike."""
    for drifts in ([0.1, 0.2], [0.1, 11.0, 0.3], [-0.5], []):
        recorder = log_with(drifts, interval=50)
        assert audit_stream(recorder) == audit_stream(recorder.snapshot())
        assert audit_stream(recorder) == audit_stream(StreamLog.from_json(recorder.snapshot().to_json()))
