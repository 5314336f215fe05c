"""What real servers send before and around the first token (issue 24 §4) as matrix condition axes: parsed into the
grid, labelled, checked by the stub's own rules, sent to the stub per stream, and reported in rows."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tokenpath.audit import AuditVerdict
from tokenpath.errors import UsageError
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.rows import Floor, build_row
from tokenpath.experiment.spec import Condition, PathSpec, parse, stub_member
from tokenpath.probe.metrics import RunMetrics
from tokenpath.results.model import SCHEMA_VERSION, from_json, matrix_row
from tokenpath.stub.config import Pacing

AXES = {"heartbeat_ms": [0, 15000], "reasoning_tokens": [0, 8], "first_event_bytes": [0, 16384],
        "head_at": ["start", "first-token"]}  # fmt: skip


def test_each_axis_is_part_of_the_grid_and_of_the_label() -> None:
    exp = parse({"conditions": AXES})
    assert len(exp.conditions) == 16
    got = {(c.heartbeat_ms, c.reasoning_tokens, c.first_event_bytes, c.head_at) for c in exp.conditions}
    assert got == {(float(b), r, f, h) for b in (0, 15000) for r in (0, 8) for f in (0, 16384)
                   for h in ("start", "first-token")}  # fmt: skip
    labels = [c.label for c in exp.conditions]
    assert len(set(labels)) == 16  # floors and exclusion shares are matched by label
    last = exp.conditions[-1]
    assert last.label.endswith(", heartbeat 15000 ms, 8 reasoning tokens, first event 16384 B, head at first token"), (
        last.label
    )
    assert last.to_json()["heartbeat_ms"] == 15000.0
    assert last.to_json()["head_at"] == "first-token"


def test_defaults_are_off_and_leave_a_condition_as_it_was() -> None:
    (cond,) = parse({}).conditions
    assert (cond.heartbeat_ms, cond.reasoning_tokens, cond.first_event_bytes, cond.head_at) == (0, 0, 0, "start")
    assert cond.label == "60 B @ 50 ms, loopback"
    assert not {"heartbeat_ms", "reasoning_tokens", "first_event_bytes", "head_at"} & set(cond.to_json())
    assert set(stub_member(cond, 40, 20.0)) == {"interval_ms", "tokens", "ttft_ms", "format", "frame_bytes"}


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"api": ["bedrock"], "heartbeat_ms": [0, 15000]}, "bedrock.*keep-alive"),
        ({"api": ["ollama"], "heartbeat_ms": [15000]}, "ollama.*keep-alive|NDJSON"),
        ({"reasoning_tokens": [4], "frame_bytes": [60]}, "reasoning tokens.*frame_bytes|smaller"),
        ({"first_event_bytes": [10], "reasoning_tokens": [4]}, "first_event_bytes|smaller"),
        ({"first_event_bytes": [(1 << 20) + 1]}, "not allowed"),
        ({"head_at": ["later"]}, "not allowed"),
        ({"reasoning_tokens": [-1]}, "not allowed"),
        ({"heartbeat_ms": [-5]}, "not allowed"),
    ],
)
def test_what_a_stream_cannot_honour_fails_the_file(conditions: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse({"conditions": conditions})


def test_a_real_upstream_paces_its_own_stream() -> None:
    upstream = {"url": "http://127.0.0.1:9/v1", "model": "m"}
    with pytest.raises(UsageError, match="reasoning_tokens: the stub's pacing"):
        parse({"upstream": upstream, "conditions": {"reasoning_tokens": [4]}})


def test_each_option_reaches_the_stub_per_stream_and_the_stub_accepts_it() -> None:
    exp = parse({"conditions": AXES})
    base = Pacing(20.0, 50.0, 40, None, "openai")
    for cond in exp.conditions:
        pacing = stub_member(cond, 40, 20.0)
        stub = base.override(pacing)  # what the stub makes of the body's `tokenpath` member
        assert (stub.heartbeat_ms or 0) == cond.heartbeat_ms
        assert stub.reasoning_tokens == cond.reasoning_tokens
        assert (stub.first_event_bytes or 0) == cond.first_event_bytes
        assert stub.head_at == cond.head_at
        # Plain frames have no reasoning field: a reasoning condition streams OpenAI chunks, unpadded.
        assert stub.format == ("openai" if cond.reasoning_tokens else "plain"), cond.label
        assert cond.frame_bytes == (0 if cond.reasoning_tokens else 60)


def _run(ttfb: float, first_token: float, ttft: float) -> RunRecord:
    metrics = RunMetrics("s", 200, 10, 10, 1.0, ttfb, ttft, {}, {1: 10}, 500.0, first_token_ms=first_token)
    audit = AuditVerdict("s", "complete", 10, 10.0, 0.0, 0.0, 0.0, 0, True)
    return RunRecord("p", "s", metrics=metrics, path_added_ttft_ms=0.2, audit=audit)


def test_rows_report_first_token_beside_ttft_when_the_stub_reasons_first() -> None:
    cond = replace(Condition(50.0, 0, "loopback", False), reasoning_tokens=4, head_at="first-token")
    runs = [_run(20.5, 20.6, 220.0), _run(20.7, 20.8, 221.0), _run(20.9, 21.0, 222.0)]
    row = build_row(PathSpec("direct"), cond, runs, Floor.from_direct(runs))
    assert (row.condition.reasoning_tokens, row.condition.head_at) == (4, "first-token")
    assert row.first_token_ms_median == pytest.approx(20.8)
    assert row.ttft_ms_median == pytest.approx(221.0)
    assert row.ttfb_ms_median == pytest.approx(20.7)
    plain = build_row(PathSpec("direct"), Condition(50.0, 0, "loopback", False), runs, None)
    assert plain.first_token_ms_median is None  # without reasoning it is TTFT: not repeated


def test_older_files_read_with_nothing_sent_before_the_first_token() -> None:
    # Schema 5 gained these with defaults (no bump): a row written before them reads as "off".
    row = matrix_row({"proxy": "direct", "variant": "stock", "interval_ms": 50, "frame_bytes": 60,
                      "link": "loopback", "tls": False, "runs": 1, "excluded": 0, "verdict": "x"})  # fmt: skip
    c = row.condition
    assert (c.heartbeat_ms, c.reasoning_tokens, c.first_event_bytes, c.head_at) == (0, 0, 0, "start")
    assert row.first_token_ms_median is None
    assert row.ttfb_ms_median is None
    assert SCHEMA_VERSION >= 5
    doc = {"schema_version": 5, "kind": "matrix", "tool": {"name": "tokenpath", "version": "0"}, "created": "",
           "host": {"hostname": "h", "kernel": "k", "os": "o", "machine": "m", "cpus": 1, "python": "3"},
           "experiment": {}, "rows": [{"proxy": "direct", "variant": "stock", "interval_ms": 50, "frame_bytes": 60,
                                       "link": "loopback", "tls": False, "runs": 1, "excluded": 0, "verdict": "x",
                                       "reasoning_tokens": 8}]}  # fmt: skip
    (read,) = from_json(doc).rows  # type: ignore[union-attr]
    assert read.condition.reasoning_tokens == 8


def test_the_tables_show_what_the_stub_sent_and_the_first_token_where_rows_vary_them() -> None:
    from tokenpath.report.tables import headers_for, varying_columns

    cond = replace(Condition(50.0, 0, "loopback", False), reasoning_tokens=4, head_at="first-token")
    runs = [_run(20.5, 20.6, 220.0)]
    rows = [build_row(PathSpec("direct"), c, runs, None) for c in (Condition(50.0, 60, "loopback", False), cond)]
    assert headers_for(rows[:1]) == headers_for([])  # nothing sent before the first token: the table as it was
    columns = dict(varying_columns(rows))
    pre = columns["pre-token (stub sent before the first token)"]
    first = columns["first-token ms (reasoning or content; TTFT is content)"]
    assert [pre(r) for r in rows] == ["-", "r4 head@token"]
    assert [first(r) for r in rows] == ["-", "20.6"]
