"""`tokenpath relay`: flags → RelayConfig → controls.relay.serve."""

from __future__ import annotations

from typing import Annotated

import typer

from tokenpath.cli.common import announce, handles_errors, refuse_unread
from tokenpath.controls.policies import CORK_BYTES, CORK_MS
from tokenpath.hostport import parse_hostport


@handles_errors("relay")
def relay(
    upstream: Annotated[str, typer.Option(help="HOST:PORT to forward to.")],
    mode: Annotated[
        str,
        typer.Option(
            help="pass, buffer, cork, gzip-hold (gzip the body for a client sending Accept-Encoding: gzip, no "
            "flush) or gzip-flush (the same, flushed after every upstream read)."
        ),
    ] = "pass",
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on; port 0 picks one.")] = "127.0.0.1:0",
    cork_bytes: Annotated[int, typer.Option(help="cork: flush once this many bytes are held.")] = CORK_BYTES,
    cork_ms: Annotated[float, typer.Option(help="cork: flush this long after the first held byte.")] = CORK_MS,
    tls_cert: Annotated[str | None, typer.Option(help="Terminate TLS with this certificate (PEM).")] = None,
    tls_key: Annotated[str | None, typer.Option(help="Private key (PEM) for --tls-cert.")] = None,
    loop: Annotated[str, typer.Option(help="Event loop: uvloop or asyncio.")] = "uvloop",
) -> None:
    """A relay that delays or compresses in a known way: the control the instrument must detect."""
    given = dict(locals())
    from tokenpath.controls.relay import RelayConfig, serve

    if mode != "cork":
        refuse_unread(relay, given, ("cork_bytes", "cork_ms"), f"by --mode {mode} (only cork holds bytes)")

    listen_host, listen_port = parse_hostport(listen, "--listen")
    up_host, up_port = parse_hostport(upstream, "--upstream")
    cfg = RelayConfig(
        upstream_host=up_host,
        upstream_port=up_port,
        mode=mode,  # type: ignore[arg-type]
        listen_host=listen_host,
        listen_port=listen_port,
        cork_bytes=cork_bytes,
        cork_ms=cork_ms,
        tls_cert=tls_cert,
        tls_key=tls_key,
    )
    serve(cfg, announce("relay"), loop)
