"""`load --fail-on`: the monitor's rule syntax over a load run's rows, exit 14 when one is breached."""

from __future__ import annotations

import pytest

from tokenpath.errors import RuleBreached, UsageError
from tokenpath.load.gate import check, finish, parse_load_rules
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
