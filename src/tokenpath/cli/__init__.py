"""The `tokenpath` command. Thin: each command (one module here) turns its flags into config objects and calls the
library; one decorator (common.handles_errors) maps errors to exit codes and the config fields that library
messages name to the command's flags."""

from __future__ import annotations

import sys

from tokenpath.cli.common import app, console, err_console
from tokenpath.cli.demo import demo
from tokenpath.cli.diagnose import diagnose
from tokenpath.cli.gateway import gateway
from tokenpath.cli.load import load
from tokenpath.cli.matrix import matrix
from tokenpath.cli.monitor import monitor
from tokenpath.cli.origin import origin
from tokenpath.cli.probe import probe
from tokenpath.cli.record import record
from tokenpath.cli.relay import relay
from tokenpath.cli.report import report
from tokenpath.cli.stub import stub
from tokenpath.cli.sweep import sweep
from tokenpath.cli.timeouts import timeouts

for command in (
    *(stub, probe, relay, matrix, sweep, load, demo, gateway, monitor, report, diagnose, timeouts, origin, record),
):
    app.command()(command)

__all__ = ["app", "console", "err_console", "main"]


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
