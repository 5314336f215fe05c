"""`tokenpath probe`: flags → ProbeConfig → probe_stream, once per run; the table or the --json document."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tokenpath.cli import options
from tokenpath.cli.common import api_key, body_json, console, handles_errors, target_url, tls_flags_need_https
from tokenpath.errors import UsageError
from tokenpath.probe.wsfallback import CODEX_RETRY_DELAY_MS, CODEX_UPGRADE_TIMEOUT_S
from tokenpath.wire.request import parse_header_arg

if TYPE_CHECKING:
    from rich.table import Table

    from tokenpath.probe.client import ProbeConfig
    from tokenpath.probe.metrics import ProbeResults, RunMetrics
    from tokenpath.probe.trace import Trace


@handles_errors("probe")
def probe(
    url: Annotated[str | None, typer.Argument(help="Endpoint or base URL; default $TOKENPATH_URL.")] = None,
    api: options.Api = None,
    accept_encoding: options.AcceptEncoding = None,
    http2: options.Http2 = False,
    h2_window: options.H2Window = None,
    http3: options.Http3 = False,
    h3_window: options.H3Window = None,
    transport: options.Transport = None,
    ws_fallback: options.WsFallbackAttempts = None,
    ws_retry_delay_ms: options.WsRetryDelayMs = CODEX_RETRY_DELAY_MS,
    ws_upgrade_timeout: options.WsUpgradeTimeout = CODEX_UPGRADE_TIMEOUT_S,
    ws_ping_s: options.WsPingS = None,
    interval_ms: options.IntervalMs = None,
    heartbeat_ms: options.HeartbeatMs = None,
    reasoning_tokens: options.ReasoningTokens = None,
    first_event_bytes: options.FirstEventBytes = None,
    head_at: options.HeadAt = None,
    pause_ms: options.PauseMs = None,
    pause_after: options.PauseAfter = None,
    stub_url: Annotated[
        str | None,
        typer.Option(
            help="The tokenpath stub the path streams from: its write log adds added TTFT and each later frame's "
            "added delay (p50/p99)."
        ),
    ] = None,
    runs: Annotated[int, typer.Option(help="Streams to measure, one after another.")] = 1,
    client: Annotated[
        str,
        typer.Option(
            help="raw: the probe's own socket; chromium: headless Chromium's fetch + ReadableStream (its own "
            "Accept-Encoding and h2 by ALPN; needs `tokenpath\\[browser]` and Debian's chromium)."
        ),
    ] = "raw",
    json_out: Annotated[bool, typer.Option("--json", help="Print the machine-readable result.")] = False,
    wide: Annotated[
        bool, typer.Option(help="Every column of the table (the default fits 100 columns: TTFT, fpr, gap max...).")
    ] = False,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE request header; repeatable.")] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Env var holding the API key (default: TOKENPATH_API_KEY if set).")
    ] = None,
    model: Annotated[str, typer.Option(help="Model to request.")] = "tokenpath-stub",
    prompt: Annotated[str | None, typer.Option(help="User message.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="max_tokens in the request.")] = None,
    body_json_text: Annotated[
        str | None,
        typer.Option(
            "--body-json",
            help="JSON object merged into the request body (e.g. the stub's pacing: the options above are its "
            "`tokenpath` member's keys, merged into it).",
        ),
    ] = None,
    insecure: Annotated[bool, typer.Option(help="https: do not verify the TLS certificate.")] = False,
    cacert: Annotated[str | None, typer.Option(help="https: CA bundle (PEM) to verify the server with.")] = None,
    connect_timeout: Annotated[float, typer.Option(help="Seconds to connect.")] = 10.0,
    first_byte_timeout: Annotated[float, typer.Option(help="Seconds to the first response byte.")] = 30.0,
    idle_timeout: Annotated[float, typer.Option(help="Longest silence between frames, seconds.")] = 30.0,
    total_timeout: Annotated[float, typer.Option(help="Longest a stream may take, seconds.")] = 600.0,
) -> None:
    """Measure one stream at a time through a raw socket: reads, frames, frames per read, TTFB, TTFT, bursts. The
    stub's pacing options ask a tokenpath stub behind the path for that pacing (the body's `tokenpath` member)."""
    from tokenpath.axes import TRANSPORT
    from tokenpath.probe.client import ProbeConfig
    from tokenpath.probe.metrics import dumps, probe_results
    from tokenpath.probe.stream import probe_stream
    from tokenpath.probe.transport import TLSOptions
    from tokenpath.wire.request import DEFAULT_PROMPT

    target = target_url(url)
    if runs < 1:
        raise UsageError("--runs must be >= 1")
    pacing = options.pacing(locals())  # for a stub behind the path: the body's `tokenpath` member
    chosen = options.stream_choice(api, http2, h2_window, http3, h3_window, transport)
    fmt = chosen.api
    carrier = chosen.transport
    cfg = ProbeConfig(
        url=target,
        model=model,
        prompt=prompt or DEFAULT_PROMPT,
        max_tokens=max_tokens,
        headers=tuple(parse_header_arg(h) for h in header or []),
        api_key=api_key(api_key_env),
        tls=TLSOptions(insecure=insecure, cacert=cacert),
        connect_timeout_s=connect_timeout,
        first_byte_timeout_s=first_byte_timeout,
        idle_timeout_s=idle_timeout,
        total_timeout_s=total_timeout,
        extra_body=stub_pacing(body_json(body_json_text), pacing),
        api=fmt,
        accept_encoding=accept_encoding,
        http_version=chosen.http_version,
        h2_window=chosen.h2_window,
        h3_window=chosen.h3_window,
        transport=carrier,
        ws_fallback=options.ws_fallback(ws_fallback, ws_retry_delay_ms, ws_upgrade_timeout, carrier),
        ws_ping_s=ws_ping_s,
    )
    if client == "chromium" and cfg.transport != TRANSPORT.default:
        raise UsageError("--transport websocket is the raw client's (--client raw)")
    tls_flags_need_https(cfg.target.scheme, cacert, insecure)  # the URL checked before anything is sent
    if client not in ("raw", "chromium"):
        raise UsageError(f"--client {client!r}: choose raw or chromium")
    if client == "chromium":
        return _probe_browser(cfg, runs, stub_url, json_out, wide)
    runs_done = [joined_metrics(probe_stream(cfg), stub_url) for _ in range(runs)]
    probed = probe_results(target, runs_done, fmt, cfg.accept_encoding)
    if json_out:
        print(dumps(probed))
    else:
        console.print(shown_table(probed, wide))


def stub_pacing(body: tuple[tuple[str, object], ...], given: dict[str, Any]) -> tuple[tuple[str, object], ...]:
    """The request body's extra members with the pacing options merged into its `tokenpath` member (checked by the
    stub's own rules, named as the options)."""
    if not given:
        return body
    from tokenpath.stub.config import Pacing

    checked = replace(Pacing(), **given)
    checked.check()
    checked.check_bounds("")
    extra = dict(body)
    member = extra.get("tokenpath", {})
    if not isinstance(member, dict):
        raise UsageError("--body-json: its `tokenpath` member must be an object to take the pacing options")
    extra["tokenpath"] = {**member, **{k: getattr(checked, k) for k in given}}
    return tuple(extra.items())


