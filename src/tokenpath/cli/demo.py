"""`tokenpath demo`: a quick certified matrix built from the catalogue."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokenpath.cli.common import JSON_HELP, end_matrix, handles_errors, render_report, shown_console


@handles_errors("demo")
def demo(
    runs: Annotated[int, typer.Option(help="Streams per path.")] = 3,
    out: Annotated[str, typer.Option(help="Directory for the results.")] = "out/demo",
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """A quick certified matrix: every installed proxy, stock and with its fix, plus the controls."""
    from tokenpath.demo import run_demo
    from tokenpath.progress import escaped
    from tokenpath.report import tables
    from tokenpath.results.model import dumps

    shown = shown_console(json_out)
    doc = run_demo(Path(out), shown, runs)
    if json_out:
        print(dumps(doc), flush=True)
    shown.print(tables.rich_table(doc))
    shown.print(f"results: {escaped(Path(out) / 'results.json')}")
    render_report(out, shown)
    if not doc.interrupted and not doc.certification.passed:
        raise typer.Exit(1)
    end_matrix(doc)  # interrupted: 130, as matrix; a condition nothing could be judged in: 20
