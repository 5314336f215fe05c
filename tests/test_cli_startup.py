"""`tokenpath COMMAND` builds only COMMAND (cli/lazygroup.py): a start imports no other command's module, and what
the user sees (the command list of --help, a mistyped command's suggestion) is what the eagerly built app shows."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "src" / "tokenpath" / "cli"
NOT_COMMANDS = {"__init__", "coercion", "common", "options", "commands", "lazygroup", "helptable"}

# Run the CLI as `python -m tokenpath ARGS` does, then print the modules it imported (as JSON, on stderr's last line).
STARTED = (
    "import json, sys\n"
    "from tokenpath.cli import main\n"
    "sys.argv = ['tokenpath', *sys.argv[1:]]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
)


def started(*args: str, columns: int = 200) -> tuple[str, set[str]]:
    """A fresh process's stdout (--help at `columns`) and the modules it imported."""
    env = {**os.environ, "COLUMNS": str(columns)}
    out = subprocess.run(
        [sys.executable, "-c", STARTED, *args], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    return out.stdout, set(json.loads(out.stderr.splitlines()[-1]))


def test_every_command_module_is_in_the_registry_in_its_order() -> None:
    modules = {p.stem for p in CLI.glob("*.py")} - NOT_COMMANDS
    assert sorted(c.name for c in COMMANDS) == sorted(modules)
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_each_summary_is_its_docstrings_first_paragraph(command: object) -> None:
    """The line --help lists comes from the registry; the command's own help from its docstring: one text."""
    from tokenpath.cli.commands import Command

    assert isinstance(command, Command)
    doc = inspect.getdoc(command.load())
    assert doc is not None
    assert doc.split("\n\n")[0] == command.summary


@pytest.mark.parametrize(("command", "own"), [("probe", {"probe", "options"}), ("report", {"report"})])
def test_a_command_imports_no_other_command(command: str, own: set[str]) -> None:
    _, imported = started(command, "--help")
    cli = {m.removeprefix("tokenpath.cli.") for m in imported if m.startswith("tokenpath.cli.")}
    assert cli == {"commands", "coercion", "common", "lazygroup", "helptable"} | own  # helptable: for --help only


def test_the_command_list_imports_no_command_and_shows_what_the_eager_app_shows() -> None:
    from tokenpath.cli import app

    shown, imported = started("--help")
    assert not {f"tokenpath.cli.{c.name}" for c in COMMANDS} & imported
    eager = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}, prog_name="tokenpath")
    assert eager.exit_code == 0
    assert shown == eager.output
    assert all(f"│ {c.name} " in shown for c in COMMANDS)


def test_each_listed_summary_is_one_line_where_the_terminal_is_wide_enough() -> None:
    """Typer's rich markup keeps a list entry's single newlines: the docstrings' own line ends broke each summary
    where the source does (`timeouts`' "... wait at" / "once."), however wide the terminal."""
    shown, _ = started("--help", columns=1000)
    rows = {line.split()[1]: line for line in shown.splitlines() if line.startswith("│ ") and len(line.split()) > 2}
    for command in COMMANDS:
        assert command.short_help in rows[command.name], command.name


def test_a_mistyped_command_is_still_told_its_name() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "tokenpath", "prob"], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 2
    assert "No such command 'prob'. Did you mean 'probe'?" in out.stderr


# --- coercion.py: Typer's per-option coercion, spared where it is plain -----------------------------------------

PLAIN_SAMPLES = ["0", "7", "-3", "8000", "-0", "2.5", "-0.25", "1.50", "abc", "", "ñ", "\udcff", "9" * 40]
ODD_SAMPLES = ["007", "+5", "1_000", " 5", "5 ", "1.", ".5", "1e3", "0x10", "nan", "inf", "1." + "0" * 40]
LIST_SAMPLES = [(), ("a", "7"), ["-3", "2.5"], ("1e3",), ("7", None)]
SAMPLES = [*PLAIN_SAMPLES, *ODD_SAMPLES, *LIST_SAMPLES]


def test_a_start_builds_no_adapter_for_plain_values() -> None:
    """`tokenpath stub --port 0 --tokens 3 --interval-ms 1.5 ...` reaches the command without pydantic."""
    _, imported = started("stub", "--port", "0", "--tokens", "3", "--interval-ms", "1.5", "--jitter", "bogus")
    assert "tokenpath.cli.stub" in imported
    assert not {m for m in imported if m.startswith("pydantic")}
    assert not {"rich.markdown", "rich.traceback", "matplotlib"} & imported  # help's and reports' alone
    _, imported = started("gateway", "--listen", "127.0.0.1:0", "--upstream", "http://a:1", "--upstream", "http://b:2")
    assert "tokenpath.cli.gateway" in imported
    assert not {m for m in imported if m.startswith("pydantic")}
    _, imported = started("stub", "--port", "1e3")  # not plain: Typer's adapter, as before
    assert "pydantic" in imported


def test_a_load_imports_only_the_clients_its_streams_use() -> None:
    """An HTTP/1.1 load's runner (built by --plan too) imports neither aioquic nor the WebSocket client, and no
    matplotlib until its report draws a chart (load/worker.py, report/charts.py)."""
    _, imported = started("load", "--plan", "--concurrency", "8")
    assert "tokenpath.load.runner" in imported
    assert not {"aioquic", "tokenpath.load.h3conn", "tokenpath.load.wsconn", "matplotlib"} & imported


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_a_spared_value_is_what_typers_adapter_gives(command: str) -> None:
    """Every option of every command, its default and SAMPLES: the spared coercion's value (or error) is Typer's."""
    import typer
    from typer import _click
    from typer._coercion import build_runtime_param
    from typer.core import _TyperParameter

    from tokenpath.cli import app
    from tokenpath.cli.coercion import SparedRuntimeParam, has_plain_values

    def outcome(runtime: Any, param: Any, value: object) -> tuple[str, str]:
        try:
            result = runtime.coerce(value, param=param, ctx=ctx)
        except typer.BadParameter as exc:
            return "error", exc.format_message()
        return type(result).__name__, repr(result)

    group: Any = typer.main.get_command(app)
    cmd = group.commands[command]
    ctx = _click.Context(cmd)
    plain = [p for p in cmd.params if isinstance(p, _TyperParameter) and has_plain_values(p.type_descriptor)]
    assert plain
    for param in plain:
        d = param.type_descriptor
        spared, typers = SparedRuntimeParam(d.parameter_info, d.annotation, d, True), build_runtime_param(d)
        for value in [param.default, *SAMPLES]:
            assert outcome(spared, param, value) == outcome(typers, param, value), (param.name, value)
