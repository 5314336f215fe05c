"""results.csv opened in a spreadsheet: a name that would begin a formula is text behind a single quote (OWASP's
rule for CSV injection); figures, negative ones too, stay numbers."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tokenpath.report import load_table, tables
from tokenpath.results.model import LoadResults, MatrixResults, ResultWarning, from_json

DATA = Path(__file__).parent / "data"
FORMULAS = ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"]


def matrix() -> MatrixResults:
    results = from_json(json.loads((DATA / "matrix" / "results.json").read_text()))
    assert isinstance(results, MatrixResults)
    return results


def load() -> LoadResults:
    results = from_json(json.loads((DATA / "load" / "results.json").read_text()))
    assert isinstance(results, LoadResults)
    return results


def first_row(text: str) -> dict[str, str]:
    return next(csv.DictReader(io.StringIO(text, newline="")))


@pytest.mark.parametrize("name", FORMULAS)
def test_a_matrix_name_that_begins_a_formula_is_text(name: str) -> None:
    results = matrix()
    row = replace(results.rows[0], proxy=name, variant=name, verdict=name, ends={name: 1})
    cells = first_row(tables.csv_text(replace(results, rows=(row,))))
    for key in ("proxy", "variant", "verdict"):
        assert cells[key] == "'" + name
    assert cells["ends"] == f"'{name}: 1"


@pytest.mark.parametrize("name", FORMULAS)
def test_a_load_target_and_warning_that_begin_a_formula_are_text(name: str) -> None:
    results = load()
    warning = ResultWarning(kind=name, message="m", remedy="r")
    level = replace(results.levels[0], target=name, warnings=(warning,))
    cells = first_row(load_table.csv_text(replace(results, levels=(level,))))
    assert cells["target"] == "'" + name
    assert cells["warnings"] == "'" + name


def test_figures_stay_numbers_negative_ones_too() -> None:
    results = matrix()
    row = replace(results.rows[0], added_ttft_ms_median=-0.3, fpr_min=-1.0, excluded=0)
    cells = first_row(tables.csv_text(replace(results, rows=(row,))))
    assert cells["added_ttft_ms_median"] == "-0.3"
    assert cells["fpr_min"] == "-1.0"
    assert cells["excluded"] == "0"
    assert cells["proxy"] == row.proxy  # a plain name as it was


def test_a_name_with_a_formula_sign_inside_stays_as_it_was() -> None:
    assert tables.csv_cell("nginx=stock") == "nginx=stock"
    assert tables.csv_cell(None) is None
    assert tables.csv_cell(True) is True
