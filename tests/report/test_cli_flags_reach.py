"""`tokenpath report`'s flags reach the rendering: --compare puts the other run's figures beside this one's, --out
(write_report's `out_dir`) is where the files go, --screenshot hands the page written to the browser's screenshot
(replaced by a recorder: a real one needs Chromium, tests/report/test_browser.py takes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.report import browser
from tokenpath.report.render import write_report

DATA = Path(__file__).parent / "data"


def matrix_run(tmp_path: Path, name: str, added_ms: float = 0.0) -> Path:
    """A private copy of the matrix fixture; `added_ms` is added to the pass relay's added TTFT (another run)."""
    doc = json.loads((DATA / "matrix" / "results.json").read_text())
    for row in doc["rows"]:
        if row["proxy"] == "pass":
            row["added_ttft_ms_median"] += added_ms
            for r in row["raw"]:
                if r["path_added_ttft_ms"] is not None:
                    r["path_added_ttft_ms"] += added_ms
    out = tmp_path / name
    out.mkdir()
    (out / "results.json").write_text(json.dumps(doc))
    return out


def report(*args: str) -> None:
    out = CliRunner().invoke(app, ["report", *args], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output


def test_compare_reports_the_other_run_beside_this_one(tmp_path: Path) -> None:
    run, slower = matrix_run(tmp_path, "a"), matrix_run(tmp_path, "b", added_ms=50)
    report(str(run), "--format", "md", "--compare", str(slower))
    table = (run / "table.md").read_text()
    assert "## Compared" in table
    # B's figures are the --compare run's own: 50 ms more added TTFT through the pass relay.
    assert any(
        line.startswith("| pass") and "| added TTFT ms |" in line and "B higher" in line for line in table.splitlines()
    )


def test_out_is_where_the_files_are_written(tmp_path: Path) -> None:
    run = matrix_run(tmp_path, "a")
    elsewhere = tmp_path / "out" / "here"
    report(str(run), "--format", "md", "--format", "csv", "--out", str(elsewhere))
    assert sorted(p.name for p in elsewhere.iterdir()) == ["results.csv", "table.md"]
    assert [p.name for p in run.iterdir()] == ["results.json"]


def test_write_report_writes_to_out_dir(tmp_path: Path) -> None:
    run = matrix_run(tmp_path, "a")
    written = write_report(run / "results.json", formats=["md"], out_dir=tmp_path / "o")
    assert written == {"md": tmp_path / "o" / "table.md"}
    assert written["md"].read_text().startswith("# tokenpath matrix")
    assert not (run / "table.md").exists()


def test_screenshot_takes_the_page_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[tuple[Path, Path]] = []

    def screenshot(page: Path, png: Path, **_: Any) -> Path:
        taken.append((page, png))
        return png

    monkeypatch.setattr(browser, "screenshot", screenshot)
    run = matrix_run(tmp_path, "a")
    report(str(run), "--format", "html", "--screenshot", str(tmp_path / "shot.png"))
    assert taken == [(run / "report.html", tmp_path / "shot.png")]
    assert "<html" in taken[0][0].read_text()[:200].lower()
