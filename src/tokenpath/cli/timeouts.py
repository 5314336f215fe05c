"""`tokenpath timeouts`: flags → a SurveyConfig → each path's limits (diagnose/limits.py), as a table or JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from tokenpath.cli import options
from tokenpath.cli.common import console, err_console, handles_errors, writable_file
from tokenpath.diagnose.limits import DEFAULT_MAX_S, DEFAULT_MIN_S, DEFAULT_RESOLUTION_S
from tokenpath.errors import DiagnosisUnsure


@handles_errors("timeouts")
def timeouts(
    targets: Annotated[
        list[str],
        typer.Argument(
            help="Each path's URL (http://HOST:PORT, a /v1 base allowed), a tokenpath stub behind it; NAME=URL "
            "names the catalogue proxy in it (nginx=http://...), whose config line then names the fix."
        ),
    ],
    min_s: Annotated[float, typer.Option("--min", help="Shortest silence or total tried, seconds.")] = DEFAULT_MIN_S,
    max_s: Annotated[
        float, typer.Option("--max", help="Longest tried, seconds: a path that survives it has no limit below it.")
    ] = DEFAULT_MAX_S,
    resolution_s: Annotated[
        float, typer.Option("--resolution", help="Stop when the limit is bracketed this closely, seconds.")
    ] = DEFAULT_RESOLUTION_S,
    keepalives: Annotated[
        bool | None,
        typer.Option(
            help="Also try whether keep-alives reset the mid-stream idle timer (default: where the format has one; "
            "Bedrock and Ollama have none).",
            show_default=False,
        ),
    ] = None,
    api: options.Api = None,
    http2: Annotated[
        bool,
        typer.Option(
            "--http2",
            help="Speak HTTP/2 to each path: h2c with prior knowledge in clear text (no TLS, so no ALPN h2); never a "
            "fallback to HTTP/1.1.",
            show_default=False,
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the survey as JSON on stdout.")] = False,
    html: Annotated[Path | None, typer.Option(help="Also write the survey as a self-contained HTML page here.")] = None,
) -> None:
    """Find each path's limits on a token stream: the longest silence it survives before the first byte and
    mid-stream, the longest total, and whether keep-alives reset its idle timer. All probes of all paths wait at
    once. Progress on stderr. In any API format (--api: the stub's silences in its shape), over HTTP/1.1 or HTTP/2
    with prior knowledge (--http2); no TLS yet.

    A survey takes about the longer of --max and three times its longest limit (each limit is bracketed, then tried
    again on both sides before it is called firm), plus twice the mid-stream limit for the keep-alive try, not their
    sum; a path that holds a stream instead of cutting it (no cut's timing to bracket by) takes up to about 3 x --max
    + 10 s. Cuts no one limit explains (a flaky path) are shown as inconsistent, no limit named, exit 17; the
    origin's own error event (or an error status once the head came) refuses the path in one line (exit 3; 6 for a
    status), as does a cut before half of --min (a broken path, no timer) or a measure whose every try was held."""
    from tokenpath.diagnose.cuts import cut_lines, cuts_json, split_target
    from tokenpath.diagnose.limitprobe import Outcome
    from tokenpath.diagnose.limits import SurveyConfig, survey, table_lines, to_json

    chosen = options.stream_choice(api, http2)
    named = [split_target(text) for text in targets]
    proxies = {url: name for name, url in named if name}
    urls = tuple(url for _, url in named)
    cfg = SurveyConfig(
        urls,
        min_s=min_s,
        max_s=max_s,
        resolution_s=resolution_s,
        keepalives=keepalives,
        api=chosen.api,
        http_version=chosen.http_version,
    )

    if html is not None:
        writable_file(html, "html")  # before a survey of up to ~3 x --max: not found out after it

    def on_try(target: str, what: str, value_s: float, outcome: Outcome) -> None:
        result = outcome.end.describe() if outcome.end else "held past the client's guard"
        label = proxies.get(target, target)
        err_console.print(f"{label} {what} {value_s:g} s: {result}", highlight=False, markup=False)

    results = asyncio.run(survey(cfg, on_try))
    if html is not None:
        from tokenpath.report.timeouts import timeouts_page

        html.write_text(timeouts_page(results, cfg, proxies))
    if json_out:
        doc = to_json(results, cfg)
        for path, entry in zip(results, doc["paths"], strict=True):
            entry["proxy"] = proxies.get(path.target)
            entry["cuts"] = cuts_json(path, proxies.get(path.target))
        print(json.dumps(doc, indent=2), flush=True)
    else:
        for line in [*table_lines(results, cfg, proxies), "", *cut_lines(results, proxies)]:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    if any(path.inconsistent for path in results):
        # A measure whose cuts no one limit explains is no finding to ship on (a flaky path, a limit that varies):
        # the runs disagree, as diagnose's unsure (errors.py DiagnosisUnsure), after the table and the JSON.
        raise typer.Exit(DiagnosisUnsure.exit_code)
