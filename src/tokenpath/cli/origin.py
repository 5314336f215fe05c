"""`tokenpath origin NAME`: a real inference server (origins/catalogue.py) started on a port, for any command to
target (probe, diagnose, monitor, a gateway's pool, `record`), until Ctrl-C."""

from __future__ import annotations

from typing import Annotated

import typer

from tokenpath.cli.common import announce, handles_errors
from tokenpath.hostport import check_port


@handles_errors("origin")
def origin(
    name: Annotated[str, typer.Argument(help="llama-server or llama-cpp-python (built by scripts/build-llama).")],
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless you mean otherwise).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 0,
    threads: Annotated[
        int | None, typer.Option(help="CPU threads \\[default: this machine's cores, at most 8].")
    ] = None,
) -> None:
    """Start a real inference server as an origin: its version, model, settings and what it does besides pacing
    (its HTTP/1.0 framing, the headers a path acts on) on its `listening on` line; stopped with everything it
    started on Ctrl-C or SIGTERM, also while it is still loading."""
    from dataclasses import replace

    from tokenpath.origins.catalogue import Settings, lookup
    from tokenpath.origins.process import serve

    settings = Settings.for_this_machine()
    if threads is not None:
        settings = replace(settings, threads=threads)
    serve(lookup(name), settings, host, check_port(port, "--port"), announce("origin"))
