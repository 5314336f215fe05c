"""Schema 8: how each stream ended (wire/ending.py) on matrix runs, `ends` on matrix rows and load levels; a
version-7 file still loads, its ends not known (never taken for complete), and renders without the ends column."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tokenpath.report import tables
from tokenpath.results import model
from tokenpath.results.model import LoadResults, MatrixResults, from_json, migrate
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd

DATA = Path(__file__).parents[1] / "report" / "data"
ENDS_COLUMN = "ends (runs by how their stream ended; a cut one is excluded)"


def _as_v7(kind: str) -> dict[str, Any]:
    raw: dict[str, Any] = migrate(json.loads((DATA / kind / "results.json").read_text()))
    raw["schema_version"] = 7
    for row in raw.get("levels") or raw.get("rows") or []:
        row.pop("ends", None)
        for run in row.get("raw") or []:
            run.pop("end", None)
    return raw


def test_a_version_7_file_has_no_ends_known() -> None:
    for kind in ("matrix", "load"):
        raw = _as_v7(kind)
        out = migrate(raw)
        assert out["schema_version"] == model.SCHEMA_VERSION  # and on: 7 -> 8 -> 9
        rows = out.get("levels") or out.get("rows")
        assert rows
        assert all(row["ends"] == {} for row in rows)
        assert all(run["end"] is None for row in rows for run in row.get("raw") or [])
    results = from_json(_as_v7("matrix"))
    assert isinstance(results, MatrixResults)
    assert not any(name == ENDS_COLUMN for name, _ in tables.varying_columns(results.rows))


def test_ends_round_trip_and_a_cut_shows_its_column(tmp_path: Path) -> None:
    results = from_json(json.loads((DATA / "matrix" / "results.json").read_text()))
    assert isinstance(results, MatrixResults)
    first = results.rows[0]
    end = StreamEnd(EndKind.CUT_SILENT, BodyEnd.CHUNKED, 60_012_000_000, 60_001_000_000, "no [DONE]")
    run = replace(first.raw[0], included=False, excluded_because="cut_silent: ...", end=end) if first.raw else None
    cut_row = replace(
        first, ends={"complete": 2, "cut_silent": 1}, raw=(run, *first.raw[1:]) if run is not None else first.raw
    )
    rows = (cut_row, *results.rows[1:])
    model.write(replace(results, rows=rows), tmp_path)
    again = model.read(tmp_path)
    assert isinstance(again, MatrixResults)
    assert again.rows[0].ends == {"complete": 2, "cut_silent": 1}
    if run is not None:
        assert again.rows[0].raw[0].end == end
    (column,) = [c for c in tables.varying_columns(again.rows) if c[0] == ENDS_COLUMN]
    assert column[1](again.rows[0]) == "2 complete, 1 cut_silent"
    whole = replace(first, ends={"complete": first.runs})
    assert tables.ends_cell(whole) == f"{first.runs}/{first.runs} complete"


def test_load_levels_carry_their_ends(tmp_path: Path) -> None:
    results = from_json(json.loads((DATA / "load" / "results.json").read_text()))
    assert isinstance(results, LoadResults)
    level = replace(results.levels[0], ends={"complete": 98, "cut_error": 2})
    model.write(replace(results, levels=(level, *results.levels[1:])), tmp_path)
    again = model.read(tmp_path)
    assert isinstance(again, LoadResults)
    assert again.levels[0].ends == {"complete": 98, "cut_error": 2}
