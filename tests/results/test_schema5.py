"""Schema 5: the API format and the encodings on matrix conditions, rows and runs; older files migrate to
openai, no Accept-Encoding, identity."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tokenpath.axes import Condition
from tokenpath.results import model
from tokenpath.results.model import IDENTITY, MatrixResults, MatrixRow, condition_label, from_json, migrate
from tokenpath.wire.apis import Api

DATA = Path(__file__).parents[1] / "report" / "data"


def test_a_version_4_matrix_gains_the_format_and_encodings() -> None:
    raw: dict[str, Any] = {
        "schema_version": 4, "kind": "matrix",
        "experiment": {"conditions": [{"interval_ms": 50, "frame_bytes": 60}]},
        "rows": [{"proxy": "nginx", "raw": [{"stream_id": "s"}]}],
    }  # fmt: skip
    out = migrate(raw)
    assert out["schema_version"] == model.SCHEMA_VERSION  # and on: 4 -> 5 -> 6
    cond = out["experiment"]["conditions"][0]
    assert (cond["api"], cond["accept_encoding"]) == ("openai", IDENTITY)
    row = out["rows"][0]
    assert (row["api"], row["accept_encoding"], row["content_encoding"]) == ("openai", IDENTITY, IDENTITY)
    assert out["rows"][0]["raw"][0]["content_encoding"] == IDENTITY
    assert "api" not in raw["rows"][0]  # the input is not modified


def test_an_old_fixture_reads_as_openai_identity_and_round_trips_the_new_fields() -> None:
    results = from_json(json.loads((DATA / "matrix" / "results.json").read_text()))
    assert isinstance(results, MatrixResults)
    assert {(r.condition.api, r.condition.accept_encoding, r.content_encoding) for r in results.rows} == {
        ("openai", IDENTITY, IDENTITY)
    }
    assert {run.content_encoding for r in results.rows for run in r.raw} <= {IDENTITY}
    first = results.rows[0]
    asked = replace(first.condition, api=Api.ANTHROPIC, accept_encoding="gzip")
    row = replace(first, condition=asked, content_encoding="gzip")
    raw0 = replace(row.raw[0], content_encoding="gzip") if row.raw else None
    row = replace(row, raw=(raw0,) if raw0 else ())
    again = from_json(replace(results, rows=(row,)).to_json())
    assert isinstance(again, MatrixResults)
    got = again.rows[0]
    assert (got.condition.api, got.condition.accept_encoding, got.content_encoding) == ("anthropic", "gzip", "gzip")
    assert not got.raw or got.raw[0].content_encoding == "gzip"


def test_the_label_names_the_format_and_encoding_only_when_they_are_not_the_default() -> None:
    row = MatrixRow("nginx", "stock", Condition(50.0, 60, "loopback", False), 3, 0, "streams")
    assert condition_label(row) == "60 B @ 50 ms, loopback"
    other = replace(row, condition=replace(row.condition, frame_bytes=0, api=Api.BEDROCK, accept_encoding="gzip, br"))
    assert condition_label(other) == "unpadded @ 50 ms, loopback, bedrock, Accept-Encoding: gzip, br"
