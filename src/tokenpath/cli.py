"""The `tokenpath` command. Thin: it turns flags into config objects and calls the library."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from tokenpath import __version__
from tokenpath.controls.policies import CORK_BYTES, CORK_MS
from tokenpath.errors import TokenpathError, UsageError
from tokenpath.experiment.grid import DEFAULT_INTERVALS, DEFAULT_SIZES, as_list
from tokenpath.wire.request import parse_header_arg

if TYPE_CHECKING:
    from tokenpath.load.worker import JWTMinter
    from tokenpath.results.model import MatrixResults

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Measure what a proxy does to an LLM token stream.",
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)
# Off a terminal (a pipe, a file, CI) rich would cut every table to 80 columns ("nginx proxy_…"); there a table is as
# wide as its cells and no line wraps. $COLUMNS, when set, still decides.
UNBOUNDED_WIDTH = 100_000


def _fit_off_terminal() -> None:
    for c in (console, err_console):
        if not c.is_terminal and "COLUMNS" not in os.environ:
            c.width = UNBOUNDED_WIDTH


def _fail(command: str, exc: TokenpathError, flags: bool = True) -> NoReturn:
    """`flags=False` when the input was a file: its keys are named as written there (`api_key_env`)."""
    message = _as_flags(str(exc)) if flags else str(exc)
    err_console.print(f"tokenpath {command}: error: {message}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


_FIELD = re.compile(r"`([a-z][a-z0-9_]*)`")


def _as_flags(message: str) -> str:
    """Library messages name config fields in backticks (`frame_bytes`); on the command line each is the flag of
    the same name (--frame-bytes), so the user reads what to change where they typed it."""
    return _FIELD.sub(lambda m: "--" + m.group(1).replace("_", "-"), message)


def _host_port(value: str, flag: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"{flag} {value!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def _announce(command: str) -> Callable[[str], None]:
    """The line a parent process waits for: 'tokenpath stub: listening on URL ...'."""

    def say(line: str) -> None:
        print(f"tokenpath {command}: {line}", flush=True)

    return say


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _fit_off_terminal()
    if version:
        print(__version__)
        raise typer.Exit()


@app.command()
def stub(
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless you mean otherwise).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 8000,
    ttft_ms: Annotated[float, typer.Option(help="Delay before the first token.")] = 90.0,
    interval_ms: Annotated[float, typer.Option(help="Time between tokens.")] = 14.0,
    tokens: Annotated[int, typer.Option(help="Tokens per response (max_tokens can only lower it).")] = 128,
    frame_bytes: Annotated[int | None, typer.Option(help="Pad every frame to exactly this many bytes.")] = None,
    jitter: Annotated[str | None, typer.Option(help="Random offset per write: uniform:MS, normal:MS, exp:MS.")] = None,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE added to responses; repeatable.")] = None,
    format: Annotated[str, typer.Option(help="openai (chunks) or plain (bare `data: <n>` frames).")] = "openai",
    model: Annotated[str, typer.Option(help="Model name listed by /v1/models.")] = "tokenpath-stub",
    workers: Annotated[int, typer.Option(help="Processes sharing the port (SO_REUSEPORT).")] = 1,
    seed: Annotated[int | None, typer.Option(help="Seed for --jitter, for repeatable schedules.")] = None,
    loop: Annotated[str, typer.Option(help="Event loop: uvloop or asyncio.")] = "uvloop",
    priority: Annotated[
        str, typer.Option(help="auto (SCHED_FIFO when permitted), realtime (required) or normal scheduling.")
    ] = "auto",
    clock_offset_ms: Annotated[float, typer.Option(hidden=True, help="Test only: report times this far ahead.")] = 0.0,
) -> None:
    """Serve an OpenAI-compatible SSE model stub with exact pacing and an audit log of every write."""
    from tokenpath.stub.config import Jitter, StubConfig
    from tokenpath.stub.server import run

    try:
        cfg = StubConfig(
            host=host, port=port, ttft_ms=ttft_ms, interval_ms=interval_ms, tokens=tokens, frame_bytes=frame_bytes,
            jitter=Jitter.parse(jitter) if jitter else None, headers=tuple(parse_header_arg(h) for h in header or []),
            format=format,  # type: ignore[arg-type]
            model=model, workers=workers, seed=seed, priority=priority,  # type: ignore[arg-type]
            clock_offset_ms=clock_offset_ms,
        )  # fmt: skip
        run(cfg, _announce("stub"), loop)
    except TokenpathError as exc:
        _fail("stub", exc)


@app.command()
def probe(
    url: Annotated[str | None, typer.Argument(help="Endpoint or base URL; default $TOKENPATH_URL.")] = None,
    runs: Annotated[int, typer.Option(help="Streams to measure, one after another.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print the machine-readable result.")] = False,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE request header; repeatable.")] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Env var holding the API key (default: TOKENPATH_API_KEY if set).")
    ] = None,
    model: Annotated[str, typer.Option(help="Model to request.")] = "tokenpath-stub",
    prompt: Annotated[str | None, typer.Option(help="User message.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="max_tokens in the request.")] = None,
    body_json: Annotated[
        str | None,
        typer.Option(help="JSON object merged into the request body (e.g. the stub's pacing)."),
    ] = None,
    insecure: Annotated[bool, typer.Option(help="Do not verify the TLS certificate.")] = False,
    cacert: Annotated[str | None, typer.Option(help="CA bundle (PEM) to verify the server with.")] = None,
    connect_timeout: Annotated[float, typer.Option(help="Seconds to connect.")] = 10.0,
    first_byte_timeout: Annotated[float, typer.Option(help="Seconds to the first response byte.")] = 30.0,
    idle_timeout: Annotated[float, typer.Option(help="Longest silence between frames, seconds.")] = 30.0,
    total_timeout: Annotated[float, typer.Option(help="Longest a stream may take, seconds.")] = 600.0,
) -> None:
    """Measure one stream at a time through a raw socket: reads, frames, frames per read, TTFB, TTFT, bursts."""
    from tokenpath.probe.client import ProbeConfig, probe_stream
    from tokenpath.probe.metrics import probe_results, run_metrics
    from tokenpath.probe.table import probe_table
    from tokenpath.probe.transport import TLSOptions
    from tokenpath.wire.request import DEFAULT_PROMPT

    try:
        target_url = url or os.environ.get("TOKENPATH_URL")
        if not target_url:
            raise UsageError("no URL: pass one or set TOKENPATH_URL")
        if runs < 1:
            raise UsageError("--runs must be >= 1")
        cfg = ProbeConfig(
            url=target_url, model=model, prompt=prompt or DEFAULT_PROMPT, max_tokens=max_tokens,
            headers=tuple(parse_header_arg(h) for h in header or []), api_key=_api_key(api_key_env),
            tls=TLSOptions(insecure=insecure, cacert=cacert), connect_timeout_s=connect_timeout,
            first_byte_timeout_s=first_byte_timeout, idle_timeout_s=idle_timeout, total_timeout_s=total_timeout,
            extra_body=_body_json(body_json),
        )  # fmt: skip
        cfg.target  # noqa: B018 - validates the URL before anything is sent
        results = []
        for _ in range(runs):
            results.append(run_metrics(probe_stream(cfg)))
    except TokenpathError as exc:
        _fail("probe", exc)
    probed = probe_results(target_url, results)
    if json_out:
        print(json.dumps(probed.to_json(), indent=2))
    else:
        console.print(probe_table(probed))


def _body_json(text: str | None) -> tuple[tuple[str, object], ...]:
    if not text:
        return ()
    try:
        extra = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--body-json is not JSON: {exc}") from None
    if not isinstance(extra, dict):
        raise UsageError("--body-json must be a JSON object")
    return tuple(extra.items())


def _render_report(out: str, to: Console | None = None) -> None:
    """Every run ends with its report. results.json is already on disk, so a failure here loses nothing."""
    from pathlib import Path

    from tokenpath.report.render import write_report

    try:
        written = write_report(Path(out))
    except Exception as exc:  # a long run must not end in a traceback after its results are safe
        err_console.print(f"[yellow]report not written ({exc}); results.json is intact: tokenpath report {out}[/]")
        return
    (to or console).print(f"report: {written['html']} (also {written['md'].name}, {written['csv'].name})")


def _print_document(doc: MatrixResults) -> None:
    """--json: the results document (results.json's content) alone on stdout; everything else goes to stderr."""
    print(json.dumps(doc.to_json(), indent=1, default=str), flush=True)


def _print_plan(
    levels: tuple[int, ...], tokens: int, interval_ms: float, ttft_ms: float, proxy: str,
    client_us: float | None, stub_us: float | None, proxy_us: float | None,
) -> None:  # fmt: skip
    from rich.table import Table

    from tokenpath.load import plan as capacity

    name = proxy.partition(":")[0]
    rows = capacity.plan(levels, tokens=tokens, interval_ms=interval_ms, ttft_ms=ttft_ms,
                         client_us=client_us or capacity.CLIENT_US, stub_us=stub_us or capacity.STUB_US,
                         proxy=name, proxy_us=proxy_us)  # fmt: skip
    table = Table(title=f"load --plan: {tokens} tokens every {interval_ms:g} ms after {ttft_ms:g} ms, "
                        f"each role under {capacity.UTILISATION:.0%} of its cores")  # fmt: skip
    for col in ("streams", "frames/s", "role", "µs/frame", "cores", "processes", "why"):
        table.add_column(col, justify="left" if col in ("role", "why") else "right")
    for level in rows:
        for i, r in enumerate(level.roles):
            table.add_row(str(level.streams) if i == 0 else "", f"{level.frames_per_s:,.0f}" if i == 0 else "",
                          r.role, f"{r.us_per_frame:g}", f"{r.cores:.2f}", str(r.processes), r.why)  # fmt: skip
    console.print(table)
    console.print("Costs measured on a 2-core VM over loopback (bench/RESULTS.md and docs/scale.md in tokenpath's "
                  "source repository, whose bench/client_scaling.py measures the client's); pass yours with "
                  "--client/--stub/--proxy-us-per-frame.")  # fmt: skip


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


def _api_key(env_name: str | None) -> str | None:
    if env_name:
        value = os.environ.get(env_name)
        if not value:
            raise UsageError(f"--api-key-env {env_name}: that environment variable is not set")
        return value
    return os.environ.get("TOKENPATH_API_KEY") or None


@app.command()
def relay(
    upstream: Annotated[str, typer.Option(help="HOST:PORT to forward to.")],
    mode: Annotated[str, typer.Option(help="pass, buffer or cork.")] = "pass",
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on; port 0 picks one.")] = "127.0.0.1:0",
    cork_bytes: Annotated[int, typer.Option(help="cork: flush once this many bytes are held.")] = CORK_BYTES,
    cork_ms: Annotated[float, typer.Option(help="cork: flush this long after the first held byte.")] = CORK_MS,
    tls_cert: Annotated[str | None, typer.Option(help="Terminate TLS with this certificate (PEM).")] = None,
    tls_key: Annotated[str | None, typer.Option(help="Private key (PEM) for --tls-cert.")] = None,
    loop: Annotated[str, typer.Option(help="Event loop: uvloop or asyncio.")] = "uvloop",
) -> None:
    """A byte-level TCP relay that buffers in a known way: the control the instrument must detect."""
    from tokenpath.controls.relay import RelayConfig, serve

    try:
        listen_host, listen_port = _host_port(listen, "--listen")
        up_host, up_port = _host_port(upstream, "--upstream")
        cfg = RelayConfig(
            upstream_host=up_host, upstream_port=up_port, mode=mode,  # type: ignore[arg-type]
            listen_host=listen_host, listen_port=listen_port, cork_bytes=cork_bytes, cork_ms=cork_ms,
            tls_cert=tls_cert, tls_key=tls_key,
        )  # fmt: skip
        serve(cfg, _announce("relay"), loop)
    except TokenpathError as exc:
        _fail("relay", exc)


@app.command()
def matrix(
    experiment: Annotated[str, typer.Argument(help="Experiment file (TOML); see examples/.")],
    out: Annotated[str, typer.Option(help="Directory for results.json, table.md, results.csv.")] = "out/matrix",
    force: Annotated[bool, typer.Option(help="Measure even if certification fails (tables say UNCERTIFIED).")] = False,
    emit_compose: Annotated[
        str | None, typer.Option(help="Write docker-compose.yml + configs for this experiment to DIR; run nothing.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the results document (results.json) on stdout; the rest on stderr.")
    ] = False,
) -> None:
    """Run a buffering experiment: real proxies x conditions x runs, certified, with exclusions."""
    from pathlib import Path

    from tokenpath.experiment import spec
    from tokenpath.experiment.runner import MatrixRunner
    from tokenpath.results import tables

    shown = err_console if json_out else console  # --json: stdout carries the document only
    try:
        exp = spec.load(experiment)
        if emit_compose:
            from tokenpath.experiment.compose import emit, source_root

            path, skipped = emit(exp, Path(emit_compose), source_root())
            for line in skipped:
                console.print(f"[yellow]not exported:[/] {line}")
            console.print(f"wrote {path}; run it with: docker compose -f {path} up --build "
                          "--abort-on-container-exit --exit-code-from matrix (results in "
                          f"{path.parent / 'results'})")  # fmt: skip
            return
        runner = MatrixRunner(exp, Path(out), force=force, console=shown)
        doc = runner.run()
    except TokenpathError as exc:
        _fail("matrix", exc)
    if json_out:
        _print_document(doc)
    shown.print(tables.rich_table(doc))
    shown.print(f"results: {Path(out) / 'results.json'}")
    _render_report(out, shown)
    if doc.interrupted:
        raise typer.Exit(130)


@app.command()
def sweep(
    proxy: Annotated[str, typer.Argument(help="Catalogue proxy to sweep, e.g. haproxy.")],
    variant: Annotated[str, typer.Option(help="Its variant.")] = "stock",
    link: Annotated[str, typer.Option(help="loopback or veth (1,500-byte MTU; needs root).")] = "veth",
    tls: Annotated[bool, typer.Option(help="Terminate TLS at the proxy.")] = False,
    sizes: Annotated[str, typer.Option(help="Frame sizes in bytes, comma-separated.")] = as_list(DEFAULT_SIZES),
    intervals: Annotated[str, typer.Option(help="Intervals in ms, comma-separated.")] = as_list(DEFAULT_INTERVALS),
    runs: Annotated[int, typer.Option(help="Streams per point.")] = 3,
    frames: Annotated[int, typer.Option(help="Frames per stream.")] = 30,
    out: Annotated[str, typer.Option(help="Directory for results.json.")] = "out/sweep",
    force: Annotated[bool, typer.Option(help="Measure even if certification fails.")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the results document (results.json) on stdout; the rest on stderr.")
    ] = False,
) -> None:
    """Sweep frame size x interval through one proxy and infer what makes it flush (size? timer?)."""
    from pathlib import Path

    from tokenpath.experiment.sweep import run_sweep, sweep_experiment, sweep_table

    shown = err_console if json_out else console  # --json: stdout carries the document only
    try:
        try:
            size_list = [int(x) for x in sizes.split(",")]
            interval_list = [float(x) for x in intervals.split(",")]
        except ValueError:
            raise UsageError("--sizes and --intervals take comma-separated numbers") from None
        exp = sweep_experiment(proxy, variant, link, tls, size_list, interval_list, runs, frames)  # type: ignore[arg-type]
        exp.proxy(proxy).variant(variant)
        doc = run_sweep(exp, proxy, Path(out), shown, force)
    except TokenpathError as exc:
        _fail("sweep", exc)
    if json_out:
        _print_document(doc)
    shown.print(sweep_table(doc, exp.name))
    inferred = doc.inferred
    if inferred is not None:
        shown.print(f"[bold]{proxy} {inferred.rule or ''}[/] ({inferred.explanation})")
    shown.print(f"results: {Path(out) / 'results.json'}")
    _render_report(out, shown)


@app.command()
def load(
    proxy: Annotated[
        list[str] | None,
        typer.Option(help="Catalogue target, e.g. nginx, node, haproxy:http_no_delay; repeatable."),
    ] = None,
    concurrency: Annotated[
        str, typer.Option(help="Open streams per level, comma-separated (closed loop).")
    ] = "50,200,500",
    warmup: Annotated[float, typer.Option(help="Seconds per level before measuring.")] = 2.0,
    duration: Annotated[float, typer.Option(help="Seconds measured per level.")] = 10.0,
    runs: Annotated[int, typer.Option(help="Runs per level and target (merged; spread in results.json).")] = 3,
    client_workers: Annotated[
        int, typer.Option(help="Client processes; 0 (default): half the cores the stub does not use.")
    ] = 0,
    stub_workers: Annotated[int, typer.Option(help="Stub processes (SO_REUSEPORT).")] = 1,
    ttft_ms: Annotated[
        float | None, typer.Option(help="The stub's delay before the first token [default: 90; --stub-url: its own].")
    ] = None,
    interval_ms: Annotated[
        float | None, typer.Option(help="The stub's token interval [default: 14; --stub-url: its own].")
    ] = None,
    tokens: Annotated[int | None, typer.Option(help="Tokens per stream [default: 128; --stub-url: its own].")] = None,
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
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the results document (results.json's) on stdout; the rest on stderr.")
    ] = False,
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
    """TTFT added by each target under concurrency, joined to the stub's write log, the direct path as the floor."""
    from pathlib import Path

    from tokenpath.load import gate
    from tokenpath.load.runner import LoadConfig, LoadRunner
    from tokenpath.probe.transport import TLSOptions
    from tokenpath.results import load_table

    shown = err_console if json_out else console  # --json: stdout carries the document only
    try:
        try:
            levels = tuple(int(x) for x in concurrency.split(","))
            rates = tuple(float(x) for x in rate.split(",")) if rate else ()
        except ValueError:
            raise UsageError("--concurrency and --rate take comma-separated numbers, e.g. 50,200,500") from None
        given = {"tokens": tokens, "interval_ms": interval_ms, "ttft_ms": ttft_ms}
        pacing: dict[str, Any] = {k: v for k, v in given.items() if v is not None}  # the rest: defaults, or the stub's
        if plan:
            _print_plan(levels, tokens or 128, interval_ms or 14.0, ttft_ms or 90.0, (proxy or ["gateway"])[-1],
                        client_us_per_frame, stub_us_per_frame, proxy_us_per_frame)  # fmt: skip
            return
        if client_us_per_frame or stub_us_per_frame or proxy_us_per_frame:
            raise UsageError("--client/--stub/--proxy-us-per-frame go with --plan")
        if (header or api_key_env or jwt_secret_env or jwt_claims or cacert or insecure) and not target:
            raise UsageError("--header, --api-key-env, --jwt-secret-env, --cacert and --insecure are for an external "
                             "--target")  # fmt: skip
        if (cacert or insecure) and target and not target.startswith("https:"):
            raise UsageError(f"--cacert and --insecure are for an https --target, not {target}")
        rules = gate.parse_load_rules(fail_on) if fail_on is not None else ()
        cfg = LoadConfig(
            targets=("direct", *(proxy or [])), levels=levels, warmup_s=warmup, duration_s=duration, runs=runs,
            client_workers=client_workers, stub_workers=stub_workers, **pacing, pacing_given=tuple(pacing),
            rates=rates, max_in_flight=max_in_flight, target_url=target, stub_url=stub_url,
            target_tls=TLSOptions(insecure=insecure, cacert=cacert),
            target_headers=tuple(parse_header_arg(h) for h in header or []),
            target_api_key=_api_key(api_key_env) if api_key_env else None,
            target_jwt=_jwt_minter(jwt_secret_env, jwt_claims), cluster=cluster, stub_node=stub_node,
            custom=tuple(_custom_option(c, proxy or []) for c in custom or []),
        )  # fmt: skip
        doc = LoadRunner(cfg, Path(out), shown).run()
    except TokenpathError as exc:
        _fail("load", exc)
    if json_out:
        print(json.dumps(doc.to_json(), indent=1, default=str), flush=True)
    shown.print(load_table.rich_table(doc))
    for row in doc.levels:
        for w in row.warnings:
            shown.print(f"[yellow]{row.target} @ {row.level_label}: {w.message}[/] ({w.remedy})")
    shown.print(f"results: {Path(out) / 'results.json'}")
    _render_report(out, shown)
    try:
        gate.finish(gate.check(rules, doc))
    except TokenpathError as exc:
        _fail("load", exc)


@app.command()
def demo(
    runs: Annotated[int, typer.Option(help="Streams per path.")] = 3,
    out: Annotated[str, typer.Option(help="Directory for the results.")] = "out/demo",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the results document (results.json) on stdout; the rest on stderr.")
    ] = False,
) -> None:
    """A quick certified matrix: every installed proxy, stock and with its fix, plus the controls."""
    from pathlib import Path

    from tokenpath.demo import run_demo
    from tokenpath.results import tables

    shown = err_console if json_out else console  # --json: stdout carries the document only
    try:
        doc = run_demo(Path(out), shown, runs)
    except TokenpathError as exc:
        _fail("demo", exc)
    if json_out:
        _print_document(doc)
    shown.print(tables.rich_table(doc))
    shown.print(f"results: {Path(out) / 'results.json'}")
    _render_report(out, shown)
    if not doc.certification.passed:
        raise typer.Exit(1)


@app.command()
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
    loop: Annotated[str, typer.Option(help="Event loop: uvloop or asyncio.")] = "uvloop",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error (JSON lines on stderr).")] = "info",
) -> None:
    """A streaming OpenAI gateway: JWT auth, backend pools, failover before the first byte, per-read relay."""
    from tokenpath.gateway import config as gwconfig
    from tokenpath.gateway.server import run as run_gateway

    try:
        overrides = gwconfig.Overrides(
            listen=listen, upstreams=tuple(upstream or ()), strategy=strategy, metrics_listen=metrics_listen,
            workers=workers, no_auth=no_auth, secret_env=jwt_secret_env, public_key_file=jwt_public_key,
            jwks_url=jwks_url, audience=audience, issuer=issuer,
        )  # fmt: skip
        cfg = gwconfig.from_dict(overrides.apply(gwconfig.read_toml(config) if config else {}))
        run_gateway(cfg, _announce("gateway"), loop, log_level)
    except TokenpathError as exc:
        _fail("gateway", exc)


