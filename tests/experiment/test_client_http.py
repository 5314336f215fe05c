"""The `client_http` condition: parsed, labelled, carried to rows and runs (issue 25 §1)."""

from __future__ import annotations

import pytest

from tokenpath.errors import UsageError
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.rows import build_row
from tokenpath.experiment.spec import Condition, PathSpec, parse
from tokenpath.wire.httpversion import HttpVersion


def test_client_http_is_a_condition_axis_and_defaults_to_1_1() -> None:
    assert {c.http_version for c in parse({}).conditions} == {"1.1"}
    exp = parse({"conditions": {"client_http": ["1.1", "2"], "interval_ms": [14, 50]}})
    assert sorted((c.interval_ms, c.http_version) for c in exp.conditions) == [
        (14.0, "1.1"), (14.0, "2"), (50.0, "1.1"), (50.0, "2"),
    ]  # fmt: skip
    h2 = next(c for c in exp.conditions if c.http_version is HttpVersion.HTTP2)
    assert h2.label.endswith(", HTTP/2")  # rows and floors are matched by label: the two versions never mix
    assert "HTTP" not in next(c for c in exp.conditions if c.http_version is not HttpVersion.HTTP2).label
    assert h2.to_json()["client_http"] == "2"


@pytest.mark.parametrize(("value", "expected"), [(2, "2"), ("HTTP/2", "2"), (1.1, "1.1"), ("1.1", "1.1")])
def test_client_http_reads_numbers_and_http_names(value: object, expected: str) -> None:
    (cond,) = parse({"conditions": {"client_http": [value]}}).conditions
    assert cond.http_version == expected


@pytest.mark.parametrize("value", ["h2c", 1.0, True, ""])  # "3": test_client_http3.py
def test_a_client_http_that_is_not_1_1_or_2_is_refused(value: object) -> None:
    with pytest.raises(UsageError, match="client_http"):
        parse({"conditions": {"client_http": [value]}})


def test_client_http_against_a_real_upstream_is_a_condition_with_its_windows() -> None:
    upstream = {"url": "http://127.0.0.1:9/v1", "model": "m"}
    exp = parse({"upstream": upstream, "conditions": {"client_http": ["1.1", "2"], "h2_window": ["default", "browser"],
                                                      "tls": [False, True]}})  # fmt: skip
    assert sorted((c.tls, c.http_version, c.h2_window) for c in exp.conditions) == [
        (t, v, w) for t in (False, True) for v, w in (("1.1", "default"), ("2", "browser"), ("2", "default"))
    ]
    assert all(c.endpoint == "endpoint http://127.0.0.1:9" for c in exp.conditions)
    with pytest.raises(UsageError, match="need client_http"):  # windows without HTTP/2, as without an upstream
        parse({"upstream": upstream, "conditions": {"h2_window": ["browser"]}})


def test_rows_and_their_runs_carry_the_condition_http_version() -> None:
    cond = Condition(50.0, 60, "loopback", False, http_version=HttpVersion.HTTP2)
    row = build_row(PathSpec("direct"), cond, [RunRecord("direct", "s", error="x")], None)
    assert row.condition.http_version == "2"
    assert {run.http_version for run in row.raw} == {"2"}


def test_h2_window_is_an_axis_of_the_http2_conditions_only() -> None:
    exp = parse({"conditions": {"client_http": ["1.1", "2"], "h2_window": ["default", "browser"]}})
    assert sorted((c.http_version, c.h2_window) for c in exp.conditions) == [
        ("1.1", "default"), ("2", "browser"), ("2", "default"),
    ]  # fmt: skip
    browser = next(c for c in exp.conditions if c.h2_window == "browser")
    assert browser.label.endswith(", HTTP/2 (window browser)")
    assert browser.to_json()["h2_window"] == "browser"
    assert "h2_window" not in next(c for c in exp.conditions if c.http_version is not HttpVersion.HTTP2).to_json()
    (numeric,) = parse({"conditions": {"client_http": ["2"], "h2_window": [1048576]}}).conditions
    assert numeric.h2_window == "1048576"


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"h2_window": ["browser"]}, "need client_http"),
        ({"client_http": ["2"], "h2_window": ["huge"]}, "h2_window"),
    ],
)
def test_a_window_without_http2_or_that_is_not_one_is_refused(conditions: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse({"conditions": conditions})


def test_rows_carry_the_window_and_the_tables_show_it() -> None:
    from tokenpath.report.tables import varying_columns

    cond = Condition(50.0, 60, "loopback", False, http_version=HttpVersion.HTTP2, h2_window="browser")
    row = build_row(PathSpec("direct"), cond, [RunRecord("direct", "s", error="x")], None)
    assert row.condition.h2_window == "browser"
    (column,) = [c for c in varying_columns([row]) if c[0].startswith("HTTP")]
    assert column[1](row) == "2 (window browser)"
