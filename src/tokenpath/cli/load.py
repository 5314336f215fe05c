"""`tokenpath load`: flags → LoadConfig → LoadRunner → results.json, the table, the warnings, the --fail-on gate
(or --plan: the cores each role needs, nothing run)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tokenpath.cli import options
from tokenpath.cli.common import (
    JSON_HELP,
    api_key,
    console,
    handles_errors,
    refuse_unread,
    render_report,
    shown_console,
)
from tokenpath.errors import UsageError
from tokenpath.wire.request import parse_header_arg

if TYPE_CHECKING:
    from tokenpath.load.worker import JWTMinter
    from tokenpath.wire.httpversion import HttpVersion

# What --plan reads: the levels, the pacing that sets frames per second, one proxy, the per-frame costs (--json and
# --fail-on have their own refusal).
PLAN_READS = frozenset(
    {
        "plan",
        "concurrency",
        "proxy",
        "tokens",
        "reasoning_tokens",
        "interval_ms",
        "ttft_ms",
        "client_us_per_frame",
        "stub_us_per_frame",
        "proxy_us_per_frame",
        "json_out",
        "fail_on",
    }
)

# LoadConfig's fields whose flag has another name
RENAMES = {
    "targets": "proxy",
    "levels": "concurrency",
    "rates": "rate",
    "target_url": "target",
    "duration_s": "duration",
    "warmup_s": "warmup",
}


@handles_errors("load", RENAMES)
def load(
    proxy: Annotated[
        list[str] | None,
        typer.Option(help="Catalogue target, e.g. nginx, haproxy:http_no_delay, traefik@3.3.2; repeatable."),
    ] = None,
    concurrency: Annotated[
        str, typer.Option(help="Open streams per level, comma-separated (closed loop).")
    ] = "50,200,500",
    api: options.Api = None,
    accept_encoding: options.AcceptEncoding = None,
    http2: options.Http2 = False,
    h2_window: options.H2Window = None,
    http3: options.Http3 = False,
    h3_window: options.H3Window = None,
    transport: options.Transport = None,
    streams_per_connection: Annotated[
        int, typer.Option(help="--http2: streams at once per connection (more connections if the peer allows fewer).")
    ] = 1,
    warmup: Annotated[float, typer.Option(help="Seconds per level before measuring.")] = 2.0,
    duration: Annotated[float, typer.Option(help="Seconds measured per level.")] = 10.0,
    runs: Annotated[int, typer.Option(help="Runs per level and target (merged; spread in results.json).")] = 3,
    client_workers: Annotated[
        int, typer.Option(help="Client processes; 0 (default): half the cores the stub does not use.")
    ] = 0,
    stub_workers: Annotated[int, typer.Option(help="Stub processes (SO_REUSEPORT).")] = 1,
    ttft_ms: Annotated[
        float | None, typer.Option(help="The stub's delay before the first token \\[default: 90; --stub-url: its own].")
    ] = None,
    interval_ms: options.IntervalMs = None,
    tokens: Annotated[int | None, typer.Option(help="Tokens per stream \\[default: 128; --stub-url: its own].")] = None,
    heartbeat_ms: options.HeartbeatMs = None,
    reasoning_tokens: options.ReasoningTokens = None,
    first_event_bytes: options.FirstEventBytes = None,
    head_at: options.HeadAt = None,
    pause_ms: options.PauseMs = None,
    pause_after: options.PauseAfter = None,
    rate: Annotated[
        str | None, typer.Option(help="Open loop instead: Poisson arrivals per second per level, e.g. 20,50.")
    ] = None,
    max_in_flight: Annotated[int, typer.Option(help="Open loop: streams in flight before new ones wait.")] = 2000,
    target: Annotated[str | None, typer.Option(help="An external target URL (needs --stub-url).")] = None,
    stub_url: Annotated[str | None, typer.Option(help="The tokenpath stub the external target talks to.")] = None,
    header: Annotated[list[str] | None, typer.Option(help="--target: NAME:VALUE sent with every stream.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="--target: env var holding its Bearer token.")] = None,
    jwt_secret_env: Annotated[
        str | None, typer.Option(help="--target: env var holding an HS256 secret: a fresh JWT per stream.")
    ] = None,
    jwt_claims: Annotated[str | None, typer.Option(help="--target: JSON object of claims for those JWTs.")] = None,
    cacert: Annotated[str | None, typer.Option(help="--target https: CA bundle (PEM) to verify it with.")] = None,
    insecure: Annotated[bool, typer.Option(help="--target https: do not verify its certificate.")] = False,
    fail_on: Annotated[
        str | None,
        typer.Option(help="Rules, e.g. 'added_ttft_p99>5ms,frames_lost>0', on every target; exit 14 if breached."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    custom: Annotated[
        list[str] | None,
        typer.Option(
            help="LABEL.model=M, LABEL.header=NAME:VALUE, LABEL.api_key_env=VAR or LABEL.base_path=/p for "
            "a LABEL=COMMAND target; repeatable."
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(help="Client workers on Ray: auto, HOST:PORT, ray://HOST:PORT, or local:N simulated nodes."),
    ] = None,
    stub_node: Annotated[str | None, typer.Option(help="--cluster: the node (address) to run the stub on.")] = None,
    plan: Annotated[
        bool, typer.Option("--plan", help="Print the cores each role needs for these levels, run nothing.")
    ] = False,
    client_us_per_frame: Annotated[float | None, typer.Option(help="--plan: client CPU per frame (µs).")] = None,
    stub_us_per_frame: Annotated[float | None, typer.Option(help="--plan: stub CPU per frame (µs).")] = None,
    proxy_us_per_frame: Annotated[float | None, typer.Option(help="--plan: the proxy's CPU per frame (µs).")] = None,
    out: Annotated[str, typer.Option(help="Directory for results.json and table.md.")] = "out/load",
) -> None:
    """TTFT added by each target under concurrency, joined to the stub's write log, the direct path as the floor.
    The stub's options (--interval-ms ... --pause-after) start load's stub with them, or are checked against a
    --stub-url stub's own."""
    called = dict(locals())  # every flag as called: one this mode would not read is refused below
    from tokenpath.axes import API, DEFAULT_H2_WINDOW, TRANSPORT, transport_for
    from tokenpath.load import gate
    from tokenpath.load.runner import LoadConfig, LoadRunner, refuse_userinfo
    from tokenpath.probe.transport import TLSOptions
    from tokenpath.progress import escaped
    from tokenpath.report import load_table
    from tokenpath.results.model import dumps
    from tokenpath.stub.config import Pacing
    from tokenpath.wire.apis import Api

    refuse_userinfo(target, "--target")  # before any line could show it
    refuse_userinfo(stub_url, "--stub-url")
    if target is not None:  # before the direct path is measured: `ftp://x` was refused only after it
        from tokenpath.probe.transport import parse_target

        parse_target(target)
    fmt = API.read(api, "--api") if api is not None else Api.OPENAI
    # as probe and diagnose: a WebSocket-only API (realtime) is carried over WebSocket when no transport is named
    carrier = TRANSPORT.read(transport, "--transport") if transport is not None else transport_for(fmt)
    shown = shown_console(json_out)
    try:
        levels = tuple(int(x) for x in concurrency.split(","))
        rates = tuple(float(x) for x in rate.split(",")) if rate else ()
    except ValueError:
        raise UsageError("--concurrency and --rate take comma-separated numbers, e.g. 50,200,500") from None
    given = options.pacing(locals())  # the stub's pacing options the user gave
    pacing = replace(Pacing(), **given)  # the rest: the stub's defaults, or a --stub-url stub's own
    if plan:
        from tokenpath.load import plan as capacity

        if json_out or fail_on:
            raise UsageError("--json and --fail-on measure a run; --plan only prints the estimate")
        unread = [name for name in called if name not in PLAN_READS]
        refuse_unread(load, called, unread, "by --plan (it estimates from the levels, the stub's pacing and a proxy)")
        if proxy and len(proxy) > 1:
            raise UsageError("--plan estimates one --proxy at a time")
        # The same checks as a run's (levels >= 1, once each; a finite pacing in the stub's ranges): nothing starts.
        LoadConfig(targets=("direct",), levels=levels, pacing=pacing, client_workers=1)
        console.print(
            capacity.plan_table(
                levels,
                tokens=pacing.tokens + pacing.reasoning_tokens,  # frames, paced alike
                interval_ms=pacing.interval_ms,
                ttft_ms=pacing.ttft_ms,
                proxy=(proxy or ["gateway"])[-1],
                client_us=client_us_per_frame,
                stub_us=stub_us_per_frame,
                proxy_us=proxy_us_per_frame,
            )
        )
        console.print(capacity.PLAN_NOTE)
        return
    if client_us_per_frame is not None or stub_us_per_frame is not None or proxy_us_per_frame is not None:
        raise UsageError("--client/--stub/--proxy-us-per-frame go with --plan")
    if rate is None:
        refuse_unread(load, called, ("max_in_flight",), "without --rate (a closed loop holds --concurrency streams)")
    if (header or api_key_env or jwt_secret_env or jwt_claims or cacert or insecure) and not target:
        raise UsageError(
            "--header, --api-key-env, --jwt-secret-env, --cacert and --insecure are for an external --target"
        )
    if (cacert or insecure) and target and not target.startswith("https:"):
        raise UsageError(f"--cacert and --insecure are for an https --target, not {target}")
    rules = gate.parse_load_rules(fail_on) if fail_on is not None else ()
    cfg = LoadConfig(
        targets=("direct", *(proxy or [])),
        levels=levels,
        warmup_s=warmup,
        duration_s=duration,
        runs=runs,
        client_workers=client_workers,
        stub_workers=stub_workers,
        pacing=pacing,
        pacing_given=tuple(given),
        rates=rates,
        max_in_flight=max_in_flight,
        target_url=target,
        stub_url=stub_url,
        target_tls=TLSOptions(insecure=insecure, cacert=cacert),
        target_headers=tuple(parse_header_arg(h) for h in header or []),
        target_api_key=api_key(api_key_env) if api_key_env else None,
        target_jwt=_jwt_minter(jwt_secret_env, jwt_claims),
        cluster=cluster,
        stub_node=stub_node,
        custom=tuple(_custom_option(c, proxy or []) for c in custom or []),
        api=fmt,
        accept_encoding=accept_encoding,
        http_version=_http_version(http2, http3),
        h2_window=h2_window or DEFAULT_H2_WINDOW,
        streams_per_connection=streams_per_connection,
        transport=carrier,
        h3_window=h3_window or "default",
    )
    doc = LoadRunner(cfg, Path(out), shown).run()
    if json_out:
        print(dumps(doc), flush=True)
    shown.print(load_table.rich_table(doc))
    for line in load_table.warning_lines(doc):
        shown.print(line)
    shown.print(f"results: {escaped(Path(out) / 'results.json')}")
    render_report(out, shown)
    if doc.interrupted:  # SIGINT or SIGTERM: the rows measured are saved, the run is not whole (the gate says nothing)
        shown.print(f"load: interrupted; the rows measured so far are in {escaped(Path(out) / 'results.json')}")
        raise typer.Exit(130)
    gate.refuse_no_floor(doc)
    gate.finish(gate.check(rules, doc))


