"""`tokenpath probe`: flags → ProbeConfig → probe_stream, once per run; the table or the --json document."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Annotated

import typer

from tokenpath.cli.common import api_key, body_json, console, handles_errors
from tokenpath.errors import UsageError
from tokenpath.wire.apis import api_names
from tokenpath.wire.request import parse_header_arg

if TYPE_CHECKING:
    from tokenpath.probe.client import ProbeConfig
    from tokenpath.probe.metrics import RunMetrics
    from tokenpath.probe.trace import Trace


@handles_errors("probe")
def probe(
    url: Annotated[str | None, typer.Argument(help="Endpoint or base URL; default $TOKENPATH_URL.")] = None,
    api: Annotated[
        str,
        typer.Option(
            help=f"Streaming API format: {api_names()}. A base URL gets the format's route; its first content "
            "frame is TTFT."
        ),
    ] = "openai",
    accept_encoding: Annotated[
        str | None,
        typer.Option(
            help='Accept-Encoding to send (any value; `browser` = "gzip, deflate, br, zstd"; default: none). '
            "The answer is decoded; frames and arrivals are counted in the decoded stream."
        ),
    ] = None,
    http2: Annotated[
        bool,
        typer.Option(
            "--http2",
            help="Speak HTTP/2: ALPN h2 over TLS, h2c with prior knowledge in clear text; fails (exit 18) if the "
            "server does not agree. Reports DATA frames and flow-control stalls per stream.",
        ),
    ] = False,
    h2_window: Annotated[
        str | None,
        typer.Option(
            help="With --http2: the client's receive windows: BYTES (stream; the connection the same, >= 65535), "
            "STREAM:CONNECTION, `default` (65535) or `browser` (Chromium's 6 MiB / 15 MiB).",
        ),
    ] = None,
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
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE request header; repeatable.")] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Env var holding the API key (default: TOKENPATH_API_KEY if set).")
    ] = None,
    model: Annotated[str, typer.Option(help="Model to request.")] = "tokenpath-stub",
    prompt: Annotated[str | None, typer.Option(help="User message.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="max_tokens in the request.")] = None,
    body_json_text: Annotated[
        str | None,
        typer.Option("--body-json", help="JSON object merged into the request body (e.g. the stub's pacing)."),
    ] = None,
    insecure: Annotated[bool, typer.Option(help="Do not verify the TLS certificate.")] = False,
    cacert: Annotated[str | None, typer.Option(help="CA bundle (PEM) to verify the server with.")] = None,
    connect_timeout: Annotated[float, typer.Option(help="Seconds to connect.")] = 10.0,
    first_byte_timeout: Annotated[float, typer.Option(help="Seconds to the first response byte.")] = 30.0,
    idle_timeout: Annotated[float, typer.Option(help="Longest silence between frames, seconds.")] = 30.0,
    total_timeout: Annotated[float, typer.Option(help="Longest a stream may take, seconds.")] = 600.0,
) -> None:
    """Measure one stream at a time through a raw socket: reads, frames, frames per read, TTFB, TTFT, bursts."""
    from tokenpath.probe.client import ProbeConfig
    from tokenpath.probe.metrics import dumps, probe_results
    from tokenpath.probe.stream import probe_stream
    from tokenpath.probe.table import probe_table
    from tokenpath.probe.transport import TLSOptions
    from tokenpath.wire.apis import parse_api
    from tokenpath.wire.h2client import DEFAULT_WINDOW, parse_h2_window
    from tokenpath.wire.request import DEFAULT_PROMPT

    target_url = url or os.environ.get("TOKENPATH_URL")
    if not target_url:
        raise UsageError("no URL: pass one or set TOKENPATH_URL")
    if runs < 1:
        raise UsageError("--runs must be >= 1")
    try:
        fmt = parse_api(api)
    except ValueError as exc:
        raise UsageError(f"--api: {exc}") from None
    if h2_window is not None and not http2:
        raise UsageError("--h2-window is HTTP/2's: pass --http2 with it")
    cfg = ProbeConfig(
        url=target_url,
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
        extra_body=body_json(body_json_text),
        api=fmt,
        accept_encoding=accept_encoding,
        http2=http2,
        h2_window=parse_h2_window(h2_window) if h2_window is not None else DEFAULT_WINDOW,
    )
    cfg.target  # noqa: B018 - validates the URL before anything is sent
    if client not in ("raw", "chromium"):
        raise UsageError(f"--client {client!r}: choose raw or chromium")
    if client == "chromium":
        return _probe_browser(cfg, runs, stub_url, json_out)
    runs_done = [joined_metrics(probe_stream(cfg), stub_url) for _ in range(runs)]
    probed = probe_results(target_url, runs_done, fmt, cfg.accept_encoding)
    if json_out:
        print(dumps(probed))
    else:
        console.print(probe_table(probed))


def _probe_browser(cfg: ProbeConfig, runs: int, stub_url: str | None, json_out: bool) -> None:
    """--client chromium: the same figures, table and document, from the browser's chunks (probe/browser.py)."""
    from tokenpath.probe.browser import browser_document, browser_title, probe_browser
    from tokenpath.probe.metrics import probe_results
    from tokenpath.probe.table import probe_table

    done = probe_browser(cfg, runs)
    sent = done[0].accept_encoding  # the browser's own, the same every run
    probed = probe_results(cfg.url, [joined_metrics(run.trace, stub_url) for run in done], cfg.api, sent)
    if json_out:
        print(json.dumps(browser_document(probed, done), indent=2))
        return
    table = probe_table(probed)
    table.title = f"{table.title} [{browser_title(done)}]"
    console.print(table)


def joined_metrics(trace: Trace, stub_url: str | None) -> RunMetrics:
    """A run's figures, joined to the stub's write log of its stream when --stub-url names the stub."""
    from tokenpath.probe.metrics import run_metrics
    from tokenpath.stub.control import fetch_audit

    if stub_url is None:
        return run_metrics(trace)
    entry = fetch_audit(stub_url, [trace.stream_id]).by_id().get(trace.stream_id)
    if entry is None or entry.log is None:
        raise UsageError(f"--stub-url {stub_url}: its audit has no stream {trace.stream_id}; is it the stub this path "
                         "streams from?")  # fmt: skip
    return run_metrics(trace, entry.log)
