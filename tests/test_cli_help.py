"""Every command's --help renders: rich reads `[...]` in help text as markup, and one bad bracket makes a command's
help crash instead of print."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app

COMMANDS = sorted(c.name or c.callback.__name__ for c in app.registered_commands if c.callback is not None)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_renders(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_diagnose_help_names_every_proxy_it_has_a_fix_for() -> None:
    from tokenpath.diagnose.fixes import FIXES

    result = CliRunner().invoke(app, ["diagnose", "--help"], env={"COLUMNS": "400"})
    text = " ".join(result.output.split())
    assert all(fix.proxies[0] in text for fix in FIXES), text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_default_a_help_text_states_is_shown(command: str) -> None:
    """rich read a help text's `[default: ...]` as a markup tag and dropped it (`The prompt .`): each option whose
    help states its default shows it (written `\\[default: ...]`)."""
    from typer.main import get_command

    group = get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    stated = [p.help.split("\\[default:")[1].split("]")[0] for p in cmd.params if "\\[default:" in (p.help or "")]
    unescaped = [p.name for p in cmd.params if " [default:" in (p.help or "")]
    assert unescaped == [], "write `\\[default: ...]` in a help text: rich reads `[default: ...]` as a tag"
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "1000"})
    text = " ".join(result.output.split())
    for default in stated:
        assert f"[default:{default}]" in text, (command, default)


@pytest.mark.parametrize("columns", [80, 60])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_is_named_whole_at_a_usual_width(command: str, columns: int) -> None:
    """Typer's own columns cut `--streams-per-connection` to `--streams-per-connec…` at 80 columns and a long word of
    help the same way (cli/helptable.py): every flag's name is whole, its `--no-` form too, and nothing is cut; an
    on/off flag is not shown as taking a `<bool>`."""
    from tokenpath.cli.common import command_flags

    info = next(c for c in app.registered_commands if (c.name or getattr(c.callback, "__name__", "")) == command)
    assert info.callback is not None
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    shown = {word.strip("│,") for line in result.output.splitlines() for word in line.split()}
    hidden = {"--clock-offset-ms"}  # the stub's test-only flag, hidden from help
    for flag in set(command_flags(info.callback).values()) - hidden:
        assert flag in shown, (flag, columns)
    assert "…" not in result.output
    assert "<bool>" not in result.output  # an on/off flag takes no value
    assert max(len(line) for line in result.output.splitlines()) <= columns
