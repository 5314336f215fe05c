"""The results model: old files migrate step by step, every kind round-trips, and what is written is the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenpath.errors import UsageError
from tokenpath.results import model
from tokenpath.results.model import LoadResults, MatrixResults, from_json, migrate

DATA = Path(__file__).parents[1] / "report" / "data"


@pytest.mark.parametrize("kind", ["matrix", "sweep", "load"])
def test_every_fixture_round_trips_through_the_model(kind: str) -> None:
    raw = json.loads((DATA / kind / "results.json").read_text())
    results = from_json(raw)
    assert results.kind == kind
    assert results.provenance.schema_version == raw["schema_version"]  # shown on the page: what the file said
    again = from_json(results.to_json())
    assert again.to_json() == results.to_json()
    assert results.to_json()["schema_version"] == model.SCHEMA_VERSION


def test_a_version_1_matrix_gains_what_version_2_and_3_added() -> None:
    raw = json.loads((DATA / "matrix" / "results.json").read_text())
    assert raw["schema_version"] == 1
    assert "stub_headers" not in raw["rows"][0]
    assert "exclusion_shares" not in raw
    results = from_json(raw)
    assert isinstance(results, MatrixResults)
    assert dict(results.rows[0].condition.stub_headers) == {}
    assert results.exclusion_shares[-1].label == "all"  # computed by the one rule for a file without them
    assert sum(s.runs for s in results.exclusion_shares[:-1]) == results.exclusion_shares[-1].runs
    written = results.to_json()
    for row in written["rows"]:  # version 3: every key of a row is present
        assert set(row) >= {"stub_headers", "fpr_min", "modal_burst_gap_ms", "raw", "within_floor"}


def test_migrations_run_in_order_and_do_not_touch_the_input() -> None:
    raw: dict[str, Any] = {"schema_version": 1, "kind": "matrix", "rows": [{"proxy": "x"}], "skipped": []}
    out = migrate(raw)
    assert out["schema_version"] == model.SCHEMA_VERSION
    assert out["rows"][0]["stub_headers"] == {}
    assert "stub_headers" not in raw["rows"][0]
    assert sorted(model.MIGRATIONS) == list(range(1, model.SCHEMA_VERSION))


def test_an_unknown_or_broken_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(UsageError, match="schema_version 99"):
        model.read(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"schema_version": 3, "kind": "load"}))
    with pytest.raises(UsageError, match="not a tokenpath results document"):
        model.read(tmp_path)
    (tmp_path / "results.json").write_text("[1, 2]")
    with pytest.raises(UsageError, match="not a tokenpath results document"):
        model.read(tmp_path)


def test_load_rows_are_typed_and_keep_their_warnings_and_remedies() -> None:
    results = from_json(json.loads((DATA / "load" / "results.json").read_text()))
    assert isinstance(results, LoadResults)
    warned = [r for r in results.levels if r.warnings]
    assert warned
    assert all(w.kind and w.message and w.remedy for r in warned for w in r.warnings)
    assert all(r.unreliable for r in warned)
    assert results.levels[0].added_ttft_ms.p50 is not None


def test_write_is_atomic_and_reads_back_equal(tmp_path: Path) -> None:
    results = from_json(json.loads((DATA / "sweep" / "results.json").read_text()))
    assert isinstance(results, MatrixResults)
    path = model.write(results, tmp_path)
    assert path.name == "results.json"
    assert not list(tmp_path.glob("*.tmp"))
    again = model.read(tmp_path)
    assert isinstance(again, MatrixResults)
    assert again.inferred == results.inferred
    assert again.points == results.points


def test_a_version_3_load_file_gains_one_level_and_still_loads_and_renders(tmp_path: Path) -> None:
    """Schema 4 made a load row's `concurrency` / `rate` pair one `level` with its `loop`."""
    from tokenpath.report import load_table, page

    raw = json.loads((DATA / "load" / "results.json").read_text())
    closed = migrate(raw)["levels"][0]
    v3 = {**raw, "schema_version": 3, "config": {**raw["config"], "loop": "open"}}
    v3["levels"] = [
        {**closed, "concurrency": 5, "rate": None, "target": "direct"},
        {**closed, "concurrency": None, "rate": 2.5, "target": "nginx"},
    ]
    for row in v3["levels"]:
        row.pop("level"), row.pop("loop")
    (tmp_path / "results.json").write_text(json.dumps(v3))
    results = model.read(tmp_path)
    assert isinstance(results, LoadResults)
    assert results.provenance.schema_version == 3
    assert [(r.level, r.loop, r.level_label) for r in results.levels] == [(5, "closed", "5"), (2.5, "open", "2.5/s")]
    written = results.to_json()["levels"]
    assert all("concurrency" not in r and "rate" not in r for r in written)
    assert [(r["level"], r["loop"]) for r in written] == [(5, "closed"), (2.5, "open")]
    assert "| 2.5/s | nginx |" in load_table.markdown(results)
    assert load_table.csv_text(results).splitlines()[1].startswith("5,closed,direct,")
    assert "2.5/s" in page.page(results)
