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