def _http_version(http2: bool, http3: bool) -> HttpVersion:
    from tokenpath.wire.httpversion import HttpVersion

    if http2 and http3:
        raise UsageError("--http2 and --http3: choose one")
    return HttpVersion.HTTP3 if http3 else HttpVersion.of(http2)


def _custom_option(text: str, proxies: list[str]) -> tuple[str, str, str]:
    name, sep, value = text.partition("=")
    label, dot, key = name.rpartition(".")
    if not sep or not dot or not label:
        raise UsageError(f"--custom {text!r}: expected LABEL.KEY=VALUE, e.g. mygw.model=gpt-4o-mini")
    if not any(p.partition("=")[0] == label and "{listen" in p for p in proxies):
        raise UsageError(f"--custom {text!r}: no --proxy {label}=COMMAND target")
    if key not in ("model", "header", "api_key_env", "base_path"):
        raise UsageError(f"--custom {text!r}: KEY is model, header, api_key_env or base_path")
    return label, key, value


def _jwt_minter(secret_env: str | None, claims: str | None) -> JWTMinter | None:
    from tokenpath.load.worker import JWTMinter

    if claims and not secret_env:
        raise UsageError("--jwt-claims needs --jwt-secret-env")
    if not secret_env:
        return None
    secret = os.environ.get(secret_env)
    if not secret:
        raise UsageError(f"--jwt-secret-env {secret_env}: that environment variable is not set")
    try:
        parsed = json.loads(claims) if claims else {}
    except ValueError as exc:
        raise UsageError(f"--jwt-claims is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise UsageError('--jwt-claims must be a JSON object, e.g. \'{"sub": "load"}\'')
    return JWTMinter(secret, tuple(parsed.items()))
