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
