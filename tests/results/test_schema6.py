"""Schema 6: the client's HTTP version on matrix conditions, rows and runs and on load rows, with the HTTP/2 load
figures; a version-5 file still loads as HTTP/1.1 and renders without the HTTP/2 columns."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tokenpath.report import load_table, page, tables
from tokenpath.results import model
from tokenpath.results.model import FlowControlStalls, LoadResults, MatrixResults, from_json, migrate
from tokenpath.wire.httpversion import HttpVersion

DATA = Path(__file__).parents[1] / "report" / "data"


def _as_v5(kind: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((DATA / kind / "results.json").read_text())
    raw = migrate(raw)
    raw["schema_version"] = 5
    for row in raw.get("levels") or raw.get("rows") or []:
        row.pop("http_version", None)
        for run in row.get("raw") or []:
            run.pop("http_version", None)
    for cond in (raw.get("experiment") or {}).get("conditions") or []:
        cond.pop("client_http", None)
    return raw


def test_a_version_5_matrix_reads_as_http_1_1_everywhere() -> None:
    raw = _as_v5("matrix")
    out = migrate(raw)
    assert out["schema_version"] == model.SCHEMA_VERSION  # and on: 5 -> 6 -> 7
    assert {c["client_http"] for c in out["experiment"]["conditions"]} == {"1.1"}
    assert {r["http_version"] for r in out["rows"]} == {"1.1"}
    assert {run["http_version"] for r in out["rows"] for run in r["raw"]} == {"1.1"}
    assert all("http_version" not in r for r in raw["rows"])  # the input is not modified
    results = from_json(raw)
    assert isinstance(results, MatrixResults)
    assert results.provenance.schema_version == 5
    assert not any(name.startswith("HTTP") for name, _ in tables.varying_columns(results.rows))


def test_a_version_5_load_file_loads_and_renders_without_the_http2_columns(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(_as_v5("load")))
    results = model.read(tmp_path)
    assert isinstance(results, LoadResults)
    assert {(r.http_version, r.flow_control_stalls, r.connections) for r in results.levels} == {("1.1", None, None)}
    assert "DATA frames/read" not in load_table.markdown(results)
    assert "DATA frames/read" not in page.page(results)


def test_http2_load_rows_round_trip_and_show_their_columns(tmp_path: Path) -> None:
    results = from_json(json.loads((DATA / "load" / "results.json").read_text()))
    assert isinstance(results, LoadResults)
    stalls = FlowControlStalls(streams=50, stalled_streams=7, stalls=9, stall_ms_p50=0.0, stall_ms_p99=12.5)
    h2 = replace(results.levels[0], http_version=HttpVersion.HTTP2, streams_per_connection=50, connections=5,
                 connection_split="the peer allows 10 streams per connection: 5 connections of 10",
                 flow_control_stalls=stalls, data_frames_per_read=1.25)  # fmt: skip
    config = {**results.config, "http_version": "2", "streams_per_connection": 50, "h2_window": "browser"}
    results = replace(results, levels=(h2, *results.levels[1:]), config=config)
    model.write(results, tmp_path)
    again = model.read(tmp_path)
    assert isinstance(again, LoadResults)
    assert again.levels[0] == h2
    md = load_table.markdown(again)
    assert "| 2, 50/conn, 5 conns | 7/50, 12.5 | 1.25 |" in md
    html = page.page(again)
    assert "DATA frames/read" in html
    assert "HTTP/2, 50 streams per connection, receive windows browser" in html
    (line, *_) = csv.DictReader(io.StringIO(load_table.csv_text(again)))
    assert (line["http_version"], line["connections"], line["flow_control_stall_ms_p99"]) == ("2", "5", "12.5")


def test_an_http2_matrix_row_gets_its_column() -> None:
    results = from_json(json.loads((DATA / "matrix" / "results.json").read_text()))
    assert isinstance(results, MatrixResults)
    first = results.rows[0]
    rows = [first, replace(first, condition=replace(first.condition, http_version=HttpVersion.HTTP2))]
    (column,) = [c for c in tables.varying_columns(rows) if c[0].startswith("HTTP")]
    assert [column[1](r) for r in rows] == ["1.1", "2"]
    assert model.condition_label(rows[1]) == model.condition_label(rows[0]) + ", HTTP/2"
