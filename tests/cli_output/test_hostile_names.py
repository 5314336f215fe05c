"""Names that mean something to rich's markup reach the terminal as the text they are: a proxy's or a variant's name
and an experiment's from a TOML file, a --proxy or --out the user typed, a peer's Content-Encoding or URL, the
fields of a results.json that `tokenpath report` reads. `[red]x` is not red, `x[/]` and `[/bold]` raise no
MarkupError (a traceback after a whole run), `[link=...]` makes no hyperlink, a backslash before a "[" stays.
Each table and line is rendered in-process; matrix, load and report are run through the CLI with their runner
replaced, as tests/experiment/test_cli_flags_reach.py does. (probe refuses a "[" in its URL before anything is sent;
its table is tested with a peer's Content-Encoding and --client chromium's title.)"""

from __future__ import annotations

import copy
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console, RenderableType
from rich.progress import Progress
from typer.testing import CliRunner

import tokenpath.experiment.runner
import tokenpath.load.runner
from tests.helpers import tiny_experiment
from tests.probe.test_table import run
from tokenpath.cli import app
from tokenpath.cli.probe import shown_table
from tokenpath.experiment import spec
from tokenpath.experiment.runner import Environment, MatrixRunner
from tokenpath.experiment.spec import PathSpec
from tokenpath.experiment.sweep import inferred_line, sweep_table
from tokenpath.load.plan import plan_table
from tokenpath.monitor.runner import RouteSamples, TargetSummary
from tokenpath.monitor.table import summary_table
from tokenpath.probe.metrics import probe_results
from tokenpath.progress import escaped, progress_bar, styled
from tokenpath.report import load_table, tables
from tokenpath.results.model import LoadResults, MatrixResults, dumps, from_json

DATA = Path(__file__).parents[1] / "report" / "data"
NAMES = ("[red]x", "x[/]", "[/bold]", "[link=http://e]y[/link]", "\\[", "\\\\[", "[bold]", "[a[b]")
# A backslash at the end escaped the closing tag of a styled span (`[yellow]y\[/]`): only where one follows the name.
HOSTILE = (*NAMES, "y\\")
# What a directory can be named (no "//"): the --out and results directories of the CLI tests.
HOSTILE_DIRS = ("[red]x", "x[/]", "[/bold]", "\\[", "[bold]")


def shown(*renderables: RenderableType) -> str:
    """What a terminal shows of the renderables (wide enough that no cell is cut)."""
    console = Console(record=True, width=2000, file=io.StringIO(), force_terminal=True)
    for renderable in renderables:
        console.print(renderable)
    return console.export_text()


def _doc(kind: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / kind / "results.json").read_text(encoding="utf-8"))
    return doc


def hostile_matrix(name: str, kind: str = "matrix") -> MatrixResults:
    """The fixture with `name` as every proxy, a variant, the experiment's name, a verdict and the upstream's words."""
    doc = copy.deepcopy(_doc(kind))
    doc["experiment"]["name"] = name
    doc["experiment"]["upstream"] = {"origin": name, "model": name, "note": name}
    for row in doc["rows"]:
        row["proxy"] = name
    doc["rows"][-1]["variant"] = name
    doc["rows"][0]["fpr_median"] = None  # the verdict is shown as it is
    doc["rows"][0]["verdict"] = name
    if doc.get("inferred"):
        doc["inferred"]["rule"] = name
        doc["inferred"]["explanation"] = name
    results = from_json(doc)
    assert isinstance(results, MatrixResults)
    return results


def hostile_load(name: str) -> LoadResults:
    doc = copy.deepcopy(_doc("load"))
    for level in doc["levels"]:
        level["target"] = name
        level["content_encoding"] = name  # a peer's answer, among the notes
        for warning in level["warnings"]:
            warning["message"] = name
            warning["remedy"] = name
    results = from_json(doc)
    assert isinstance(results, LoadResults)
    return results


@pytest.mark.parametrize("name", HOSTILE)
def test_the_helpers_show_a_name_as_typed(name: str) -> None:
    assert shown(escaped(name)).rstrip("\n") == name
    assert shown(f"a {escaped(name)} b").rstrip("\n") == f"a {name} b"
    assert shown(f"{styled(name, 'yellow')} ({escaped(name)})").rstrip("\n") == f"{name} ({name})"


