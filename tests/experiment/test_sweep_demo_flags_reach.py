"""`tokenpath sweep` and `tokenpath demo`: the flags tests/experiment/test_cli_flags_reach.py leaves unasserted reach
what they run. sweep's --sizes and --intervals make the experiment's conditions handed to run_sweep, and its --out is
that call's results directory and the report's; demo's --runs reaches the experiment its MatrixRunner runs, its --out
that runner's directory and the report's, and its --json puts the results document on stdout. run_sweep, demo's
MatrixRunner and the report's writer are replaced by recorders (the runs return an empty results document): no stub,
no proxy, no process. Each value given differs from the flag's default, so a CLI that dropped the flag fails here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import tokenpath.demo
import tokenpath.experiment.sweep
import tokenpath.report.render
from tokenpath.cli import app
from tokenpath.experiment.grid import DEFAULT_INTERVALS, DEFAULT_SIZES
from tokenpath.experiment.spec import Experiment
from tokenpath.results.model import Certification, MatrixResults, Provenance


@dataclass(frozen=True, slots=True)
class Ran:
    """One experiment a recorder was handed, and the directory it was to write into."""

    exp: Experiment
    out_dir: Path


@pytest.fixture(autouse=True)
def reports(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories the report was written from (render_report's write_report), none written: in every test, so
    a CLI that rendered the default directory's report leaves it alone."""
    seen: list[Path] = []

    def write_report(result_dir: Path, *args: Any, **kwargs: Any) -> dict[str, Path]:
        seen.append(result_dir)
        return {fmt: result_dir / f"report.{fmt}" for fmt in ("html", "md", "csv")}

    monkeypatch.setattr(tokenpath.report.render, "write_report", write_report)
    return seen


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[Ran]:
    seen: list[Ran] = []

    def run_sweep(exp: Experiment, proxy: str, out_dir: Path, console: Console, force: bool = False) -> MatrixResults:
        seen.append(Ran(exp, out_dir))
        return MatrixResults(Provenance.now("sweep"), exp.to_json(), points=())

    monkeypatch.setattr(tokenpath.experiment.sweep, "run_sweep", run_sweep)
    return seen


def sweep(sweeps: list[Ran], *args: str) -> tuple[Ran, str]:
    out = CliRunner().invoke(app, ["sweep", "haproxy", *args])
    assert out.exit_code == 0, out.output
    assert len(sweeps) == 1
    return sweeps[0], out.stdout


def test_sweep_sizes_and_intervals_make_the_conditions(sweeps: list[Ran], tmp_path: Path) -> None:
    ran, _ = sweep(sweeps, "--sizes", "100,3000", "--intervals", "7,30", "--out", str(tmp_path))
    assert not {100, 3000} & set(DEFAULT_SIZES)  # so a CLI that kept the defaults fails
    assert not {7.0, 30.0} & set(DEFAULT_INTERVALS)
    asked = {(c.frame_bytes, c.interval_ms) for c in ran.exp.conditions}
    assert asked == {(100, 7.0), (3000, 7.0), (100, 30.0), (3000, 30.0)}


def test_sweep_out_is_the_runs_and_the_reports_directory(
    sweeps: list[Ran], reports: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "swept"
    ran, _ = sweep(sweeps, "--sizes", "60", "--intervals", "50", "--out", str(out))  # the default: out/sweep
    assert ran.out_dir == out
    assert reports == [out]


def test_sweep_refuses_sizes_that_are_not_numbers(sweeps: list[Ran], tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["sweep", "haproxy", "--sizes", "60,big", "--out", str(tmp_path)])
    assert out.exit_code == 2, out.output
    assert "--sizes and --intervals" in out.output
    assert not sweeps  # refused before anything ran


@pytest.fixture
def demos(monkeypatch: pytest.MonkeyPatch) -> list[Ran]:
    seen: list[Ran] = []

    class Recorder:
        def __init__(self, exp: Experiment, out_dir: Path, *, force: bool = False, console: Any = None) -> None:
            self.exp = exp
            seen.append(Ran(exp, out_dir))

        def run(self) -> MatrixResults:
            certified = Certification(passed=True)  # else the demo exits 1 whatever its flags
            return MatrixResults(Provenance.now("matrix"), self.exp.to_json(), certification=certified)

    monkeypatch.setattr(tokenpath.demo, "MatrixRunner", Recorder)
    return seen


def demo(demos: list[Ran], *args: str) -> tuple[Ran, str]:
    out = CliRunner().invoke(app, ["demo", *args])
    assert out.exit_code == 0, out.output
    assert len(demos) == 1
    return demos[0], out.stdout


def test_demo_runs_reach_the_experiment(demos: list[Ran], tmp_path: Path) -> None:
    ran, _ = demo(demos, "--runs", "5", "--out", str(tmp_path))
    assert ran.exp.runs == 5  # the default: 3


def test_demo_out_is_the_runs_and_the_reports_directory(demos: list[Ran], reports: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "demoed"
    ran, _ = demo(demos, "--out", str(out))  # the default: out/demo
    assert ran.out_dir == out
    assert reports == [out]


def test_demo_json_prints_the_document_on_stdout(demos: list[Ran], tmp_path: Path) -> None:
    ran, stdout = demo(demos, "--out", str(tmp_path), "--json")
    doc = json.loads(stdout)  # the document only: the table and the rest went to stderr
    assert doc["kind"] == "matrix"
    assert doc["experiment"]["runs"] == ran.exp.runs
