"""How `tokenpath matrix`, `sweep` and `demo` end once their results are written: 0 when every condition's direct
path kept a run, 20 (InstrumentError) when one kept none (no floor: nothing there can be judged), 130 when
interrupted. The runners are replaced by functions that return a results document: no stub, no proxy, no process."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import pytest
from rich.console import Console
from typer.testing import CliRunner

import tokenpath.demo
import tokenpath.experiment.runner
import tokenpath.experiment.sweep
from tests.helpers import tiny_experiment
from tokenpath.axes import Condition
from tokenpath.cli import app
from tokenpath.experiment.spec import Experiment
from tokenpath.results.model import FloorEntry, MatrixResults, Provenance

EXPERIMENT = tiny_experiment("exit", proxy=None)

MEASURED = FloorEntry(Condition(50.0, 60, "loopback", False), fpr=1.0, added_ttft_ms=0.2, ttft_spread_ms=0.1)
NOTHING_KEPT = FloorEntry(Condition(20.0, 60, "loopback", False))  # every direct run excluded: no figures


def returning(floors: tuple[FloorEntry, ...], *, interrupted: bool = False, points: tuple[()] | None = None) -> Any:
    def results(exp: Experiment, kind: Literal["matrix", "sweep"] = "matrix") -> MatrixResults:
        return MatrixResults(
            Provenance.now(kind),
            exp.to_json(),
            floors=floors,
            interrupted=interrupted,
            points=points,
        )

    return results


def run_matrix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, floors: tuple[FloorEntry, ...], **kw: Any) -> Any:
    results = returning(floors, **kw)

    class Runner:
        def __init__(self, exp: Experiment, out_dir: Path, *, force: bool = False, console: Any = None) -> None:
            self.exp = exp

        def run(self) -> MatrixResults:
            return results(self.exp)  # type: ignore[no-any-return]

    monkeypatch.setattr(tokenpath.experiment.runner, "MatrixRunner", Runner)
    experiment = tmp_path / "exit.toml"
    experiment.write_text(EXPERIMENT)
    return CliRunner().invoke(app, ["matrix", str(experiment), "--out", str(tmp_path / "out"), "--json"])


def run_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, floors: tuple[FloorEntry, ...], **kw: Any) -> Any:
    results = returning(floors, points=(), **kw)

    def sweep(exp: Experiment, proxy: str, out_dir: Path, console: Console, force: bool = False) -> MatrixResults:
        return results(exp, "sweep")  # type: ignore[no-any-return]

    monkeypatch.setattr(tokenpath.experiment.sweep, "run_sweep", sweep)
    argv = ["sweep", "haproxy", "--sizes", "60", "--intervals", "50", "--out", str(tmp_path / "out"), "--json"]
    return CliRunner().invoke(app, argv)


def run_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, floors: tuple[FloorEntry, ...], **kw: Any) -> Any:
    results = returning(floors, **kw)

    def demo(out_dir: Path, console: Console, runs: int = 3) -> MatrixResults:
        doc: MatrixResults = results(Experiment("demo", [], []))
        passed = replace(doc.certification, passed=True)  # certified: the exit is the floors' and the stop's
        return replace(doc, certification=passed)

    monkeypatch.setattr(tokenpath.demo, "run_demo", demo)
    return CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "out"), "--json"])


RUNS = [run_matrix, run_sweep, run_demo]


def test_unjudged_names_the_conditions_without_a_floor() -> None:
    doc = MatrixResults(Provenance.now("matrix"), {}, floors=(MEASURED, NOTHING_KEPT))
    assert doc.unjudged == (NOTHING_KEPT.condition,)
    assert MatrixResults(Provenance.now("matrix"), {}, floors=(MEASURED,)).unjudged == ()


@pytest.mark.parametrize("run", RUNS)
def test_every_condition_judged_exits_0(run: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = run(monkeypatch, tmp_path, (MEASURED,))
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize("run", RUNS)
def test_a_condition_whose_direct_path_kept_no_run_exits_20_after_writing_everything(
    run: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = run(monkeypatch, tmp_path, (MEASURED, NOTHING_KEPT))
    assert out.exit_code == 20, out.output
    assert "the direct path kept no run in 1 of 2 conditions" in out.stderr
    assert NOTHING_KEPT.condition.label in out.stderr
    assert json.loads(out.stdout)["floors"]  # the document went out first (--json), the exit after it


@pytest.mark.parametrize("run", RUNS)
def test_interrupted_exits_130_before_judging(run: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = run(monkeypatch, tmp_path, (NOTHING_KEPT,), interrupted=True)
    assert out.exit_code == 130, out.output
