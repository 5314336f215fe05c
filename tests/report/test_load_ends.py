"""The load table shows how streams ended (issue 36): an `ends` column in the terminal table, the Markdown and the
HTML report, only when a stream of some level did not end complete (as the matrix's and the probe's end column)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from tests.report.test_page import render
from tokenpath.report import load_table
from tokenpath.results.model import LoadResults, from_json

DATA = Path(__file__).parent / "data"


def cut_pass(doc: dict[str, Any]) -> None:
    """The fixture's levels ended complete, but the `pass` target's streams were cut silently or by an error."""
    for level in doc["levels"]:
        n = level.get("streams") or 4
        level["ends"] = (
            {"complete": n} if level["target"] != "pass" else {"complete": 1, "cut_silent": 2, "cut_error": 1}
        )


def results(edit: Any = None) -> LoadResults:
    doc = json.loads((DATA / "load" / "results.json").read_text())
    if edit is not None:
        edit(doc)
    loaded = from_json(doc)
    assert isinstance(loaded, LoadResults)
    return loaded


def terminal(doc: LoadResults) -> str:
    console = Console(width=400, record=True)
    console.print(load_table.rich_table(doc))
    return console.export_text()


def test_a_level_with_cut_streams_shows_how_each_ended() -> None:
    doc = results(cut_pass)
    assert "1 complete, 1 cut_error, 2 cut_silent" in terminal(doc)
    md = load_table.markdown(doc)
    assert " ends " in md.splitlines()[0]
    assert "1 complete, 1 cut_error, 2 cut_silent" in md


def test_no_ends_column_when_every_stream_ended_complete() -> None:
    def whole(doc: dict[str, Any]) -> None:
        for level in doc["levels"]:
            level["ends"] = {"complete": 3}

    assert " ends " not in terminal(results(whole))
    assert "ends" not in load_table.markdown(results(whole)).splitlines()[0]
    assert " ends " not in terminal(results())  # results that classified no end: nothing to show


def test_the_html_report_shows_them(tmp_path: Path) -> None:
    html = render(tmp_path, "load", cut_pass)
    assert "<th>ends</th>" in html
    assert "1 complete, 1 cut_error, 2 cut_silent" in html
