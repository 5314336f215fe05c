"""`tokenpath timeouts`: flags → a SurveyConfig → each path's limits (diagnose/limits.py), as a table or JSON."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from tokenpath.cli.common import console, err_console, handles_errors
from tokenpath.diagnose.limits import DEFAULT_MAX_S, DEFAULT_MIN_S, DEFAULT_RESOLUTION_S


@handles_errors("timeouts")
def timeouts(
    targets: Annotated[
        list[str],
        typer.Argument(help="Each path's URL (http://HOST:PORT, a /v1 base allowed), a tokenpath stub behind it."),
    ],
    min_s: Annotated[float, typer.Option("--min", help="Shortest silence or total tried, seconds.")] = DEFAULT_MIN_S,
    max_s: Annotated[
        float, typer.Option("--max", help="Longest tried, seconds: a path that survives it has no limit below it.")
    ] = DEFAULT_MAX_S,
    resolution_s: Annotated[
        float, typer.Option("--resolution", help="Stop when the limit is bracketed this closely, seconds.")
    ] = DEFAULT_RESOLUTION_S,
    keepalives: Annotated[
        bool, typer.Option(help="Also try whether keep-alives reset the mid-stream idle timer.")
    ] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the survey as JSON on stdout.")] = False,
) -> None:
    """Find each path's limits on a token stream: the longest silence it survives before the first byte and
    mid-stream, the longest total, and whether keep-alives reset its idle timer. All probes of all paths wait at
    once, so a survey takes about twice the longest limit. Progress on stderr."""
    from tokenpath.diagnose.limitprobe import Outcome
    from tokenpath.diagnose.limits import SurveyConfig, survey, table_lines, to_json

    cfg = SurveyConfig(tuple(targets), min_s=min_s, max_s=max_s, resolution_s=resolution_s, keepalives=keepalives)

    def on_try(target: str, what: str, value_s: float, outcome: Outcome) -> None:
        result = outcome.end.describe() if outcome.end else "held past the client's guard"
        err_console.print(f"{target} {what} {value_s:g} s: {result}", highlight=False, markup=False)

    results = asyncio.run(survey(cfg, on_try))
    if json_out:
        print(json.dumps(to_json(results, cfg), indent=2), flush=True)
    else:
        for line in table_lines(results, cfg):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
