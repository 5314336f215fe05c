"""Load rows of schema 5 carry the streaming format and the encodings (asked, answered); an older load file reads as
OpenAI chat with no Accept-Encoding sent and identity answered, and a row built by the runner says what it saw."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tokenpath.load.runner import Cell, LoadConfig, _level_row
from tokenpath.results import model
from tokenpath.results.model import LoadResults, MedianAndTail, migrate
from tokenpath.wire.apis import Api

DATA = Path(__file__).parents[1] / "report" / "data"


def test_an_older_load_file_reads_as_openai_identity(tmp_path: Path) -> None:
    raw = json.loads((DATA / "load" / "results.json").read_text())
    assert raw["schema_version"] < 5
    doc = migrate(raw)
    assert all(
        (row["api"], row["accept_encoding"], row["content_encoding"]) == ("openai", "identity", "identity")
        for row in doc["levels"]
    )
    (tmp_path / "results.json").write_text(json.dumps(raw))
    results = model.read(tmp_path)
    assert isinstance(results, LoadResults)
    assert {(r.api, r.content_encoding) for r in results.levels} == {("openai", "identity")}


def test_a_row_records_the_format_and_the_encodings_it_saw() -> None:
    cfg = LoadConfig(targets=("direct",), levels=(5,), client_workers=1, api=Api.ANTHROPIC, accept_encoding="browser")
    assert cfg.accept_encoding == "gzip, deflate, br, zstd"
    cell = Cell("direct", 5, encodings=Counter({"gzip": 3, "identity": 1}))
    row = _level_row(cell, MedianAndTail(), cfg)
    assert (row.api, row.accept_encoding, row.content_encoding) == ("anthropic", cfg.accept_encoding, "gzip/identity")
    plain = _level_row(Cell("direct", 5), MedianAndTail(), LoadConfig(targets=("direct",), client_workers=1))
    assert (plain.api, plain.accept_encoding, plain.content_encoding) == ("openai", "identity", "identity")


def test_the_table_says_the_format_and_the_encodings() -> None:
    from rich.console import Console

    from tokenpath.report import load_table
    from tokenpath.results.model import LoadRow, Provenance

    row = LoadRow(level=5, target="relay", api="bedrock", accept_encoding="gzip", content_encoding="gzip")
    results = LoadResults(Provenance.now("load"), {}, levels=(row,))
    console = Console(width=250, record=True)
    console.print(load_table.rich_table(results))
    text = console.export_text()
    assert "--api bedrock, Accept-Encoding: gzip" in " ".join(text.split())  # the title wraps
    assert "answered gzip, decoded" in text
