"""`tokenpath gateway`: a config file and the flags on top of it (Overrides) → GatewayConfig → gateway.server.run."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer

from tokenpath.cli.common import announce, handles_errors, refuse_unread

# GatewayConfig's fields whose flag has another name
RENAMES = {"upstreams": "upstream", "secret_env": "jwt_secret_env", "public_key_file": "jwt_public_key"}


def _given_as_flags(params: dict[str, Any]) -> set[str] | None:
    """With --config, a field is named as a flag only when this call set it by one: the rest are the file's keys,
    named as the file spells them (a file's `public_key_file` that holds a private key is not --jwt-public-key)."""
    if params.get("config") is None:
        return None
    defaults = {name: p.default for name, p in inspect.signature(gateway).parameters.items()}
    given = {name for name, value in params.items() if value not in (None, (), []) and value != defaults.get(name)}
    return given | {field for field, param in RENAMES.items() if param in given}


@handles_errors("gateway", RENAMES, _given_as_flags)
def gateway(
    config: Annotated[str | None, typer.Option(help="Gateway config (TOML); the flags below override it.")] = None,
    listen: Annotated[str | None, typer.Option(help="HOST:PORT (default 127.0.0.1:8080).")] = None,
    upstream: Annotated[list[str] | None, typer.Option(help="Upstream base URL; repeatable: one pool.")] = None,
    strategy: Annotated[str, typer.Option(help="round_robin, least_outstanding or p2c_ewma.")] = "round_robin",
    jwt_secret_env: Annotated[str | None, typer.Option(help="Env var holding the HS256/384/512 secret.")] = None,
    jwt_public_key: Annotated[str | None, typer.Option(help="PEM public key file (RS/PS/ES/EdDSA).")] = None,
    jwks_url: Annotated[str | None, typer.Option(help="JWKS URL (cached, refreshed in the background).")] = None,
    audience: Annotated[str | None, typer.Option(help="Required `aud`.")] = None,
    issuer: Annotated[str | None, typer.Option(help="Required `iss`.")] = None,
    no_auth: Annotated[bool, typer.Option("--no-auth", help="Serve without authentication (logged loudly).")] = False,
    workers: Annotated[int | None, typer.Option(help="Processes sharing the port (SO_REUSEPORT).")] = None,
    metrics_listen: Annotated[str | None, typer.Option(help="HOST:PORT for Prometheus /metrics.")] = None,
    tls_cert: Annotated[
        str | None, typer.Option(help="PEM certificate chain: serve TLS (HTTP/1.1 and h2 by ALPN).")
    ] = None,
    tls_key: Annotated[str | None, typer.Option(help="PEM private key of --tls-cert (unencrypted).")] = None,
    loop: Annotated[str, typer.Option(help="Event loop: uvloop or asyncio.")] = "uvloop",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error (JSON lines on stderr).")] = "info",
) -> None:
    """A streaming OpenAI gateway: JWT auth, backend pools, failover before the first byte, per-read relay."""
    given = dict(locals())
    from tokenpath.gateway import config as gwconfig
    from tokenpath.gateway.server import run as run_gateway
    from tokenpath.jsonlog import check_level

    check_level(log_level)  # before a worker starts: its refusal would come from each worker

    if not upstream:  # --strategy is the --upstream pool's
        refuse_unread(gateway, given, ("strategy",), "without --upstream (a config file's [[pool]] says its own)")
    overrides = gwconfig.Overrides(
        listen=listen,
        upstreams=tuple(upstream or ()),
        strategy=strategy,
        metrics_listen=metrics_listen,
        workers=workers,
        no_auth=no_auth,
        secret_env=jwt_secret_env,
        public_key_file=jwt_public_key,
        jwks_url=jwks_url,
        audience=audience,
        issuer=issuer,
        tls_cert=tls_cert,
        tls_key=tls_key,
    )
    cfg = gwconfig.from_dict(overrides.apply(gwconfig.read_toml(config) if config else {}))
    run_gateway(cfg, announce("gateway"), loop, log_level)
