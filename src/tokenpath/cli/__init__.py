"""The `tokenpath` command. Thin: each command (one module here) turns its flags into config objects and calls the
library; one decorator (common.handles_errors) maps errors to exit codes and the config fields that library
messages name to the command's flags. main() builds only the command it runs (lazygroup.py); `app`, asked for,
has every command of commands.py on it."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from tokenpath.cli import common
from tokenpath.cli.commands import COMMANDS
from tokenpath.cli.common import console, err_console
from tokenpath.cli.lazygroup import HelpCommand

if TYPE_CHECKING:
    from tokenpath.cli.common import app

__all__ = ["app", "console", "err_console", "main"]


def __getattr__(name: str) -> object:
    """`tokenpath.cli.app` for those that read its commands (tests, in-process callers): every command registered on
    first access, as Typer builds them eagerly. The CLI's own start (main) leaves them to the lazy group."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not common.app.registered_commands:
        for command in COMMANDS:
            common.app.command(short_help=command.short_help, cls=HelpCommand)(command.load())
    globals()["app"] = common.app
    return common.app


def main() -> None:
    if os.environ.get("TOKENPATH_PARENT_PID"):  # a service tokenpath started: it ends with its parent
        from tokenpath.serve.procs import follow_parent

        follow_parent()
    try:
        common.app()
    except KeyboardInterrupt:
        sys.exit(130)
