from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tokenpath.errors import UsageError
from tokenpath.results import schema, tables


def doc(certified: bool) -> dict[str, Any]:
    d = schema.new_document("matrix")
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
    schema.write(d, tmp_path)
    assert schema.read(tmp_path)["rows"] == d["rows"]
    d["schema_version"] = 99
    schema.write(d, tmp_path)
    with pytest.raises(UsageError, match="schema_version 99"):
        schema.read(tmp_path)
