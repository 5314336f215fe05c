"""diagnose/limits.py's table and JSON: a silence cut only past what the total limit lets through is shown as the
total's (PathLimits.explained_by_total, the rule cuts.path_cuts names the cuts by), not as an idle limit of its own."""

from __future__ import annotations

from tokenpath.diagnose.cuts import Limit, path_cuts
from tokenpath.diagnose.limits import EXPLAINED_BY_TOTAL, LimitFound, Measure, PathLimits, SurveyConfig, table_rows

CFG = SurveyConfig(("http://x",), min_s=1, max_s=10, resolution_s=1)


def total_only() -> PathLimits:
    first = LimitFound(Measure.FIRST_BYTE, 5.504, 6.504, None, 5)
    mid = LimitFound(Measure.MID_STREAM, 5.504, 6.504, None, 5)
    total = LimitFound(Measure.TOTAL, 5.504, 6.504, None, 5)
    return PathLimits("http://x", (first, mid, total), None)


def test_silences_the_total_limit_cut_are_shown_as_the_totals() -> None:
    header, rows = table_rows([total_only()], CFG)
    cells = dict(zip(header, rows[0], strict=True))
    assert cells["silence before the first byte"] == EXPLAINED_BY_TOTAL
    assert cells["silence mid-stream"] == EXPLAINED_BY_TOTAL
    assert cells["total length"].startswith("5.504 s survived, 6.504 s cut")
    assert [n.limit for n in path_cuts(total_only())] == [Limit.TOTAL]  # the same rule names the cuts


def test_the_json_marks_them() -> None:
    limits = {entry["measure"]: entry for entry in total_only().to_json()["limits"]}
    assert limits["first_byte"]["explained_by_total"] is True
    assert limits["mid_stream"]["explained_by_total"] is True
    assert limits["total"]["explained_by_total"] is False


def test_an_idle_limit_under_the_total_is_its_own() -> None:
    mid = LimitFound(Measure.MID_STREAM, 2.0, 3.0, None, 5)
    total = LimitFound(Measure.TOTAL, 5.504, 6.504, None, 5)
    path = PathLimits("http://x", (mid, total), None)
    header, rows = table_rows([path], SurveyConfig(("http://x",), measures=(Measure.MID_STREAM, Measure.TOTAL)))
    assert rows[0][header.index("silence mid-stream")].startswith("2 s survived, 3 s cut")
    assert path.to_json()["limits"][0]["explained_by_total"] is False
