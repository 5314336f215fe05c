from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tokenpath.errors import UsageError
from tokenpath.report import tables
from tokenpath.results import model
from tokenpath.results.model import Provenance, from_json


def raw_doc(certified: bool) -> dict[str, Any]:
    d: dict[str, Any] = {"schema_version": model.SCHEMA_VERSION, **model._document(Provenance.now("matrix"))}
    d.update(
        experiment={"name": "t", "exclusion": {"rule": "a rule"}}, certification={"passed": certified}, skipped=[],
        proxies={"nginx": {"version": "1.22.1"}},
        rows=[{"proxy": "nginx", "variant": "stock", "interval_ms": 50.0, "frame_bytes": 60, "link": "loopback",
               "tls": False, "runs": 3, "excluded": 1, "fpr_median": 40.0, "fpr_min": 40.0, "fpr_max": 40.0,
               "added_ttft_ms_median": 1950.0, "added_ttft_ms_p90": 1951.0, "modal_burst": 40,
               "modal_burst_gap_ms": None, "arrivals_median": 1, "within_floor": False,
               "verdict": "buffers the whole response"}],
    )  # fmt: skip
    return d


def doc(certified: bool) -> model.MatrixResults:
    results = from_json(raw_doc(certified))
    assert isinstance(results, model.MatrixResults)
    return results


def test_markdown_and_csv_carry_every_row() -> None:
    md = tables.markdown(doc(True))
    assert "| nginx | 60 B @ 50 ms, loopback | 40.00 |" in md
    assert "2/3" in md
    assert "a rule" in md
    rows = list(csv.DictReader(io.StringIO(tables.csv_text(doc(True)))))
    assert rows[0]["fpr_median"] == "40.0"
    assert rows[0]["excluded"] == "1"


def test_uncertified_runs_say_so_in_the_title() -> None:
    assert tables.markdown(doc(False)).startswith("# UNCERTIFIED:")
    out = io.StringIO()
    Console(file=out, width=80).print(tables.rich_table(doc(False)))
    assert "UNCERTIFIED" in out.getvalue()
    assert "buffers all" in out.getvalue()


def test_schema_round_trip_and_unknown_version(tmp_path: Path) -> None:
    d = doc(True)
    model.write(d, tmp_path)
    assert model.read(tmp_path) == d
    raw = d.to_json()
    raw["schema_version"] = 99
    (tmp_path / "results.json").write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="schema_version 99"):
        model.read(tmp_path)


def test_every_condition_states_its_exclusion_share() -> None:
    d = raw_doc(True)
    d["rows"].append({**d["rows"][0], "proxy": "direct", "excluded": 0, "interval_ms": 14.0})
    results = from_json(d)
    assert isinstance(results, model.MatrixResults)
    md = tables.markdown(results)
    assert "- 60 B @ 50 ms, loopback: 1 of 3 runs excluded (33.3 %)" in md
    assert "- 60 B @ 14 ms, loopback: 0 of 3 runs excluded (0.0 %)" in md  # a zero share is stated too
    assert "- all: 1 of 6 runs excluded (16.7 %)" in md


def test_a_load_row_shows_kept_of_total_even_below_one_percent() -> None:
    from tokenpath.report import load_table

    row = model.load_row({
        "level": 50, "target": "nginx", "streams": 999, "streams_total": 1000, "kept": 996, "excluded": 4,
        "exclusion_share": 0.004, "errors": 1, "added_ttft_ms": {"p50": 1.0, "p99": 2.0, "p999": 3.0},
        "cpu_cores": 0.1, "rss_mb": 10.0, "warnings": [], "frames_lost": 0, "frames_out_of_order": 0,
    })  # fmt: skip
    cells = load_table.figures(row)
    assert cells[-1] == "996/1000 (0.4 % excl.)"  # n is the kept streams, never the excluded ones
    assert load_table.headers(False)[-1] == "kept/total"


def test_rows_against_a_real_endpoint_say_there_was_no_stub_audit() -> None:
    raw = raw_doc(True)
    raw["experiment"]["upstream"] = {"origin": "https://api.example.com", "model": "m", "note": "no stub audit ..."}
    raw["rows"][0].update(endpoint="endpoint https://api.example.com", ttft_ms_median=512.0)
    results = from_json(raw)
    assert isinstance(results, model.MatrixResults)
    md = tables.markdown(results)
    assert "Upstream https://api.example.com (model m): no stub audit" in md
    assert "| nginx | endpoint https://api.example.com, loopback | 40.00 | 40.00-40.00 | 512.0 |" in md
    assert "1950.0 / 1951.0 vs direct" in md
    assert "endpoint https://api.example.com" in tables.csv_text(results)
    console = Console(width=100, record=True)
    console.print(tables.rich_table(results))
    assert "no stub audit" in console.export_text()


