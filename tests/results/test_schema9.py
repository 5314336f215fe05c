"""Schema 9 (issue 37): a matrix row carries which origin behaviour made its verdict (against which plain row) and a
started origin's paired-run figures; a version-8 file still loads (neither known), and the report, its Markdown and
results.csv show both."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tokenpath.axes import DEFAULT_CONDITION
from tokenpath.errors import UsageError
from tokenpath.report import page, tables
from tokenpath.results import model
from tokenpath.results.model import Attribution, MatrixResults, Paired, from_json, migrate

DATA = Path(__file__).parents[1] / "report" / "data"
CREDIT = Attribution(
    streams=True,
    credited=("X-Accel-Buffering: no",),
    baseline="nginx:ignore_x_accel (60 B @ 50 ms, loopback)",
    words="streams because the origin sends X-Accel-Buffering: no (held with a plain origin)",
    origin="stub as llama-cpp-python",
)
PAIRED = Paired(
    kept=8,
    excluded=2,
    reasons={"origin unstable": 1, "token count differs": 1},
    added_ttft_ms=1.5,
    added_ttft_ms_low=0.5,
    added_ttft_ms_high=2.5,
    confidence=0.93,
    added_gap_ms=0.2,
    added_max_gap_ms=3.0,
    directs=11,
    origin_ttft_ms=41.0,
    origin_ttft_ms_low=38.0,
    origin_ttft_ms_high=60.0,
    origin_gap_ms=21.0,
    origin_gap_ms_low=20.0,
    origin_gap_ms_high=25.0,
)


def _results() -> MatrixResults:
    results = from_json(json.loads((DATA / "matrix" / "results.json").read_text()))
    assert isinstance(results, MatrixResults)
    return results


def _with_origin_figures() -> MatrixResults:
    results = _results()
    rows = list(results.rows)
    rows[1] = replace(rows[1], attribution=CREDIT, pairing=PAIRED)
    return replace(results, rows=tuple(rows))


def test_a_version_8_file_knows_neither() -> None:
    raw: dict[str, Any] = migrate(json.loads((DATA / "matrix" / "results.json").read_text()))
    raw["schema_version"] = 8
    for row in raw["rows"]:
        row.pop("attribution", None)
        row.pop("pairing", None)
    out = migrate(raw)
    assert out["schema_version"] == model.SCHEMA_VERSION == 9
    assert all(row["attribution"] is None and row["pairing"] is None for row in out["rows"])
    results = from_json(raw)
    assert isinstance(results, MatrixResults)
    assert all(r.attribution is None and r.pairing is None for r in results.rows)
    assert tables.ATTRIBUTION_TITLE not in tables.markdown(results)
    assert tables.PAIRING_TITLE not in tables.markdown(results)


def test_attribution_and_pairing_round_trip(tmp_path: Path) -> None:
    results = _with_origin_figures()
    model.write(results, tmp_path)
    again = model.read(tmp_path)
    assert isinstance(again, MatrixResults)
    assert again.rows[1].attribution == CREDIT
    assert again.rows[1].pairing == PAIRED
    assert again.rows[0].attribution is None
    assert again.rows[0].pairing is None
    assert again.rows == results.rows


def test_the_report_shows_them() -> None:
    results = _with_origin_figures()
    label = results.rows[1].path_label
    said = f"{label} (stub as llama-cpp-python): {CREDIT.words}; judged against {CREDIT.baseline}"
    md = tables.markdown(results)
    assert f"{tables.ATTRIBUTION_TITLE}:\n- {said}" in md
    cond = results.rows[1].condition.label
    assert f"- {cond}: the origin itself, over 11 direct streams: TTFT 41.0 ms [38.0, 60.0], gap 21.0 ms" in md
    assert (
        f"- {cond}: {label}: 8 pairs kept, 2 excluded; added TTFT +1.5 ms [0.5, 2.5] (93 %), added gap +0.2 ms "
        "(excluded: 1 x origin unstable, 1 x token count differs)" in md
    )
    html = page.page(results)
    assert f"<li>{page.esc(said)}</li>" in html
    assert page.esc(tables.PAIRING_TITLE) in html
    assert "8 pairs kept, 2 excluded" in html
    csv_rows = list(csv.DictReader(io.StringIO(tables.csv_text(results))))
    assert csv_rows[1]["attribution"] == CREDIT.words
    assert csv_rows[1]["attribution_credited"] == "X-Accel-Buffering: no"
    assert csv_rows[1]["attribution_baseline"] == CREDIT.baseline
    assert (csv_rows[1]["pairs_kept"], csv_rows[1]["pairs_excluded"]) == ("8", "2")
    assert csv_rows[1]["pairs_excluded_because"] == "origin unstable: 1; token count differs: 1"
    assert (csv_rows[1]["paired_added_ttft_ms"], csv_rows[1]["origin_ttft_ms"]) == ("1.5", "41.0")
    assert csv_rows[0]["attribution"] == ""
    assert csv_rows[0]["pairs_kept"] == ""


def test_a_plain_condition_row_is_not_credited() -> None:
    row = model.MatrixRow("nginx", "stock", DEFAULT_CONDITION, 3, 0, "v")
    assert tables.attribution_lines([row]) == []
    assert tables.pairing_lines([row]) == []


@pytest.mark.parametrize(
    "broken",
    [
        {"attribution": "streams because"},
        {"pairing": [8, 2]},
        {"attribution": {"streams": True, "credited": "X-Accel-Buffering: no", "baseline": "b", "words": "w"}},
        {"attribution": {"streams": True}},
    ],
)
def test_a_malformed_attribution_or_pairing_is_one_usage_error(tmp_path: Path, broken: dict[str, Any]) -> None:
    raw = json.loads(model.dumps(_with_origin_figures()))
    raw["rows"][1].update(broken)
    (tmp_path / "results.json").write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="not a tokenpath results document"):
        model.read(tmp_path)
