"""`tokenpath COMMAND` builds only COMMAND (cli/lazygroup.py): a start imports no other command's module, and what
the user sees (the command list of --help, a mistyped command's suggestion) is what the eagerly built app shows."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenpath.cli.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "src" / "tokenpath" / "cli"
NOT_COMMANDS = {"__init__", "common", "options", "commands", "lazygroup"}

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


def started(*args: str) -> tuple[str, set[str]]:
    """A fresh process's stdout (--help at 200 columns) and the modules it imported."""
    env = {**os.environ, "COLUMNS": "200"}
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
    assert cli == {"commands", "common", "lazygroup"} | own


def test_the_command_list_imports_no_command_and_shows_what_the_eager_app_shows() -> None:
    from tokenpath.cli import app

    shown, imported = started("--help")
    assert not {f"tokenpath.cli.{c.name}" for c in COMMANDS} & imported
    eager = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}, prog_name="tokenpath")
    assert eager.exit_code == 0
    assert shown == eager.output
    assert all(f"│ {c.name} " in shown for c in COMMANDS)


def test_a_mistyped_command_is_still_told_its_name() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "tokenpath", "prob"], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 2
    assert "No such command 'prob'. Did you mean 'probe'?" in out.stderr
