"""`tokenpath monitor`: a config file or one --url target, the flags on top of it (Overrides) → MonitorConfig →
the service (long-running), or --once: N probes per target, the summary and the --fail-on gate; or --exporter:
targets from Prometheus (/probe?target=...), modules and --allow → ExporterConfig → the exporter."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tokenpath.cli import options
from tokenpath.cli.common import announce, body_json, console, err_console, handles_errors, refuse_unread
from tokenpath.errors import UsageError
from tokenpath.wire.request import parse_header_arg

FLAGS_ONLY = ("fail_on", "probes", "once", "json_out", "log_level")  # never in a config file
EXPORTER_FLAGS = ("allow", "max_concurrency", "metric_names", "metrics_listen", "log_level")  # the rest: modules file
# The one --url target's request: a config file's [[target]] tables and the exporter's modules say their own.
URL_TARGET = ("direct_url", "name", "model", "api", "accept_encoding", "http2", "h2_window", "http3", "h3_window",
              "transport", "api_key_env", "header", "max_tokens", "body_json_text", "cacert", "insecure")  # fmt: skip
ONCE_ONLY = ("probes", "fail_on", "json_out")
SERVICE_ONLY = ("interval", "metrics_listen", "metric_names", "otlp_endpoint")  # --once: back to back, no /metrics


def _with_config(params: dict[str, Any]) -> tuple[str, ...] | None:
    """With a config file, its keys are named as the file spells them (`api_key_env`); only the flags no file has
    are shown as flags. The exporter's modules file is named the same way."""
    if params.get("exporter"):
        return EXPORTER_FLAGS
    return FLAGS_ONLY if params.get("config") is not None else None


