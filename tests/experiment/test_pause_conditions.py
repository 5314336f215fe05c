"""The mid-stream pause as matrix condition axes (`pause_ms`, `pause_after`): parsed into the grid (the place only
where there is a pause), labelled, refused against a real upstream, sent to the stub per stream, carried in rows and
their table, and kept by the Compose export: the axes are a registry entry, the rest reads it."""

from __future__ import annotations

import csv
import io
import tomllib

import pytest

from tokenpath.errors import UsageError
from tokenpath.experiment.compose import experiment_toml
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.rows import build_row
from tokenpath.experiment.spec import PathSpec, parse, stub_member, stub_pacing
from tokenpath.report.tables import csv_text, varying_columns
from tokenpath.results.model import MatrixResults, MatrixRow, Provenance, matrix_row
from tokenpath.stub.config import Pacing

AXES = {"pause_ms": [0, 5000], "pause_after": [1, 10]}


def test_a_pause_and_where_it_falls_are_axes_of_the_grid() -> None:
    exp = parse({"conditions": AXES})
    assert [(c.pause_ms, c.pause_after) for c in exp.conditions] == [(0.0, 1), (5000.0, 1), (5000.0, 10)]
    assert [c.label for c in exp.conditions] == [
        "60 B @ 50 ms, loopback",  # no pause: where it would fall is no condition of its own
        "60 B @ 50 ms, loopback, pause 5000 ms after token 1",
        "60 B @ 50 ms, loopback, pause 5000 ms after token 10",
    ]
    assert "pause_ms" not in exp.conditions[0].to_json()
    assert exp.conditions[2].to_json()["pause_after"] == 10


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ({"pause_after": [3]}, "pause_after: where a pause falls needs pause_ms > 0"),
        ({"pause_ms": [-1]}, r"pause_ms: -1 is not allowed"),
        ({"pause_ms": [5000], "pause_after": [0]}, "pause_after: 0 is not allowed"),
        ({"pause_ms": [4_000_000]}, "the stream would run"),  # past the stub's longest stream: the file fails
    ],
)
def test_a_pause_the_stub_cannot_make_fails_the_file(conditions: dict[str, list[int]], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse({"conditions": conditions})


def test_a_real_upstream_paces_its_own_silences() -> None:
    with pytest.raises(UsageError, match="pause_ms: the stub's pacing"):
        parse({"upstream": {"url": "http://127.0.0.1:9/v1", "model": "m"}, "conditions": {"pause_ms": [100]}})


def test_the_stub_is_asked_for_the_pause_per_stream_and_the_probe_waits_for_it() -> None:
    paused = parse({"conditions": {"pause_ms": [5000], "pause_after": [3]}}).conditions[0]
    member = stub_member(paused, 40, 20.0)
    assert (member["pause_ms"], member["pause_after"]) == (5000.0, 3)
    stub = Pacing(90.0, 14.0, 128).override(member)  # what the stub makes of the body's `tokenpath` member
    assert (stub.pause_ms, stub.pause_after, stub.interval_ms) == (5000.0, 3, 50.0)
    assert stub_pacing(paused, 40, 20.0).stream_ms == 20 + 40 * 50 + 5000  # the run's deadlines count it
    plain = parse({}).conditions[0]
    assert "pause_ms" not in stub_member(plain, 40, 20.0)  # a plain stream's member is as it was


def test_rows_carry_the_pause_and_the_table_shows_it() -> None:
    paused = parse({"conditions": {"pause_ms": [5000], "pause_after": [3]}}).conditions[0]
    rows = [build_row(PathSpec("direct"), c, [RunRecord("direct", "s", error="x")], None) for c in (paused,)]
    plain = build_row(PathSpec("direct"), parse({}).conditions[0], [RunRecord("direct", "s", error="x")], None)
    columns = dict(varying_columns([plain, *rows]))
    assert [columns["pause (stub silent mid-stream)"](r) for r in (plain, *rows)] == ["-", "5000ms after 3"]
    assert "pause" not in " ".join(name for name, _ in varying_columns([plain]))
    again = matrix_row(rows[0].to_json())
    assert again.condition == paused
    header, line = csv_text_lines(rows)
    assert dict(zip(header, line, strict=True))["pause_ms"] == "5000.0"


def csv_text_lines(rows: list[MatrixRow]) -> tuple[list[str], list[str]]:
    doc = MatrixResults(Provenance.now("matrix"), {"name": "x", "exclusion": {"rule": ""}}, rows=tuple(rows))
    header, line = list(csv.reader(io.StringIO(csv_text(doc))))
    return header, line


def test_the_compose_export_keeps_the_pause() -> None:
    exp = parse({"conditions": AXES, "proxy": [{"name": "nginx"}]})
    text = experiment_toml(exp, exp.conditions, [("nginx-stock", "http://nginx-stock:8080", "nginx (image)")])
    assert "pause_ms = [0.0, 5000.0]" in text
    inner = parse(tomllib.loads(text))
    assert inner.conditions == exp.conditions
