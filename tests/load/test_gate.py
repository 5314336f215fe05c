"""`load --fail-on`: the monitor's rule syntax over a load run's rows, exit 14 when one is breached."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpath.errors import InstrumentError, RuleBreached, UsageError
from tokenpath.load.gate import check, finish, parse_load_rules, refuse_no_floor
from tokenpath.load.runner import new_histogram
from tokenpath.monitor.rules import parse_rules
from tokenpath.results.model import LoadResults, LoadRow, Provenance


def _row(target: str, added_us: list[int], lost: int = 0, errors: int = 0) -> LoadRow:
    hist = new_histogram()
    for v in added_us:
        hist.record_value(v)
    encoded = hist.encode().decode() if added_us else None
    return LoadRow(level=50, target=target, streams=len(added_us), errors=errors, frames_lost=lost,
                   histogram=encoded, streams_total=len(added_us) + errors)  # fmt: skip


def _results(*rows: LoadRow) -> LoadResults:
    return LoadResults(provenance=Provenance.now("load"), config={"loop": "closed"}, levels=rows)


def test_the_issue_rules_parse_and_unknown_metrics_name_the_known_ones() -> None:
    ttft, lost = parse_load_rules("added_ttft_p99>5ms,frames_lost>0")
    assert (ttft.base, ttft.percentile) == ("added_ttft", 99.0)
    assert ttft.threshold == pytest.approx(0.005)
    assert (lost.metric, lost.threshold) == ("frames_lost", 0)
    assert parse_load_rules("error_rate>1%")[0].threshold == pytest.approx(0.01)
    with pytest.raises(UsageError, match=r"unknown metric 'latency'; known: added_ttft_pNN, frames_lost, "):
        parse_load_rules("latency_p99>5ms")
    with pytest.raises(UsageError, match="unknown metric 'frames_lost'"):
        parse_rules("frames_lost>0")  # the monitor's vocabulary is its own
    assert parse_rules("fpr>1.5")[0].metric == "fpr"


def test_rules_are_checked_on_every_target_but_the_direct_floor() -> None:
    rules = parse_load_rules("added_ttft_p99>5ms,frames_lost>0,error_rate>10%")
    results = _results(
        _row("direct", [9000] * 10),  # the floor is not gated when a target is there
        _row("nginx", [1000] * 10),
        _row("haproxy", [1000] * 9 + [200_000], lost=3),
    )
    breaches = check(rules, results)
    assert [(b.target, b.rule.metric) for b in breaches] == [("haproxy", "added_ttft_p99"), ("haproxy", "frames_lost")]
    assert breaches[0].line() == "added_ttft_p99>5ms breached on haproxy @ 50: 200.1 ms"
    with pytest.raises(RuleBreached, match=r"also: frames_lost>0 breached on haproxy @ 50: 3\.00") as info:
        finish(breaches)
    assert info.value.exit_code == 14
    finish([])  # nothing breached: no exit


def test_a_row_with_nothing_measured_breaches_and_one_without_a_process_skips_cpu() -> None:
    results = _results(_row("direct", [500]), _row("gw", [], errors=5))
    breached = check(parse_load_rules("added_ttft_p50>1s,cpu_cores>2"), results)
    assert [(b.target, b.rule.metric, b.value) for b in breached] == [("gw", "added_ttft_p50", None)]
    assert check(parse_load_rules("added_ttft_p99>1ms"), _results(_row("direct", [5000])))[0].target == "direct"
    (empty,) = check(parse_load_rules("frames_lost>0"), _results())  # interrupted before any row
    assert empty.line() == "frames_lost>0 breached on every target @ every level: nothing measured"


def test_a_direct_path_whose_streams_failed_is_the_instrument_s_failure_and_names_every_such_level() -> None:
    failed = LoadRow(level=100, target="direct", streams=0, errors=3, audit_failed=1, excluded=5, streams_total=5,
                     error_samples=("connect: refused\x1b[2J\n  also: a line of the peer's",))  # fmt: skip
    # every stream ended (`streams` counts them) but none was kept: each missed the stub's audit or was not joined
    unjoined = LoadRow(level=200, target="direct", streams=2, kept=0, unjoined=2, excluded=2, streams_total=2)
    doc = _results(_row("direct", [1_000]), failed, unjoined)
    with pytest.raises(InstrumentError) as caught:
        refuse_no_floor(doc)
    assert caught.value.exit_code == 20
    assert str(caught.value) == (
        "the direct path failed, so no target can be judged: direct @ 100: no stream kept of 5 started (3 failed, "
        "1 missed the stub's schedule, 1 left out of the figures); e.g. connect: refused\\x1b[2J\\n  also: a line "
        "of the peer's\n"
        "  also: direct @ 200: no stream kept of 2 started (2 unjoined)"
    )


def test_a_target_whose_streams_all_failed_is_a_finding_and_a_window_with_no_whole_stream_no_failure() -> None:
    """As in matrix and k6: the table says why, the gate (--fail-on) is what fails a run on it. A direct path that
    kept nothing because no stream fitted the window (none failed) is the configuration's, not the instrument's."""
    target = LoadRow(level=50, target="nginx", streams=0, errors=3, excluded=3, streams_total=3)
    short = LoadRow(level=50, target="direct", streams=0, streams_total=0, kept=0)
    crowded = LoadRow(level=80, target="direct", streams=4, kept=0, excluded=4, streams_total=4)  # a busy host's
    refuse_no_floor(_results(short, crowded, target))


def test_load_ends_with_exit_20_after_its_table_and_report_when_the_direct_path_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    import tokenpath.load.runner
    from tokenpath.cli import app
    from tokenpath.results.model import write

    failed = LoadRow(level=2, target="direct", streams=0, errors=2, excluded=2, streams_total=2,
                     error_samples=("HTTP 500: stub broke",))  # fmt: skip

    def run(self: object) -> LoadResults:
        doc = _results(failed)
        write(doc, tmp_path)
        return doc

    monkeypatch.setattr(tokenpath.load.runner.LoadRunner, "run", run)
    result = CliRunner().invoke(app, ["load", "--concurrency", "2", "--out", str(tmp_path)])
    assert result.exit_code == 20, result.output
    assert (
        "the direct path failed, so no target can be judged: direct @ 2: no stream kept of 2 started" in result.output
    )
    assert result.output.index("results:") < result.output.index("error:")  # the table and files first: nothing lost