@handles_errors("monitor", {"interval_s": "interval"}, _with_config)
def monitor(
    config: Annotated[str | None, typer.Argument(help="Monitor config (TOML); or one target by --url.")] = None,
    url: Annotated[str | None, typer.Option(help="One target's endpoint or base URL (instead of a config).")] = None,
    direct_url: Annotated[str | None, typer.Option(help="The same model around the path, for added TTFT.")] = None,
    name: Annotated[str, typer.Option(help="The target's label with --url.")] = "target",
    model: Annotated[str | None, typer.Option(help="Model to request (--url).")] = None,
    api: options.Api = None,
    accept_encoding: options.AcceptEncoding = None,
    http2: options.Http2 = False,
    h2_window: options.H2Window = None,
    http3: options.Http3 = False,
    h3_window: options.H3Window = None,
    transport: options.Transport = None,
    api_key_env: Annotated[str | None, typer.Option(help="Env var holding the API key (--url).")] = None,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE request header (--url); repeatable.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="max_tokens per probe (--url; default 32).")] = None,
    body_json_text: Annotated[
        str | None, typer.Option("--body-json", help="JSON object merged into each request (--url).")
    ] = None,
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
    max_concurrency: Annotated[
        int | None, typer.Option(help="Probes in flight at once (default 4; with --exporter 8, more answer 503).")
    ] = None,
    metric_names: Annotated[
        str | None, typer.Option(help="tokenpath, or otel: OpenTelemetry GenAI names for TTFT and time per chunk.")
    ] = None,
    exporter: Annotated[
        bool, typer.Option("--exporter", help="blackbox_exporter-style: GET /probe?target=URL&module=NAME probes once.")
    ] = False,
    modules: Annotated[
        str | None, typer.Option(help="--exporter: modules file (TOML); default one module, openai.")
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            help="--exporter: a target must match one: SCHEME://HOST, an optional :PORT and /PATH; fnmatch globs."
        ),
    ] = None,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(help="Also export over OTLP/HTTP to this URL (headers from OTEL_EXPORTER_OTLP_HEADERS)."),
    ] = None,
) -> None:
    """Watch TTFT from outside: a synthetic client that probes each target on a schedule, for Prometheus. The
    request's options (--api ... --h2-window) are the one --url target's."""
    given = dict(locals())  # every flag as called: one that this mode would not read is refused below
    from tokenpath.jsonlog import check_level, configure_logging
    from tokenpath.monitor import config as moncfg
    from tokenpath.monitor import service
    from tokenpath.monitor.rules import parse_rules

    check_level(log_level)
    from tokenpath.monitor.runner import Interrupted
    from tokenpath.monitor.table import summary_document, summary_table

    if otlp_endpoint and (once or exporter):
        raise UsageError("--otlp-endpoint goes with the long-running monitor (not --once or --exporter)")
    if exporter:
        from tokenpath.monitor import exporter as monexp

        if config is not None or url is not None or once:
            raise UsageError(
                "--exporter takes its targets from Prometheus (/probe?target=URL): no config file, --url or --once"
            )
        refuse_unread(monitor, given, (*URL_TARGET, *ONCE_ONLY, "interval"), "by --exporter (a module says them)")
        exporter_cfg = monexp.build_config(modules, allow or [], metrics_listen, max_concurrency, metric_names)
        configure_logging(log_level)
        monexp.serve(exporter_cfg, announce("monitor"))
        return
    if modules is not None or allow:
        raise UsageError("--modules and --allow go with --exporter")
    if (config is None) == (url is None):
        raise UsageError("give a monitor config file or --url (one target), not both or neither")
    if fail_on is not None and not once:
        raise UsageError("--fail-on goes with --once (a long-running monitor alerts through Prometheus)")
    if json_out and not once:
        raise UsageError("--json goes with --once (a long-running monitor serves its figures on /metrics)")
    if config is not None:
        refuse_unread(monitor, given, URL_TARGET, "with a config file (its [[target]] tables say them)")
    if once:
        refuse_unread(monitor, given, SERVICE_ONLY, "by --once (it probes back to back and serves no /metrics)")
    else:
        refuse_unread(monitor, given, ONCE_ONLY, "without --once")
    overrides = moncfg.Overrides(
        url=url,
        name=name,
        direct_url=direct_url,
        model=model,
        api=api,
        accept_encoding=accept_encoding,
        http2=http2,
        h2_window=h2_window,
        http3=http3,
        h3_window=h3_window,
        transport=transport,
        api_key_env=api_key_env,
        headers=tuple(parse_header_arg(h) for h in header or []),
        max_tokens=max_tokens,
        body=body_json(body_json_text),
        cacert=cacert,
        insecure=insecure,
        interval_s=interval,
        metrics_listen=metrics_listen,
        max_concurrency=max_concurrency,
        metric_names=metric_names,
        otlp_endpoint=otlp_endpoint,
    )
    data = overrides.apply(moncfg.read_toml(config) if config else {})
    cfg = moncfg.from_dict(data, where=f"monitor config {config}" if config else "--url")
    rules = parse_rules(fail_on) if fail_on is not None else ()  # given empty ("$RULES" unset): refused, no gate
    configure_logging(log_level)
    if cfg.settings.otlp_endpoint is not None:
        from tokenpath.monitor import otlp

        otlp.log_as_json(log_level, cfg.settings.otlp_endpoint)  # the SDK's lines (a failed export): JSON, masked
    if not once:
        service.serve(cfg, announce("monitor"))
        return
    try:
        summaries, breaches = service.once(cfg, probes, rules)
    except Interrupted as stopped:  # Ctrl-C: what ended before it, summarised; no gate on a run cut short
        if json_out:
            print(summary_document(stopped.summaries, []), flush=True)
        else:
            console.print(summary_table(stopped.summaries))
        err_console.print("tokenpath monitor: interrupted; the summary is of the probes that ended before it")
        raise typer.Exit(130) from None
    if json_out:
        print(summary_document(summaries, breaches), flush=True)
    else:
        console.print(summary_table(summaries))
    service.finish(breaches)