def _probe_browser(cfg: ProbeConfig, runs: int, stub_url: str | None, json_out: bool, wide: bool) -> None:
    """--client chromium: the same figures, table and document, from the browser's chunks (probe/browser.py)."""
    from tokenpath.probe.browser import browser_document, browser_title, probe_browser
    from tokenpath.probe.metrics import probe_results

    done = probe_browser(cfg, runs)
    sent = done[0].accept_encoding  # the browser's own, the same every run
    probed = probe_results(cfg.url, [joined_metrics(run.trace, stub_url) for run in done], cfg.api, sent)
    if json_out:
        print(json.dumps(browser_document(probed, done), indent=2))
        return
    console.print(shown_table(probed, wide, browser_title(done)))


def shown_table(probed: ProbeResults, wide: bool, client: str | None = None) -> Table:
    """probe/table.py's table with what the user typed and the peer answered shown as its text, never read as rich
    markup (a peer's Content-Encoding of `x[/]` raised MarkupError after the runs): the URL and Accept-Encoding in
    the title, each run's Content-Encoding, the caption's notes (a cut's, a WebSocket's words). None of the table's
    own text is markup, so the title and the caption are escaped whole; `client` (--client chromium's version and
    protocols) is added to the title in brackets, which rich used to read as a tag and drop."""
    from tokenpath.probe.table import probe_table
    from tokenpath.progress import escaped

    runs = tuple(replace(r, content_encoding=escaped(r.content_encoding)) for r in probed.runs)
    table = probe_table(replace(probed, runs=runs), wide)
    title = str(table.title) + (f" [{client}]" if client else "")
    table.title = escaped(title)
    table.min_width = len(title)  # as probe_table: the title on one line where the terminal allows
    table.caption = escaped(table.caption or "")
    return table


def joined_metrics(trace: Trace, stub_url: str | None) -> RunMetrics:
    """A run's figures, joined to the stub's write log of its stream when --stub-url names the stub."""
    from tokenpath.probe.metrics import run_metrics
    from tokenpath.stub.control import fetch_audit

    if stub_url is None:
        return run_metrics(trace)
    entry = fetch_audit(stub_url, [trace.stream_id]).by_id().get(trace.stream_id)
    if entry is None or entry.log is None:
        raise UsageError(
            f"--stub-url {stub_url}: its audit has no stream {trace.stream_id}; is it the stub this path streams from?"
        )
    return run_metrics(trace, entry.log)
