"""`tokenpath sweep`: frame size x interval through one proxy → results.json, the table, the inferred rule."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokenpath.cli.common import JSON_HELP, end_matrix, handles_errors, render_report, shown_console
from tokenpath.errors import UsageError
from tokenpath.experiment.grid import DEFAULT_INTERVALS, DEFAULT_SIZES, as_list


@handles_errors("sweep")
def sweep(
    proxy: Annotated[str, typer.Argument(help="Catalogue proxy to sweep, e.g. haproxy, or a release: traefik@3.3.2.")],
    variant: Annotated[str, typer.Option(help="Its variant.")] = "stock",
    link: Annotated[str, typer.Option(help="loopback or veth (1,500-byte MTU; needs root).")] = "veth",
    tls: Annotated[bool, typer.Option(help="Terminate TLS at the proxy.")] = False,
    sizes: Annotated[str, typer.Option(help="Frame sizes in bytes, comma-separated.")] = as_list(DEFAULT_SIZES),
    intervals: Annotated[str, typer.Option(help="Intervals in ms, comma-separated.")] = as_list(DEFAULT_INTERVALS),
    runs: Annotated[int, typer.Option(help="Streams per point.")] = 3,
    frames: Annotated[int, typer.Option(help="Frames per stream.")] = 30,
    out: Annotated[str, typer.Option(help="Directory for results.json.")] = "out/sweep",
    force: Annotated[bool, typer.Option(help="Measure even if certification fails.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Sweep frame size x interval through one proxy and infer what makes it flush (size? timer?)."""
    from tokenpath.experiment.sweep import inferred_line, run_sweep, sweep_experiment, sweep_table
    from tokenpath.progress import escaped
    from tokenpath.results.model import dumps

    shown = shown_console(json_out)
    try:
        size_list = [int(x) for x in sizes.split(",")]
        interval_list = [float(x) for x in intervals.split(",")]
    except ValueError:
        raise UsageError("--sizes and --intervals take comma-separated numbers") from None
    exp = sweep_experiment(proxy, variant, link, tls, size_list, interval_list, runs, frames)  # type: ignore[arg-type]
    exp.proxy(proxy).variant(variant)
    doc = run_sweep(exp, proxy, Path(out), shown, force)
    if json_out:
        print(dumps(doc), flush=True)
    shown.print(sweep_table(doc, exp.name))
    line = inferred_line(doc, proxy)
    if line:
        shown.print(line)
    shown.print(f"results: {escaped(Path(out) / 'results.json')}")
    render_report(out, shown)
    end_matrix(doc)