def test_seen_as_names_a_held_start_as_diagnose_does() -> None:
    """Issue 35: Traefik 3.3.2's compress as a browser, 60 B frames every 50 ms: the first 17 held (+852 ms), then
    each alone. The matrix called it "bursts of 1"; diagnose/shape.py, which both read, names it."""
    import dataclasses

    from tokenpath.diagnose.shape import seen

    writes = tuple(50.0 * k for k in range(60))
    arrivals = ((852.0, 17), *((50.0 * k + 0.5, 1) for k in range(17, 60)))
    held = model.MatrixRun("tp-1", True, None, None, 852.0, {}, None, arrivals, writes, None)
    row = dataclasses.replace(
        doc(True).rows[0], fpr_median=2.31, arrivals_median=44, modal_burst=1, raw=(held, held, held)
    )
    assert tables.seen_as(row) == "holds the first 1020 B"
    label = seen([n for _, n in arrivals], [t for t, _ in arrivals], writes, [n * 60 for _, n in arrivals]).label()
    assert label == tables.seen_as(row)  # one classifier
    whole = model.MatrixRun("tp-2", True, None, None, 1950.0, {}, None, ((2950.0, 60),), writes, None)
    assert tables.seen_as(dataclasses.replace(row, raw=(whole,))) == "buffers all"


def test_the_terminal_table_explains_its_short_headers() -> None:
    out = io.StringIO()
    Console(file=out, width=100).print(tables.rich_table(doc(True)))
    text = " ".join(out.getvalue().split())
    assert "+TTFT ms: added TTFT, the first token's arrival - the stub's write of it" in text
    assert "fpr: frames per read" in text


def test_the_legend_says_how_added_ttft_was_computed_for_these_rows() -> None:
    def legend(results: model.MatrixResults) -> str:
        out = io.StringIO()
        Console(file=out, width=400).print(tables.rich_table(results))
        return " ".join(out.getvalue().split())

    stub = doc(True)
    assert tables.ADDED_TTFT_WORDS["paired"] not in legend(stub)
    raw = raw_doc(True)
    raw["experiment"]["upstream"] = {"origin": "http://127.0.0.1:1", "model": "m", "note": "n", "kind": "llama-server"}
    raw["rows"][0].update(endpoint="origin llama-server")
    started = from_json(raw)
    assert isinstance(started, model.MatrixResults)
    said = legend(started)
    assert "the mean of the two direct streams' around it" in said
    assert "the stub's write of it" not in said  # no stub write was joined in a real origin's rows
    mixed = model.MatrixResults(started.provenance, started.experiment, rows=(*stub.rows, *started.rows))
    both = legend(mixed)
    assert f"rows on the stub, {tables.ADDED_TTFT_WORDS['stub']}" in both
    assert f"rows on the started origin, {tables.ADDED_TTFT_WORDS['paired']}" in both
    raw["experiment"]["upstream"].pop("kind")
    endpoint = from_json(raw)
    assert isinstance(endpoint, model.MatrixResults)
    assert tables.ADDED_TTFT_WORDS["round"] in legend(endpoint)


def test_the_reports_verdict_legend_says_the_same_of_a_started_origins_rows() -> None:
    from tokenpath.report import headline, page

    raw = raw_doc(True)
    raw["experiment"]["upstream"] = {"origin": "http://127.0.0.1:1", "model": "m", "note": "n", "kind": "llama-server"}
    raw["rows"][0].update(endpoint="origin llama-server")
    started = from_json(raw)
    assert isinstance(started, model.MatrixResults)
    said = headline.meaning(headline.TTFT_COLUMN, started)
    assert said == f"added TTFT: {tables.ADDED_TTFT_WORDS['paired']}, over the kept runs"
    assert page.esc(said) in "".join(page.answer_block(started))
    assert headline.meaning(headline.TTFT_COLUMN, doc(True)) == headline.TTFT_COLUMN.meaning