def test_a_control_character_is_shown_as_its_escape_never_sent_to_the_terminal() -> None:
    """An ESC sequence in a name or a directory cleared or recoloured the terminal: rich passes ESC (and BEL, a
    C1 CSI) through. Each is shown as its escape; a line end and a tab stay what they are."""
    name = "cork\x1b[2J\x1b[31mEVIL\x07\x9b[1m"
    out = shown(f"a {escaped(name)} b", styled(name, "yellow"))
    assert not any((0 <= ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in out)
    assert out.splitlines() == ["a cork\\x1b[2J\\x1b[31mEVIL\\x07\\x9b[1m b", "cork\\x1b[2J\\x1b[31mEVIL\\x07\\x9b[1m"]
    assert escaped("two\nlines\tand a tab") == "two\nlines\tand a tab"


@pytest.mark.parametrize("name", NAMES)
def test_the_matrix_table_shows_names_as_typed(name: str) -> None:
    results = hostile_matrix(name)
    out = shown(tables.rich_table(results))
    assert out.count(name) >= len(results.rows) + 2  # every path, the title, the verdict, the upstream's words
    assert f"{name} {name}" in out  # the path with its variant


@pytest.mark.parametrize("name", HOSTILE)
def test_the_sweep_table_and_its_rule_show_names_as_typed(name: str) -> None:
    results = hostile_matrix(name, "sweep")
    out = shown(sweep_table(results, name), inferred_line(results, name) or "", tables.rich_table(results))
    assert f"tokenpath sweep: {name}" in out
    assert f"{name} {name} ({name})" in out  # the proxy, its inferred rule, the explanation


@pytest.mark.parametrize("name", HOSTILE)
def test_the_load_table_and_warnings_show_names_as_typed(name: str) -> None:
    results = hostile_load(name)
    out = shown(load_table.rich_table(results), *load_table.warning_lines(results))
    level = results.levels[0]
    assert f"{name} @ {level.level_label}: {name} ({name})" in out  # the warning line
    assert f"answered {name}, decoded" in out  # the notes cell
    assert out.count(f" {name} ") >= len(results.levels)  # the target cells


@pytest.mark.parametrize("name", NAMES)
def test_the_monitor_table_shows_names_as_typed(name: str) -> None:
    summary = TargetSummary(name, {"via": RouteSamples(probes=1, failures=1, reasons={name: 1})})
    out = shown(summary_table([summary]))
    assert f" {name} " in out
    assert f"1 ({name} 1)" in out


@pytest.mark.parametrize("name", [n for n in NAMES if ":" not in n])  # --plan names a proxy without its ":variant"
def test_the_plan_table_shows_the_proxy_as_typed(name: str) -> None:
    out = shown(plan_table((10,), tokens=16, interval_ms=20, ttft_ms=90, proxy=name, proxy_us=5.0))
    assert f"proxy ({name})" in out


@pytest.mark.parametrize("name", NAMES)
def test_the_progress_bar_shows_a_label_as_typed(name: str) -> None:
    bar = progress_bar(Console(force_terminal=True, file=io.StringIO()))
    assert isinstance(bar, Progress)  # on a terminal: the bar, its description a column of text
    task = bar.add_task("matrix", total=3)
    bar.update(task, description=name)  # a condition's or a target's label
    assert name in shown(bar.get_renderable())


@pytest.mark.parametrize("name", NAMES)
def test_the_matrix_runner_s_skip_lines_show_names_as_typed(name: str, tmp_path: Path) -> None:
    experiment = tmp_path / "x.toml"
    experiment.write_text(EXPERIMENT)
    console = Console(record=True, width=2000, file=io.StringIO())
    runner = MatrixRunner(spec.load(str(experiment)), tmp_path, console=console)
    runner._skip(Environment("loopback", False), PathSpec(name), f"failed: {name}")
    runner._skip_all(name, name)
    out = console.export_text()
    assert f"skipping {name} (loopback): failed: {name}" in out
    assert f"skipping every {name} condition: {name}" in out


@pytest.mark.parametrize("name", HOSTILE)
def test_the_probe_table_shows_the_url_the_encoding_and_the_client_as_typed(name: str) -> None:
    metrics = replace(run(False, False), content_encoding=name)
    out = shown(shown_table(probe_results(f"http://p/{name}", [metrics], accept_encoding=name), False, name))
    assert f"tokenpath probe http://p/{name} (--api openai, Accept-Encoding: {name}) [{name}]" in out
    assert f" {name} " in out  # the encoding cell


# --- through the CLI ------------------------------------------------------------------------------------------------

EXPERIMENT = tiny_experiment("hostile")


@pytest.fixture(autouse=True)
def _unbounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # off a terminal the CLI's lines are as wide as they are


def cli(*argv: str) -> str:
    out = CliRunner().invoke(app, list(argv))
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert out.exit_code == 0, out.output
    return out.stdout


@pytest.mark.parametrize("name", HOSTILE_DIRS)
def test_matrix_and_report_print_names_and_paths_as_typed(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Recorder:
        def __init__(self, exp: Any, out_dir: Path, *, force: bool = False, console: Any = None) -> None:
            self.out_dir = out_dir

        def run(self) -> MatrixResults:
            results = hostile_matrix(name)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "results.json").write_text(dumps(results))
            return results

    monkeypatch.setattr(tokenpath.experiment.runner, "MatrixRunner", Recorder)
    experiment = tmp_path / "x.toml"
    experiment.write_text(EXPERIMENT)
    out_dir = tmp_path / name
    out = cli("matrix", str(experiment), "--out", str(out_dir))
    assert f" {name} " in out  # a path's cell
    assert f"results: {out_dir / 'results.json'}" in out
    assert f"report: {out_dir / 'report.html'}" in out
    out = cli("report", str(out_dir), "--format", "md")
    assert f"md: {out_dir / 'table.md'}" in out


@pytest.mark.parametrize("name", HOSTILE)
def test_load_prints_targets_and_warnings_as_typed(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Recorder:
        def __init__(self, cfg: Any, out_dir: Path, console: Any) -> None:
            self.out_dir = out_dir

        def run(self) -> LoadResults:
            results = hostile_load(name)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "results.json").write_text(dumps(results))
            return results

    monkeypatch.setattr(tokenpath.load.runner, "LoadRunner", Recorder)
    out = cli("load", "--proxy", "nginx", "--client-workers", "1", "--out", str(tmp_path / "out"))
    assert f"{name} @ 5: {name} ({name})" in out
