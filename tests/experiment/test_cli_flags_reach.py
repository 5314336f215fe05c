"""`tokenpath matrix`, `tokenpath sweep` and `tokenpath demo`: the flags an audit found unasserted reach what they run.
matrix's --force reaches MatrixRunner (its `force`); sweep's --variant, --link, --tls, --runs, --frames, --sizes and
--intervals reach the experiment handed to run_sweep, its --force that call's `force`, its --out that call's results
directory and the report's, and its --json puts the results document on stdout; demo's --runs reaches the experiment
its MatrixRunner runs, its --out that runner's directory and the report's, and its --json puts the results document
on stdout. The runners are replaced by recorders that return an empty results document (and the report's writer,
where a test reads which directory it was given): no stub, no proxy, no process. Each value given differs from the
flag's default, so a CLI that dropped the flag fails here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import tokenpath.demo
import tokenpath.experiment.runner
import tokenpath.experiment.sweep
import tokenpath.report.render
from tests.helpers import invoked_once, tiny_experiment
from tokenpath.cli import app
from tokenpath.experiment.grid import DEFAULT_INTERVALS, DEFAULT_SIZES
from tokenpath.experiment.spec import Experiment
from tokenpath.results.model import Certification, MatrixResults, Provenance

EXPERIMENT = tiny_experiment("flags")


@dataclass
class Matrices:
    """What each MatrixRunner the command made was given."""

    forced: list[bool] = field(default_factory=list)


@pytest.fixture
def matrices(monkeypatch: pytest.MonkeyPatch) -> Matrices:
    seen = Matrices()

    class Recorder:
        def __init__(self, exp: Experiment, out_dir: Path, *, force: bool = False, console: Any = None) -> None:
            self.exp = exp
            seen.forced.append(force)

        def run(self) -> MatrixResults:
            return MatrixResults(Provenance.now("matrix"), self.exp.to_json())

    monkeypatch.setattr(tokenpath.experiment.runner, "MatrixRunner", Recorder)
    return seen


def matrix(tmp_path: Path, *args: str) -> None:
    experiment = tmp_path / "flags.toml"
    experiment.write_text(EXPERIMENT)
    out = CliRunner().invoke(app, ["matrix", str(experiment), "--out", str(tmp_path / "out"), *args])
    assert out.exit_code == 0, out.output


def test_matrix_force_reaches_the_runner(matrices: Matrices, tmp_path: Path) -> None:
    matrix(tmp_path, "--force")
    assert matrices.forced == [True]  # the default: False


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories the report was written from (render_report's write_report), none written."""
    seen: list[Path] = []

    def write_report(result_dir: Path, *args: Any, **kwargs: Any) -> dict[str, Path]:
        seen.append(result_dir)
        return {fmt: result_dir / f"report.{fmt}" for fmt in ("html", "md", "csv")}

    monkeypatch.setattr(tokenpath.report.render, "write_report", write_report)
    return seen


@dataclass(frozen=True, slots=True)
class Swept:
    exp: Experiment
    proxy: str
    console: Console
    force: bool
    out_dir: Path


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[Swept]:
    seen: list[Swept] = []

    def record(exp: Experiment, proxy: str, out_dir: Path, console: Console, force: bool = False) -> MatrixResults:
        seen.append(Swept(exp, proxy, console, force, out_dir))
        return MatrixResults(Provenance.now("sweep"), exp.to_json(), points=())

    monkeypatch.setattr(tokenpath.experiment.sweep, "run_sweep", record)
    return seen


def sweep(sweeps: list[Swept], tmp_path: Path, *args: str) -> tuple[Swept, str]:
    swept, stdout = invoked_once(
        sweeps, "sweep", "haproxy", "--sizes", "60", "--intervals", "50", "--out", str(tmp_path / "out"), *args
    )
    assert swept.proxy == "haproxy"
    return swept, stdout


def test_sweep_variant_reaches_the_experiment(sweeps: list[Swept], tmp_path: Path) -> None:
    swept, _ = sweep(sweeps, tmp_path, "--variant", "http_no_delay")  # the default: stock
    assert [(p.proxy, p.variant) for p in swept.exp.paths] == [("direct", "stock"), ("haproxy", "http_no_delay")]


