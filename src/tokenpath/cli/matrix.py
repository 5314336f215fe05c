"""`tokenpath matrix`: an experiment file → MatrixRunner → results.json, the table and the report (or a Compose
export of the same experiment)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokenpath.cli.common import (
    JSON_HELP,
    console,
    end_matrix,
    handles_errors,
    refuse_unread,
    render_report,
    shown_console,
)


@handles_errors("matrix")
def matrix(
    experiment: Annotated[str, typer.Argument(help="Experiment file (TOML); see examples/.")],
    out: Annotated[str, typer.Option(help="Directory for results.json, table.md, results.csv.")] = "out/matrix",
    force: Annotated[bool, typer.Option(help="Measure even if certification fails (tables say UNCERTIFIED).")] = False,
    emit_compose: Annotated[
        str | None, typer.Option(help="Write docker-compose.yml + configs for this experiment to DIR; run nothing.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Run a buffering experiment: real proxies x conditions x runs, certified, with exclusions."""
    given = dict(locals())
    from tokenpath.experiment import spec
    from tokenpath.experiment.runner import MatrixRunner
    from tokenpath.progress import escaped
    from tokenpath.report import tables
    from tokenpath.results.model import dumps

    shown = shown_console(json_out)
    exp = spec.load(experiment)
    if emit_compose:
        refuse_unread(
            matrix, given, ("out", "force", "json_out"), "by --emit-compose (it writes files and runs nothing)"
        )
        from tokenpath.experiment.compose import emit, run_hint, source_root

        path, skipped = emit(exp, Path(emit_compose), source_root())
        for line in skipped:
            console.print(f"[yellow]not exported:[/] {escaped(line)}")
        console.print(escaped(run_hint(path)))
        return
    doc = MatrixRunner(exp, Path(out), force=force, console=shown).run()
    if json_out:
        print(dumps(doc), flush=True)
    shown.print(tables.rich_table(doc))
    for line in tables.attribution_lines(doc.rows):  # which origin behaviour made a verdict (issue 37)
        shown.print(line, markup=False, highlight=False)
    shown.print(f"results: {escaped(Path(out) / 'results.json')}")
    render_report(out, shown)
    end_matrix(doc)
