"""`tokenpath matrix` and `tokenpath sweep`: the flags an audit found unasserted reach what they run. matrix's --force
reaches MatrixRunner (its `force`); sweep's --variant, --link, --tls, --runs and --frames reach the experiment handed
to run_sweep, its --force that call's `force`, and its --json puts the results document on stdout. The runner is
replaced by a recorder that returns an empty results document: no stub, no proxy, no process. Each value given
differs from the flag's default, so a CLI that dropped the flag fails here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import tokenpath.experiment.runner
import tokenpath.experiment.sweep
from tests.helpers import tiny_experiment
from tokenpath.cli import app
from tokenpath.experiment.spec import Experiment
from tokenpath.results.model import MatrixResults, Provenance

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


@dataclass(frozen=True, slots=True)
class Swept:
    exp: Experiment
    proxy: str
    console: Console
    force: bool


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[Swept]:
    seen: list[Swept] = []

    def record(exp: Experiment, proxy: str, out_dir: Path, console: Console, force: bool = False) -> MatrixResults:
        seen.append(Swept(exp, proxy, console, force))
        return MatrixResults(Provenance.now("sweep"), exp.to_json(), points=())

    monkeypatch.setattr(tokenpath.experiment.sweep, "run_sweep", record)
    return seen


def sweep(sweeps: list[Swept], tmp_path: Path, *args: str) -> tuple[Swept, str]:
    argv = ["sweep", "haproxy", "--sizes", "60", "--intervals", "50", "--out", str(tmp_path / "out"), *args]
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output
    assert len(sweeps) == 1
    assert sweeps[0].proxy == "haproxy"
    return sweeps[0], out.stdout


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
