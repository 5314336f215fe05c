"""A results.json larger than MAX_RESULTS_BYTES is refused by its size, before it is read: one line naming the file
and the limit, exit 2. Large files here are sparse (truncate): they take no disk and are never read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.errors import UsageError
from tokenpath.results import model

DATA = Path(__file__).parents[1] / "report" / "data"
FIVE_GB = 5 * 1024**3


def sparse(tmp_path: Path, name: str, size: int) -> Path:
    run = tmp_path / name
    run.mkdir()
    with (run / "results.json").open("wb") as f:
        f.truncate(size)
    return run


def test_a_5_gb_results_file_is_refused_by_its_size(tmp_path: Path) -> None:
    run = sparse(tmp_path, "huge", FIVE_GB)
    with pytest.raises(UsageError) as caught:
        model.read(run)
    said = str(caught.value)
    assert said == (
        f"{run / 'results.json'} is {FIVE_GB} bytes, past the {model.MAX_RESULTS_BYTES} byte (256 MiB) limit of a "
        "results file"
    )  # the file's own size: refused before a byte of it was read
    assert caught.value.exit_code == 2


def test_the_limit_is_well_above_a_real_results_file() -> None:
    biggest = max((DATA / kind / "results.json").stat().st_size for kind in ("matrix", "load", "sweep"))
    assert 1000 * biggest < model.MAX_RESULTS_BYTES


def test_a_file_at_the_limit_is_read_and_one_byte_more_is_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DATA / "matrix" / "results.json", run)
    size = (run / "results.json").stat().st_size
    monkeypatch.setattr(model, "MAX_RESULTS_BYTES", size)
    assert model.read(run).kind == "matrix"
    monkeypatch.setattr(model, "MAX_RESULTS_BYTES", size - 1)
    with pytest.raises(UsageError, match=f"is {size} bytes, past the {size - 1} byte"):
        model.read(run)


def test_what_is_no_regular_file_is_refused_unread(tmp_path: Path) -> None:
    """A character device has st_size 0 and no end (it was read up to the limit); a FIFO blocked the read."""
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo):
        with pytest.raises(UsageError, match=f"results file {path}: not a regular file"):
            model.read(path)


@pytest.mark.parametrize("compared", [False, True])
def test_tokenpath_report_and_compare_refuse_it_in_one_line(tmp_path: Path, compared: bool) -> None:
    huge = sparse(tmp_path, "huge", FIVE_GB)
    small = tmp_path / "small"
    small.mkdir()
    shutil.copy(DATA / "matrix" / "results.json", small)
    args = [str(small), "--compare", str(huge)] if compared else [str(huge)]
    out = CliRunner().invoke(app, ["report", *args, "--format", "md"], env={"COLUMNS": "400"})
    assert out.exit_code == 2, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 1, out.output
    assert f"{huge / 'results.json'} is {FIVE_GB} bytes" in lines[0]
    assert "256 MiB" in lines[0]
    assert not (small / "table.md").exists()
