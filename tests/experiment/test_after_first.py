"""Issue 24 §6: the delay a path adds to the frames after the first token (arrival - write, p50/p99 per run),
in the run, the row and the table: a path that delivers the first token on time and bunches the rest shows."""

from __future__ import annotations

from dataclasses import replace

from tokenpath.audit import AuditVerdict, StreamLog, Write
from tokenpath.experiment.measure import RunRecord, join
from tokenpath.experiment.rows import build_row
from tokenpath.experiment.spec import Condition, PathSpec
from tokenpath.probe.trace import FrameArrival, Trace
from tokenpath.report import tables
from tokenpath.wire.sse import Frame

MS = 1_000_000


def joined(arrivals_ms: list[float], writes_ms: list[float]) -> RunRecord:
    trace = Trace("s", 0)
    trace.frames = [FrameArrival(int(t * MS), i, Frame(b"data: x\n\n", b"x")) for i, t in enumerate(arrivals_ms)]
    trace.first_content = 0
    log = StreamLog(
        "s", 50.0, 0, "complete", tuple(Write(i, int(w * MS), int(w * MS), 9) for i, w in enumerate(writes_ms))
    )
    record = RunRecord("p", "s", audit=AuditVerdict("s", "complete", len(writes_ms), 50.0, 0.0, 0.0, 0.0, 0, True))
    join(record, trace, log)
    return record


def test_the_first_token_on_time_and_the_rest_bunched_shows_after_the_first() -> None:
    writes = [0.0, 50.0, 100.0, 150.0, 200.0]
    bunched = joined([0.5, 200.5, 200.5, 200.5, 200.5], writes)
    assert bunched.path_added_ttft_ms == 0.5  # the first token was on time
    assert bunched.frame_delay_ms["after_first_p50"] >= 50.5  # the later frames waited for the fifth
    assert bunched.frame_delay_ms["after_first_p99"] >= 149.5
    streamed = joined([w + 0.5 for w in writes], writes)
    assert streamed.frame_delay_ms["after_first_p99"] == 0.5


def test_rows_carry_the_median_over_runs_and_the_table_shows_it_once_it_matters() -> None:
    cond = Condition(50.0, 60, "loopback", False)
    writes = [0.0, 50.0, 100.0]
    row = build_row(PathSpec("proxy"), cond, [joined([0.5, 100.5, 100.5], writes)] * 3, None)
    assert row.after_first_delay_ms_p50 is not None
    assert row.after_first_delay_ms_p99 is not None
    assert row.after_first_delay_ms_p99 >= 25.0
    names = [name for name, _ in tables.varying_columns([row])]
    assert "added delay after the first token ms (p50 / p99)" in names
    quiet = replace(row, after_first_delay_ms_p50=0.1, after_first_delay_ms_p99=0.2)
    assert not any("after the first" in name for name, _ in tables.varying_columns([quiet]))
