from __future__ import annotations

import math
import re

import pytest

from tokenpath.errors import UsageError
from tokenpath.monitor.rules import MONITOR_METRICS, parse_rules


def test_rules_parse_with_units() -> None:
    added, fpr, ttft, share, pct = parse_rules("added_ttft_p95>50ms, fpr>1.5,ttft_p99>=2s,failure_rate>0.1,"
                                               "failure_rate>5%")  # fmt: skip
    assert (added.metric, added.op, added.threshold) == ("added_ttft_p95", ">", 0.05)
    assert (fpr.metric, fpr.threshold) == ("fpr", 1.5)
    assert (ttft.metric, ttft.op, ttft.threshold) == ("ttft_p99", ">=", 2.0)
    assert share.threshold == 0.1
    assert pct.threshold == 0.05
    assert parse_rules("gap_p50>20")[0].threshold == pytest.approx(0.02)  # a bare time is in ms
    assert parse_rules("ttft_p99.9<3s")[0].metric == "ttft_p99.9"


def test_a_rule_is_breached_past_its_threshold_and_when_nothing_was_measured() -> None:
    (rule,) = parse_rules("added_ttft_p95>50ms")
    assert rule.breached(0.051)
    assert not rule.breached(0.05)
    assert not rule.breached(0.01)
    assert rule.breached(None)
    assert rule.breached(math.nan)
    assert rule.shown(0.0512) == "51.2 ms"
    assert rule.shown(None) == "nothing measured"
    (low,) = parse_rules("fpr<=1")
    assert low.breached(1.0)
    assert not low.breached(1.2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft>1s", "takes a percentile"),
        ("ttft_p0>1s", "takes a percentile"),
        ("fpr_p50>1", "takes no percentile"),
        ("fpr>1ms", "plain number"),
        ("ttft_p95>5%", "ms or s"),
        ("failure_rate>3ms", "a share"),
        ("latency_p95>1s", "unknown metric 'latency'"),
        ("ttft_p95 = 1s", "expected METRIC>VALUE"),
        (" , ", "is empty"),
    ],
)
def test_bad_rules_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_rules(text)


@pytest.mark.parametrize(
    ("text", "hint"), [("failure_rate>10", "write 10% or 0.1"), ("failure_rate>=1.5", "write 1.5% or 0.015")]
)
def test_a_share_above_one_without_percent_is_refused_with_both_spellings(text: str, hint: str) -> None:
    with pytest.raises(UsageError, match=f"a share is at most 1; {re.escape(hint)}"):
        parse_rules(text)
    with pytest.raises(UsageError, match="at most 100%"):
        parse_rules("failure_rate>150%")
    assert parse_rules("failure_rate>1")[0].threshold == 1  # 100 %: the most a share is
    assert parse_rules("failure_rate>0.1")[0].threshold == pytest.approx(0.1)
    assert parse_rules("failure_rate>10%")[0].threshold == pytest.approx(0.1)


def test_a_load_share_above_one_is_refused_and_the_messages_give_the_gates_own_example() -> None:
    from tokenpath.load.gate import LOAD_METRICS

    with pytest.raises(UsageError, match=re.escape("'error_rate>5': a share is at most 1; write 5% or 0.05")):
        parse_rules("error_rate>5", LOAD_METRICS)
    for text in ("", "error_rate"):  # empty; not a rule
        with pytest.raises(UsageError) as info:
            parse_rules(text, LOAD_METRICS)
        assert "'ttft_p95" not in str(info.value)  # not a load metric
        assert "e.g. 'added_ttft_p95>50ms'" in str(info.value) or "e.g. added_ttft_p95>50ms" in str(info.value)
        parse_rules(LOAD_METRICS.sample, LOAD_METRICS)  # the example is one load takes
    parse_rules(MONITOR_METRICS.sample)
