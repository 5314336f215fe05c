"""`tokenpath diagnose`: flags → a ProbeConfig template and a series → the verdict, the proxy and its fix. The same
clients as `probe` (--api, --http2, --accept-encoding, --client chromium, --cacert); a finding is the exit code, not
an error, and a closed stdout (`| head -1`) ends quietly with that code."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from tokenpath.cli import options
from tokenpath.cli.common import api_key, err_console, handles_errors, target_url, tls_flags_need_https
from tokenpath.errors import TokenpathError, UpgradeNotCarried, UsageError
from tokenpath.probe.wsfallback import CODEX_ATTEMPTS, CODEX_RETRY_DELAY_MS, CODEX_UPGRADE_TIMEOUT_S
from tokenpath.wire.request import parse_header_arg

if TYPE_CHECKING:
    from tokenpath.diagnose.classify import Check, RunFigures
    from tokenpath.diagnose.measure import Probe
    from tokenpath.probe.client import ProbeConfig


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
            help="The proxy in the path, when its headers do not name it (HAProxy, Traefik, a Node.js app): any "
            "catalogue name; those with a measured fix line: nginx, haproxy, lighttpd, traefik, envoy, express, "
            "starlette."
        ),
    ] = None,
    api: options.Api = None,
    accept_encoding: Annotated[
        str | None,
        typer.Option(
            help="The Accept-Encoding of the series' compressing client (default `browser` = \"gzip, deflate, "
            'br, zstd"; any value; `identity` leaves that run out). The other runs send none.',
            show_default=False,
        ),
    ] = None,
    http2: options.Http2 = False,
    h2_window: options.H2Window = None,
    http3: options.Http3 = False,
    h3_window: options.H3Window = None,
    transport: options.Transport = None,
    ws_fallback: Annotated[
        int | None,
        typer.Option(
            "--ws-fallback",
            metavar="N",
            help="With --transport websocket, where the path refuses the upgrade: the client's failed upgrades "
            f"before it falls back to SSE, the fallback's cost measured with them (default Codex's {CODEX_ATTEMPTS}).",
            show_default=False,
        ),
    ] = None,
    ws_retry_delay_ms: options.WsRetryDelayMs = CODEX_RETRY_DELAY_MS,
    ws_upgrade_timeout: options.WsUpgradeTimeout = CODEX_UPGRADE_TIMEOUT_S,
    client: Annotated[
        str,
        typer.Option(
            help="raw: the probe's own socket; chromium: every run from headless Chromium's fetch (its own "
            "Accept-Encoding, h2 by ALPN; needs `tokenpath\\[browser]`)."
        ),
    ] = "raw",
    json_out: Annotated[bool, typer.Option("--json", help="Print the diagnosis document on stdout.")] = False,
    header: Annotated[list[str] | None, typer.Option(help="NAME:VALUE request header; repeatable.")] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Env var holding the API key (default: TOKENPATH_API_KEY if set).")
    ] = None,
    model: Annotated[str, typer.Option(help="Model to request.")] = "tokenpath-stub",
    max_tokens: Annotated[
        int | None, typer.Option(help="max_tokens in each request (against an endpoint that is not a stub).")
    ] = 128,
    insecure: Annotated[bool, typer.Option(help="https: do not verify the TLS certificate.")] = False,
    cacert: Annotated[str | None, typer.Option(help="https: CA bundle (PEM) to verify the server with.")] = None,
    total_timeout: Annotated[
        float,
        typer.Option(
            help="Longest one stream may take, seconds. With --transport websocket it also bounds the upgrade "
            "check's waits on upgrades (at most 30 s): a fallback policy that would wait longer is measured with "
            "the upgrades that fit, its cost said as 'at least'."
        ),
    ] = 120.0,
) -> None:
    """Run a short series through a path, growing it until it can tell, and name what the path does to a token
    stream and the line that fixes it.

    --transport websocket (the Responses WebSocket mode, --api responses): first whether the path carries the
    upgrade; carried, the series runs over WebSocket; refused, the line that carries it and what the client's
    fallback to SSE costs are named, and the series runs over SSE. --http3: every run over QUIC (https only; a stub
    behind the path is named by --stub-url, its control plane being plain HTTP).

    Exit 0: it streams; 16: it holds the stream (the cause is named), every time or in a clear share of repeated
    runs ("intermittent: holds in 2 of 3 runs"); 17: unsure (the runs disagree); 19: it cut the stream (the limit
    and its fix are named); 21: the WebSocket upgrade is not carried."""
    from tokenpath.axes import ACCEPT_ENCODING
    from tokenpath.diagnose.fixes import check_proxy
    from tokenpath.diagnose.measure import check_stub, diagnose_series, is_stub, run_origin, stub_audit, stub_origin
    from tokenpath.diagnose.origin import OriginFinding, judge, origin_runs, seen_in_heads
    from tokenpath.diagnose.report import diagnosis, dumps, lines
    from tokenpath.diagnose.series import plan
    from tokenpath.diagnose.upgrade import UpgradeTried, finding, try_upgrade, upgrade_bound_s, waiting_words
    from tokenpath.probe.client import ProbeConfig
    from tokenpath.probe.transport import TLSOptions
    from tokenpath.wire.acceptencoding import BROWSER_ACCEPT_ENCODING, IDENTITY
    from tokenpath.wire.apis import SPECS
    from tokenpath.wire.carrier import SSE, WEBSOCKET

    target = target_url(url)
    check_proxy(proxy)
    headers = tuple(parse_header_arg(h) for h in header or [])
    _refuse_accept_encoding_header(headers)
    chosen = options.stream_choice(api, http2, h2_window, http3, h3_window, transport)
    websocket = chosen.transport == WEBSOCKET
    websocket_only = SPECS[chosen.api].websocket_only  # Realtime: no SSE stream for a client to fall back to
    attempts = CODEX_ATTEMPTS if ws_fallback is None and websocket and not websocket_only else ws_fallback
    policy = options.ws_fallback(attempts, ws_retry_delay_ms, ws_upgrade_timeout, chosen.transport)
    if websocket and client != "raw":
        raise UsageError("--transport websocket is the raw client's (--client raw)")
    if http3 and client != "raw":
        raise UsageError("--http3 is the raw client's (Chromium over HTTP/3 is not measured yet)")
    if client not in ("raw", "chromium"):
        raise UsageError(f"--client {client!r}: choose raw or chromium")
    compressing = ACCEPT_ENCODING.read(accept_encoding, "--accept-encoding") if accept_encoding else None
    if client == "chromium" and compressing is not None:
        raise UsageError("--accept-encoding with --client chromium: the browser sends its own")
    template = ProbeConfig(
        url=target,
        model=model,
        max_tokens=max_tokens,
        headers=headers,
        api_key=api_key(api_key_env),
        tls=TLSOptions(insecure=insecure, cacert=cacert),
        total_timeout_s=total_timeout,
        api=chosen.api,
        http_version=chosen.http_version,
        h2_window=chosen.h2_window,
        h3_window=chosen.h3_window,
        transport=chosen.transport,
    )
    tls_flags_need_https(template.target.scheme, cacert, insecure)  # the URL checked before anything is sent
    if template.target.scheme != "https" and http3:
        raise UsageError("--http3 needs an https:// URL: QUIC is always TLS")
    if stub_url is not None:
        check_stub(stub_url)
    paced = stub_url is not None or is_stub(target)
    sent = compressing or BROWSER_ACCEPT_ENCODING
    notes = []
    if client == "chromium":
        notes.append("every run from headless Chromium (its own Accept-Encoding): compression is not told apart")
    upgrade: UpgradeTried | None = None
    with _client(template, client) as probe:
        if websocket:  # said before the wait: a path that leaves upgrades unanswered makes it the longest step
            bound = upgrade_bound_s(template)
            err_console.print(
                f"tokenpath diagnose: {waiting_words(policy, bound)}", highlight=False, markup=False, soft_wrap=True
            )
            upgrade = try_upgrade(template, plan(paced, encodings=False)[0], probe, policy, bound)
            if not upgrade.first.upgraded and websocket_only:  # the refusal is the whole finding: nothing to run
                said = finding(upgrade, proxy).lines()[:2]  # what came instead of 101, and the line that carries it
                raise UpgradeNotCarried(
                    f"{'; '.join(said)}; the {chosen.api.value} API is WebSocket only: a client has no SSE stream "
                    "to fall back to, so its session never starts"
                )
            if not upgrade.first.upgraded:  # the client's stream is the SSE one it falls back to
                template = replace(template, transport=SSE)
        # Over WebSocket no run sends an Accept-Encoding: its messages are not HTTP bodies (no permessage-deflate)
        over_ws = template.transport == WEBSOCKET
        if over_ws:
            notes.append("over WebSocket no compressing client is run: the messages are not HTTP bodies")
        encodings = client == "raw" and sent != IDENTITY and not over_ws
        first = plan(paced, encodings=encodings, accept_encoding=sent)
        audit = stub_audit(stub_url or target) if paced else None
        measured, verdict = diagnose_series(template, first, probe, audit, sent, checks())
        # What the verdict rests on of the origin's behaviour: a stub answering as a real origin is varied (a plain
        # origin, each behaviour alone); any other origin's is read off the answers' heads.
        behaviour = stub_origin(stub_url or target) if paced else None
        heads = [m.headers for m in measured]
        origin: OriginFinding | None = None
        origin_figures: list[RunFigures] = []
        if behaviour is not None and not behaviour.plain and measured and verdict.end is None:
            try:
                varied = run_origin(template, origin_runs(behaviour), probe, audit)
            except TokenpathError as exc:  # the verdict stands; what it rests on is not known
                notes.append(f"the origin's runs (a plain origin, each behaviour alone) failed: {exc}")
                varied = []
            origin_figures = [f for _, f in varied]
            origin = judge(behaviour, measured[0].figures, varied)
        elif behaviour is None and not (seen := seen_in_heads(heads)).plain:
            origin = OriginFinding(seen, None)
    found = diagnosis(
        target,
        paced,
        [m.figures for m in measured],
        verdict,
        heads,
        proxy,
        notes,
        origin,
        origin_figures,
        upgrade,
    )
    with _quiet_if_closed(found.exit_code):
        if json_out:
            print(dumps(found), flush=True)
            err_console.print(f"tokenpath diagnose: {verdict.summary}", highlight=False, markup=False, soft_wrap=True)
        else:
            for line in lines(found):
                print(line)
            sys.stdout.flush()
    raise typer.Exit(found.exit_code)


def _refuse_accept_encoding_header(headers: tuple[tuple[str, str], ...]) -> None:
    """The series sets each run's Accept-Encoding itself (none on the identity runs, the compressing client's on
    the others): one given as a header would be sent on every run, so it is refused before anything is sent."""
    for name, value in headers:
        if name.strip().lower() == "accept-encoding":
            raise UsageError(
                f"--header {name}: {value}: the series sets each run's Accept-Encoding itself (none, then a "
                f"compressing client's); use --accept-encoding \"{value or 'VALUE'}\" for the compressing runs' value "
                "(`identity` leaves them out)"
            )


def checks() -> tuple[Check, ...]:
    """The checks classify() asks before its own rules (classify.Check): a diagnose module that names another
    cause adds its check here (imported when diagnose runs, not when the CLI starts)."""
    from tokenpath.diagnose.cuts import cut_check

    return (cut_check,)


@contextlib.contextmanager
def _client(template: ProbeConfig, client: str) -> Iterator[Probe]:
    """The series' streams: the raw probe's, or one headless Chromium's for the whole series."""
    from tokenpath.probe.stream import probe_stream

    if client == "raw":
        yield probe_stream
        return
    from tokenpath.probe.browser import browser_stream, chromium
    from tokenpath.probe.browser_page import fetch_spec

    fetch_spec(template, "check")  # refuses what a page cannot send before a browser starts
    with chromium(template) as browser:
        yield lambda cfg: browser_stream(browser, cfg).trace


@contextlib.contextmanager
def _quiet_if_closed(code: int) -> Iterator[None]:
    """`diagnose URL | head -1`: the reader has what it wanted; the diagnosis still ends with its own exit code,
    and the interpreter's last flush of the closed pipe is sent to /dev/null rather than failing."""
    try:
        yield
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(code) from None
