"""`tokenpath diagnose`: flags → a ProbeConfig template and a series → the verdict, the proxy and its fix."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from tokenpath.cli.common import api_key, console, handles_errors
from tokenpath.errors import UsageError
from tokenpath.wire.request import parse_header_arg


@handles_errors("diagnose")
def diagnose(
    url: Annotated[
        str | None, typer.Argument(help="The path to diagnose (your proxy); default $TOKENPATH_URL.")
    ] = None,
    stub_url: Annotated[
        str | None,
        typer.Option(
            help="The tokenpath stub behind the path, when the path does not forward /_tokenpath/ to it: the "
            "series then paces it per run (frame size, interval). A path whose origin answers as a stub is paced "
            "without it."
        ),
    ] = None,
    proxy: Annotated[
        str | None,
        typer.Option(
            help="The proxy in the path, when its headers do not name it: nginx, haproxy, caddy, traefik, "
            "envoy, apache2, express or starlette (for its fix line)."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the diagnosis document on stdout.")] = False,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE request header; repeatable.")] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Env var holding the API key (default: TOKENPATH_API_KEY if set).")
    ] = None,
    model: Annotated[str, typer.Option(help="Model to request.")] = "tokenpath-stub",
    max_tokens: Annotated[
        int | None, typer.Option(help="max_tokens in each request (against an endpoint that is not a stub).")
    ] = 128,
    insecure: Annotated[bool, typer.Option(help="Do not verify the TLS certificate.")] = False,
    cacert: Annotated[str | None, typer.Option(help="CA bundle (PEM) to verify the server with.")] = None,
    total_timeout: Annotated[float, typer.Option(help="Longest one stream may take, seconds.")] = 120.0,
) -> None:
    """Run a short series through a path and name what it does to a token stream, and the line that fixes it.

    Exit 0: it streams; 16: it holds the stream (the cause is named); 17: unsure (the runs disagree)."""
    from tokenpath.diagnose.measure import check_stub, is_stub, run_series
    from tokenpath.diagnose.report import check_proxy, diagnosis, dumps, lines
    from tokenpath.diagnose.series import plan
    from tokenpath.probe.client import ProbeConfig
    from tokenpath.probe.transport import TLSOptions

    target_url = url or os.environ.get("TOKENPATH_URL")
    if not target_url:
        raise UsageError("no URL: pass one or set TOKENPATH_URL")
    check_proxy(proxy)
    template = ProbeConfig(
        url=target_url,
        model=model,
        max_tokens=max_tokens,
        headers=tuple(parse_header_arg(h) for h in header or []),
        api_key=api_key(api_key_env),
        tls=TLSOptions(insecure=insecure, cacert=cacert),
        total_timeout_s=total_timeout,
    )
    template.target  # noqa: B018 - validates the URL before anything is sent
    if stub_url is not None:
        check_stub(stub_url)
    paced = stub_url is not None or is_stub(target_url)
    measured = run_series(template, plan(paced))
    result = diagnosis(target_url, paced, [m.figures for m in measured], [m.headers for m in measured], proxy)
    if json_out:
        print(dumps(result), flush=True)
    else:
        for line in lines(result):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    outcome = result.outcome()
    if outcome is not None:
        raise outcome