@app.command()
def monitor(
    config: Annotated[str | None, typer.Argument(help="Monitor config (TOML); or one target by --url.")] = None,
    url: Annotated[str | None, typer.Option(help="One target's endpoint or base URL (instead of a config).")] = None,
    direct_url: Annotated[str | None, typer.Option(help="The same model around the path, for added TTFT.")] = None,
    name: Annotated[str, typer.Option(help="The target's label with --url.")] = "target",
    model: Annotated[str | None, typer.Option(help="Model to request (--url).")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Env var holding the API key (--url).")] = None,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE request header (--url); repeatable.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="max_tokens per probe (--url; default 32).")] = None,
    body_json: Annotated[str | None, typer.Option(help="JSON object merged into each request (--url).")] = None,
    cacert: Annotated[str | None, typer.Option(help="CA bundle (PEM) for https targets (--url).")] = None,
    insecure: Annotated[bool, typer.Option(help="Do not verify TLS certificates (--url).")] = False,
    interval: Annotated[float | None, typer.Option(help="Seconds between probes of a target (default 15).")] = None,
    metrics_listen: Annotated[
        str | None, typer.Option(help="HOST:PORT for Prometheus /metrics (default 127.0.0.1:9465).")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Probe every target --probes times, summarise, exit.")] = False,
    probes: Annotated[int, typer.Option(help="--once: cycles per target.")] = 5,
    fail_on: Annotated[
        str | None, typer.Option(help="--once: rules, e.g. 'added_ttft_p95>50ms,fpr>1.5'; exit 14 if breached.")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error (JSON lines on stderr).")] = "info",
    json_out: Annotated[bool, typer.Option("--json", help="--once: print the summary as JSON.")] = False,
) -> None:
    """Watch TTFT from outside: a synthetic client that probes each target on a schedule, for Prometheus."""
    from tokenpath.jsonlog import configure_logging
    from tokenpath.monitor import config as moncfg
    from tokenpath.monitor import service
    from tokenpath.monitor.rules import parse_rules
    from tokenpath.monitor.table import summary_json, summary_table

    try:
        if (config is None) == (url is None):
            raise UsageError("give a monitor config file or --url (one target), not both or neither")
        if fail_on and not once:
            raise UsageError("--fail-on goes with --once (a long-running monitor alerts through Prometheus)")
        if json_out and not once:
            raise UsageError("--json goes with --once (a long-running monitor serves its figures on /metrics)")
        one = [_monitor_target(name, url or "", direct_url, model, api_key_env, header, max_tokens, body_json,
                               cacert, insecure)] if url else []  # fmt: skip
        data = moncfg.read_toml(config) if config else {"target": one}
        settings: object = data.get("monitor", {})
        if isinstance(settings, dict):  # flags win over the file; a malformed table is from_dict's to name
            settings = {**settings, **({"interval_s": interval} if interval is not None else {}),
                        **({"metrics_listen": metrics_listen} if metrics_listen is not None else {})}  # fmt: skip
        cfg = moncfg.from_dict({**data, "monitor": settings}, where=f"monitor config {config}" if config else "--url")
        rules = parse_rules(fail_on) if fail_on else ()
        configure_logging(log_level)
        if not once:
            service.serve(cfg, _announce("monitor"))
            return
        summaries, breaches = service.once(cfg, probes, rules)
        if json_out:
            print(json.dumps(summary_json(summaries, breaches), indent=1), flush=True)
        else:
            console.print(summary_table(summaries))
        service.finish(breaches)
    except TokenpathError as exc:
        _fail("monitor", exc, flags=config is None)  # a config file's keys are named as the file spells them


def _monitor_target(
    name: str, url: str, direct_url: str | None, model: str | None, api_key_env: str | None,
    header: list[str] | None, max_tokens: int | None, body_json: str | None, cacert: str | None, insecure: bool,
) -> dict[str, object]:  # fmt: skip
    target: dict[str, object] = {"name": name, "url": url, "insecure": insecure,
                                 "headers": dict(parse_header_arg(h) for h in header or []),
                                 "body": dict(_body_json(body_json))}  # fmt: skip
    for key, value in (("direct_url", direct_url), ("model", model), ("api_key_env", api_key_env),
                       ("max_tokens", max_tokens), ("cacert", cacert)):  # fmt: skip
        if value is not None:
            target[key] = value
    return target


@app.command()
def report(
    results: Annotated[str, typer.Argument(help="A results directory (or its results.json).")],
    compare: Annotated[str | None, typer.Option(help="Another results directory to show side by side.")] = None,
    format: Annotated[list[str] | None, typer.Option(help="html, md or csv; repeatable. Default: all three.")] = None,
    out: Annotated[str | None, typer.Option(help="Directory to write to (default: beside results.json).")] = None,
    screenshot: Annotated[
        str | None, typer.Option(help="Also save a PNG of the page rendered by headless Chromium.")
    ] = None,
) -> None:
    """Render results.json as one self-contained HTML page (inline SVG charts), Markdown and CSV."""
    from pathlib import Path

    from tokenpath.report import browser
    from tokenpath.report.render import FORMATS, write_report

    try:
        written = write_report(
            Path(results), Path(compare) if compare else None, format or FORMATS, Path(out) if out else None
        )
        for fmt, path in written.items():
            console.print(f"{fmt}: {path}")
        if screenshot:
            if "html" not in written:
                raise UsageError("--screenshot needs the html format")
            console.print(f"screenshot: {browser.screenshot(written['html'], Path(screenshot))}")
    except TokenpathError as exc:
        _fail("report", exc)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