def test_sweep_link_and_tls_reach_every_condition(sweeps: list[Swept], tmp_path: Path) -> None:
    swept, _ = sweep(sweeps, tmp_path, "--link", "loopback", "--tls")  # the defaults: veth, no TLS
    assert swept.exp.conditions
    assert {(c.link, c.tls) for c in swept.exp.conditions} == {("loopback", True)}


def test_sweep_runs_and_frames_reach_the_experiment(sweeps: list[Swept], tmp_path: Path) -> None:
    swept, _ = sweep(sweeps, tmp_path, "--runs", "7", "--frames", "11")  # the defaults: 3, 30
    assert (swept.exp.runs, swept.exp.frames) == (7, 11)


def test_sweep_force_reaches_the_run(sweeps: list[Swept], tmp_path: Path) -> None:
    swept, _ = sweep(sweeps, tmp_path, "--force")
    assert swept.force is True  # the default: False


def test_sweep_json_prints_the_document_on_stdout(sweeps: list[Swept], tmp_path: Path) -> None:
    swept, stdout = sweep(sweeps, tmp_path, "--json")
    doc = json.loads(stdout)  # the document only: the table and the rest went to stderr
    assert doc["kind"] == "sweep"
    assert doc["points"] == []
    assert swept.console.stderr


def test_sweep_sizes_and_intervals_make_the_conditions(sweeps: list[Swept], tmp_path: Path) -> None:
    argv = ["sweep", "haproxy", "--sizes", "100,3000", "--intervals", "7,30", "--out", str(tmp_path)]
    swept, _ = invoked_once(sweeps, *argv)
    assert not {100, 3000} & set(DEFAULT_SIZES)  # so a CLI that kept the defaults fails
    assert not {7.0, 30.0} & set(DEFAULT_INTERVALS)
    asked = {(c.frame_bytes, c.interval_ms) for c in swept.exp.conditions}
    assert asked == {(100, 7.0), (3000, 7.0), (100, 30.0), (3000, 30.0)}


def test_sweep_out_is_the_runs_and_the_reports_directory(
    sweeps: list[Swept], reports: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "swept"
    swept, _ = invoked_once(sweeps, "sweep", "haproxy", "--sizes", "60", "--intervals", "50", "--out", str(out))
    # the default --out: out/sweep
    assert swept.out_dir == out
    assert reports == [out]


def test_sweep_refuses_sizes_that_are_not_numbers(sweeps: list[Swept], tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["sweep", "haproxy", "--sizes", "60,big", "--out", str(tmp_path)])
    assert out.exit_code == 2, out.output
    assert "--sizes and --intervals" in out.output
    assert not sweeps  # refused before anything ran


@dataclass(frozen=True, slots=True)
class Ran:
    """One experiment demo's MatrixRunner was handed, and the directory it was to write into."""

    exp: Experiment
    out_dir: Path


@pytest.fixture
def demos(monkeypatch: pytest.MonkeyPatch, reports: list[Path]) -> list[Ran]:
    """demo's runs recorded (and its report's writer: see `reports`)."""
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


def test_demo_runs_reach_the_experiment(demos: list[Ran], tmp_path: Path) -> None:
    ran, _ = invoked_once(demos, "demo", "--runs", "5", "--out", str(tmp_path))
    assert ran.exp.runs == 5  # the default: 3


def test_demo_out_is_the_runs_and_the_reports_directory(demos: list[Ran], reports: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "demoed"
    ran, _ = invoked_once(demos, "demo", "--out", str(out))  # the default: out/demo
    assert ran.out_dir == out
    assert reports == [out]


def test_demo_json_prints_the_document_on_stdout(demos: list[Ran], tmp_path: Path) -> None:
    ran, stdout = invoked_once(demos, "demo", "--out", str(tmp_path), "--json")
    doc = json.loads(stdout)  # the document only: the table and the rest went to stderr
    assert doc["kind"] == "matrix"
    assert doc["experiment"]["runs"] == ran.exp.runs
