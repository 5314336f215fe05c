"""`probe --client chromium`: the stream as a real browser gets it. Headless Debian Chromium runs a page on the
target's own origin whose script streams the request with fetch + ReadableStream (probe/browser_page.py); the chunks
and their performance.now() stamps come back and become the probe's Trace.

The driver is Playwright (PyPI `playwright`), used only as a DevTools-protocol client for a Chromium we name
(`executable_path`): it is well kept (Microsoft, a release per Chromium milestone), owns the browser's lifetime (a
temp profile per launch, the process killed when the browser or the driver's pipe closes, so a probe killed by SIGTERM
or SIGKILL leaves no Chromium), and its request routing is the protocol's Fetch.fulfillRequest. It never downloads a
browser here: nothing calls `playwright install`.

Same origin, not disabled web security: the page is served by interception at PAGE_PATH on the target's origin
(nothing reaches the target for it), the route is removed before the fetch, and the fetch is then same-origin: no
CORS preflight, no Access-Control headers needed from the target, every response header readable, and the browser
otherwise exactly as a user's (its own Accept-Encoding, its own h2 by ALPN over TLS).

TLS: `--insecure` ignores certificate errors in the context; `--cacert` is honoured by verifying the server in
Python against that CA (hostname included) and passing the leaf's public-key hash to Chromium
(--ignore-certificate-errors-spki-list), so the browser trusts that key and nothing else.

HTTP/3 (`--http3`): QUIC is off by default here (the stream must be the TCP one the path serves); over HTTP/3 it is
on and forced for the target's origin (--origin-to-force-quic-on: no Alt-Svc discovery, no TCP race), trusted by the
same public-key pin, and the DevTools Network events must say `h3` for the measured response (`response.protocol`),
else the run fails: a stream Chromium carried over TCP is not an HTTP/3 figure.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokenpath.chromium import find_chromium
from tokenpath.errors import ConnectError, InstrumentError, NetworkError, TLSError, TotalTimeout, UsageError
from tokenpath.probe.browser_page import (
    PAGE_HTML,
    PAGE_PATH,
    PAGE_SCRIPT,
    RESULT_READY,
    PageResultError,
    check_outcome,
    fetch_spec,
    parse_result,
    to_trace,
)
from tokenpath.probe.client import ProbeConfig, new_stream_id
from tokenpath.probe.trace import DEFAULT_LIMITS, Trace, TraceLimits
from tokenpath.wire.httpversion import HttpVersion

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Request

    from tokenpath.probe.metrics import ProbeResults

# What Chromium needs on these machines (its own network calls to Google are refused here, many at a time) and for a
# measurement (no QUIC: the stream must be the TCP one the path serves; no GPU in a headless box).
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
LAUNCH_TIMEOUT_S = 60.0  # a cold Chromium on a loaded 2-core box starts in ~1 s; 60 s means it will not
PAGE_TIMEOUT_S = 30.0  # loading the intercepted page (no network involved)
RESULT_GRACE_S = 5.0  # past --total-timeout, the page's own bound, before the driver stops waiting for it
POLL_MS = 20  # how often the driver asks the page whether the stream ended (a trivial check, off the measurement)
CLIENT = "chromium"


@dataclass(frozen=True, slots=True)
class BrowserRun:
    """One stream through the browser: the trace, and what only a browser tells."""

    trace: Trace
    protocol: str | None  # nextHopProtocol as the browser negotiated it ("http/1.1", "h2")
    accept_encoding: str | None  # the Accept-Encoding the browser sent (its own; a page cannot set it)
    sent_at: str  # what the figures count from: "requestStart" (resource timing), else "fetch()"
    chromium: str  # the browser's version


def chromium_path() -> str:
    exe = find_chromium()
    if exe is None:
        raise InstrumentError(
            "--client chromium: no Chromium found (Debian: apt-get install chromium; "
            "`make test` and `make demo` install it as root)"
        )
    return exe


def spki_pin(cfg: ProbeConfig) -> str:
    """The server's leaf public-key hash (base64 SHA-256 of its SubjectPublicKeyInfo), read after Python verified
    the server against --cacert: what Chromium's --ignore-certificate-errors-spki-list takes."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    target = cfg.target
    ctx = cfg.tls.context()
    try:
        with (
            socket.create_connection((target.host, target.port), timeout=cfg.connect_deadline_s) as raw,
            ctx.wrap_socket(raw, server_hostname=target.host) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except ssl.SSLError as exc:
        raise TLSError(f"--cacert {cfg.tls.cacert}: the server's certificate did not verify: {exc}") from None
    except OSError as exc:
        raise ConnectError(f"could not connect to {target.hostport} to read its certificate: {exc}") from None
    if der is None:
        raise TLSError("the server sent no certificate")
    spki = (
        x509.load_der_x509_certificate(der)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def launch_args(cfg: ProbeConfig) -> list[str]:
    args = list(CHROMIUM_ARGS)
    if cfg.target.scheme == "https" and cfg.tls.cacert and not cfg.tls.insecure:
        args.append(f"--ignore-certificate-errors-spki-list={spki_pin(cfg)}")
    if cfg.http_version is HttpVersion.HTTP3:
        if cfg.target.scheme != "https":
            raise UsageError("--http3 with the chromium client needs an https URL: QUIC is TLS only")
        args = [a for a in args if a != "--disable-quic"]
        args += ["--enable-quic", f"--origin-to-force-quic-on={cfg.target.hostport}"]
        if cfg.tls.insecure:  # the context's ignore_https_errors does not reach the QUIC session's verification
            args.append("--ignore-certificate-errors")
    return args


@contextlib.contextmanager
def chromium(cfg: ProbeConfig) -> Iterator[Browser]:
    """A headless Chromium for this probe, closed (and its temp profile removed) on every way out."""
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")  # belt and braces: nothing here installs one
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise UsageError("--client chromium needs Playwright: pip install 'tokenpath[browser]'") from None
    exe = chromium_path()
    args = launch_args(cfg)
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(
                executable_path=exe,
                args=args,
                headless=True,
                timeout=LAUNCH_TIMEOUT_S * 1000,
                handle_sigint=True,
                handle_sigterm=True,
                handle_sighup=True,
            )
        except PlaywrightError as exc:
            raise InstrumentError(f"Chromium ({exe}) did not start: {str(exc).splitlines()[0]}") from None
        try:
            yield browser
        finally:
            with contextlib.suppress(PlaywrightError):
                browser.close()


def probe_browser(cfg: ProbeConfig, runs: int = 1, limits: TraceLimits = DEFAULT_LIMITS) -> list[BrowserRun]:
    """`runs` streams one after another, each in a fresh browser context (its own connections and cache)."""
    fetch_spec(cfg, "check")  # refuses what a page cannot send before a browser starts
    with chromium(cfg) as browser:
        return [browser_stream(browser, cfg, limits=limits) for _ in range(runs)]


def browser_trace(cfg: ProbeConfig, stream_id: str, limits: TraceLimits = DEFAULT_LIMITS) -> Trace:
    """One stream in a Chromium of its own, closed after it (the monitor's prober for a chromium target)."""
    fetch_spec(cfg, stream_id)
    with chromium(cfg) as browser:
        return browser_stream(browser, cfg, stream_id=stream_id, limits=limits).trace


def browser_stream(
    browser: Browser, cfg: ProbeConfig, *, stream_id: str | None = None, limits: TraceLimits = DEFAULT_LIMITS
) -> BrowserRun:
    """One stream from a page on the target's origin; raises the probe's own PeerError subclasses on failure."""
    from playwright.sync_api import Error as PlaywrightError

    stream_id = stream_id or new_stream_id()
    spec = fetch_spec(cfg, stream_id)
    context = browser.new_context(ignore_https_errors=cfg.tls.insecure, service_workers="block")
    try:
        page = context.new_page()
        protocols = _response_protocols(context, page, spec.url) if cfg.http_version is HttpVersion.HTTP3 else None
        failures: list[str] = []
        sent: list[Request] = []  # the measured request, to read back the headers the browser added
        page.on("request", lambda req: sent.append(req) if req.url == spec.url else None)
        page.on("requestfailed", lambda req: failures.append(req.failure or "") if req.url == spec.url else None)
        _open_page(page, cfg.target.origin + PAGE_PATH)
        wall_minus_mono = time.time_ns() - time.monotonic_ns()
        page.evaluate(PAGE_SCRIPT, spec.to_js())
        try:
            handle = page.wait_for_function(
                RESULT_READY, polling=POLL_MS, timeout=(cfg.total_timeout_s + RESULT_GRACE_S) * 1000
            )
            raw = handle.json_value()
        except PlaywrightError as exc:
            if "Timeout" in str(exc):
                raise TotalTimeout(
                    f"the browser's stream did not end within `total_timeout` {cfg.total_timeout_s} s"
                ) from None
            raise InstrumentError(f"the browser's page failed: {str(exc).splitlines()[0]}") from None
        try:
            result = parse_result(raw)
        except PageResultError as exc:
            raise InstrumentError(f"the browser's page returned something else: {exc}") from None
        check_outcome(result, cfg, failures[0] if failures else None)
        if protocols is not None and protocols != ["h3"]:
            said = ", ".join(protocols) or "no response"
            raise NetworkError(f"--http3: Chromium's DevTools say the response came over {said}, not h3")
        trace = to_trace(result, stream_id, cfg, wall_minus_mono, limits)
        accept = sent[0].all_headers().get("accept-encoding") if sent else None
        return BrowserRun(trace, result.protocol, accept, result.sent_at, browser.version)
    finally:
        with contextlib.suppress(PlaywrightError):
            context.close()


def _response_protocols(context: BrowserContext, page: Page, url: str) -> list[str]:
    """The protocol of each response to `url` as DevTools' Network.responseReceived reports it ("h3", "h2",
    "http/1.1"), filled in as they arrive."""
    seen: list[str] = []
    session = context.new_cdp_session(page)
    session.send("Network.enable")

    def received(params: dict[str, Any]) -> None:
        response = params.get("response", {})
        if response.get("url") == url:
            seen.append(str(response.get("protocol")))

    session.on("Network.responseReceived", received)
    return seen


def _open_page(page: Page, url: str) -> None:
    """The page on the target's origin, fulfilled by the driver (Fetch.fulfillRequest); the route is gone before
    the measured fetch, so that request goes out untouched."""
    from playwright.sync_api import Error as PlaywrightError

    page.route(url, lambda route: route.fulfill(status=200, content_type="text/html", body=PAGE_HTML))
    try:
        page.goto(url, timeout=PAGE_TIMEOUT_S * 1000)
    except PlaywrightError as exc:
        raise InstrumentError(f"the browser could not open its page on {url}: {str(exc).splitlines()[0]}") from None
    finally:
        page.unroute(url)


def browser_document(results: ProbeResults, runs: list[BrowserRun]) -> dict[str, Any]:
    """The probe's --json document, the same shape, saying the client and, per run, the protocol it negotiated."""
    doc = results.to_json()
    doc["client"] = CLIENT
    doc["chromium"] = runs[0].chromium if runs else None
    for run_doc, run in zip(doc["runs"], runs, strict=True):
        run_doc["next_hop_protocol"] = run.protocol
        run_doc["sent_at"] = run.sent_at
    return doc


def browser_title(runs: list[BrowserRun]) -> str:
    """What the table's title adds: the client and the protocol(s) it used."""
    protocols = sorted({run.protocol or "?" for run in runs})
    version = runs[0].chromium if runs else "?"
    return f"client chromium {version}, {', '.join(protocols)}"
