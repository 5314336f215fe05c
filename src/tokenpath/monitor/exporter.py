"""`tokenpath monitor --exporter`: the blackbox_exporter pattern. Targets live in Prometheus' scrape config; each
scrape of `GET /probe?target=URL&module=NAME` runs one probe now and answers that probe's metrics only (a fresh
registry per probe), and `/metrics` has the exporter's own.

    ProbeExporter.handle(method, path, query, scrape_timeout) -> Answer     (no sockets: unit-tested as is)
    ExporterApp: serve.runner's app; the answers are served from threads (serve.exposition.serve_app)

The probe is the monitor's (monitor/probing.py probe_route: `probe`'s raw socket, arrivals, outcomes by reason), so
an exporter figure means what the monitor's does. Bounded: at most `max_concurrency` probes at once (one more
answers 503 at once and counts as dropped: Prometheus retries at the next scrape, a queue would only answer after
its scrape timeout), each within the scrape's own deadline (`X-Prometheus-Scrape-Timeout-Seconds` minus a margin,
capped by the module's `total_timeout_s`), only to targets `--allow` matches (none without it), and never following
a redirect: a 3xx is the probe's failure (`http_status`), its Location never contacted.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIServer

from prometheus_client import make_wsgi_app

from tokenpath.errors import TokenpathError, UsageError
from tokenpath.hostport import join_hostport, parse_hostport
from tokenpath.monitor import modules as monmod
from tokenpath.monitor import otel_names
from tokenpath.monitor.allowlist import AllowList
from tokenpath.monitor.exporter_metrics import ExporterMetrics, ProbeResult, render_probe
from tokenpath.monitor.modules import Module
from tokenpath.monitor.probing import (
    Aborter,
    ProbeOutcome,
    Prober,
    added_ttft_s,
    asked_version,
    monitor_limits,
    probe_route,
    quic_probe,
)
from tokenpath.monitor.runner import log_outcome
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace
from tokenpath.probe.transport import Target, Transport
from tokenpath.serve import exposition
from tokenpath.serve.runner import Config, Server
from tokenpath.wire.h1status import H1StatusSniffer
from tokenpath.wire.h2status import H2StatusSniffer
from tokenpath.wire.httpversion import HttpVersion

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

log = logging.getLogger("tokenpath.monitor")

DEFAULT_LISTEN = "127.0.0.1:9465"  # loopback unless told otherwise (the monitor's own default)
# Probes at once: a probe is a thread blocked on one socket for a few seconds, so 8 cost little; a scrape config
# with more targets per interval than this gets 503s, counted, and should raise it.
DEFAULT_CONCURRENCY = 8
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
# Taken off Prometheus' scrape timeout so the answer is written before Prometheus gives up on it: blackbox_exporter's
# default `timeout_offset`, or a tenth of a short timeout (writing a probe's answer takes about a millisecond).
DEADLINE_MARGIN_S = 0.5
DEADLINE_MARGIN_SHARE = 0.1
# Requests served beyond the probe slots: /metrics and the 503s stay answerable while every slot is busy. A whole
# request past slots + this waits for a thread (serve.exposition's rule; heads still arriving take no thread).
SPARE_CONNECTIONS = 4
MAX_QUERY_FIELDS = 16  # target, module and whatever a scrape config adds; parse_qs would otherwise take any number
MAX_TARGET_CHARS = 2048  # a target URL longer than this is refused (400): no real endpoint needs more
PROBE_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # the Prometheus text format


@dataclass(frozen=True)
class ExporterConfig:
    modules: Mapping[str, Module]
    allow: AllowList = field(default_factory=AllowList)
    listen: str = DEFAULT_LISTEN
    max_concurrency: int = DEFAULT_CONCURRENCY
    metric_names: str = otel_names.TOKENPATH

    def __post_init__(self) -> None:
        if not 1 <= self.max_concurrency <= 256:
            raise UsageError(f"`max_concurrency` must be between 1 and 256, not {self.max_concurrency}")
        if self.metric_names not in otel_names.NAMINGS:
            raise UsageError(
                f"`metric_names` must be one of {', '.join(otel_names.NAMINGS)}, not {self.metric_names!r}"
            )
        if not self.modules:
            raise UsageError("the exporter needs at least one module")
        self.host_port  # noqa: B018 - checks `listen`

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_hostport(self.listen, "`metrics_listen`")


def build_config(
    modules_file: str | None,
    allow: list[str],
    listen: str | None = None,
    max_concurrency: int | None = None,
    metric_names: str | None = None,
    env: dict[str, str] | None = None,
) -> ExporterConfig:
    """The exporter's configuration from its flags; unset ones keep ExporterConfig's defaults."""
    modules = monmod.load(modules_file, env) if modules_file else monmod.default_modules(env)
    return ExporterConfig(
        modules,
        AllowList.parse(allow),
        DEFAULT_LISTEN if listen is None else listen,
        DEFAULT_CONCURRENCY if max_concurrency is None else max_concurrency,
        otel_names.TOKENPATH if metric_names is None else metric_names,
    )


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


class Refusal(UsageError):
    """A /probe request answered without probing (a UsageError of the scraper's): its status, the refused_total
    reason, one line for the user."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    target: str
    module: Module
    routes: dict[str, ProbeConfig]  # via, and direct when the module has a direct_url
    budget_s: float  # the whole probe's deadline, every route inside it


def probe_budget_s(scrape_timeout: str | None, module_total_s: float) -> float:
    """The probe's deadline: Prometheus' scrape timeout minus a margin, never over the module's own total.
    No header (curl, a browser): the module's total. A header that is not a positive number is refused (400)."""
    if scrape_timeout is None:
        return module_total_s
    try:
        timeout = float(scrape_timeout)
    except ValueError:
        timeout = math.nan
    if not (timeout > 0 and math.isfinite(timeout)):
        raise Refusal(400, "bad_request", f"{SCRAPE_TIMEOUT_HEADER} {scrape_timeout!r}: expected seconds > 0")
    return min(timeout - min(DEADLINE_MARGIN_S, timeout * DEADLINE_MARGIN_SHARE), module_total_s)


def parse_probe_request(query: str, scrape_timeout: str | None, config: ExporterConfig) -> ProbeRequest:
    """A /probe request's query and deadline header → what to probe, or a Refusal (nothing was contacted)."""
    try:
        params = parse_qs(query, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        raise Refusal(400, "bad_request", f"more than {MAX_QUERY_FIELDS} query parameters") from None
    targets, modules = params.get("target", []), params.get("module", [])
    if len(targets) != 1 or not targets[0]:
        raise Refusal(400, "bad_request", "expected one target=URL parameter")
    if len(modules) > 1:
        raise Refusal(400, "bad_request", "expected at most one module=NAME parameter")
    target = targets[0]
    if len(target) > MAX_TARGET_CHARS:
        raise Refusal(400, "bad_request", f"the target URL is longer than {MAX_TARGET_CHARS} characters")
    name = modules[0] if modules else next(iter(config.modules))
    module = config.modules.get(name)
    if module is None:
        known = ", ".join(config.modules)
        raise Refusal(400, "unknown_module", f"unknown module {name[:64]!r}; this exporter has: {known}")
    if not config.allow:
        raise Refusal(
            403,
            "no_allow_list",
            "no target is allowed: start the exporter with --allow PATTERN "
            "(e.g. --allow 'https://*.example.com') naming the endpoints it may probe",
        )
    try:
        routes = module.routes(target)
    except UsageError as exc:
        raise Refusal(400, "bad_request", f"target: {exc}") from None
    for route, cfg in routes.items():
        try:
            allowed = config.allow.allows(cfg.url)
        except UsageError as exc:  # a path a server could resolve to another: never probed, whatever --allow says
            what = "target" if route == "via" else "the module's direct_url"
            raise Refusal(400, "bad_request", f"{what}: {exc}") from None
        if not allowed:
            what = "target" if route == "via" else f"the module's direct_url ({cfg.url})"
            raise Refusal(403, "not_allowed", f"{what} is not matched by any --allow pattern")
    budget = probe_budget_s(scrape_timeout, module.spec.total_timeout_s)
    return ProbeRequest(target, module, routes, budget)


class _StatusSniffer:
    """A probe's transport that reads the answer's final status beside the probe for probe_http_status_code: the
    probe raises on a non-2xx status, and its exception carries a message, not the status. The final head's, once
    whole (wire/h1status.py: an Early Hints 103 or a head refused as too large is not the answer's status), or over
    HTTP/2 the first final HPACK header block's (wire/h2status.py)."""

    def __init__(self, inner: Transport, statuses: list[int], http2: bool = False) -> None:
        self._inner = inner
        self._statuses = statuses
        self._sniffer = H2StatusSniffer() if http2 else H1StatusSniffer()

    def _see(self, data: bytes) -> bytes:
        if not self._sniffer.done:
            status = self._sniffer.feed(data)
            if status is not None and not self._statuses:
                self._statuses.append(status)
        return data

    def sendall(self, data: bytes) -> None:
        self._inner.sendall(data)

    def recv(self, timeout_s: float) -> bytes:
        return self._see(self._inner.recv(timeout_s))

    def drain(self) -> bytes:
        return self._see(self._inner.drain())

    def close(self) -> None:
        self._inner.close()


ProberFactory = Callable[[list[int]], Prober]  # (a list the probe appends the status it saw to) -> a prober


def sniffing_prober(aborter: Aborter) -> ProberFactory:
    """The monitor's prober (probe_stream through the aborter, monitor_limits), its transport sniffed for the
    status line."""

    def factory(statuses: list[int]) -> Prober:
        def connect(target: Target, cfg: ProbeConfig) -> Transport:
            return _StatusSniffer(aborter.connect(target, cfg), statuses, http2=cfg.http_version is HttpVersion.HTTP2)

        def prober(cfg: ProbeConfig, stream_id: str) -> Trace:
            if cfg.http_version is HttpVersion.HTTP3:  # its own UDP socket, no TCP transport to sniff: a failed
                return quic_probe(cfg, stream_id, aborter)  # probe's status is 0, a streamed one's its trace's
            return probe_stream(cfg, stream_id=stream_id, connect=connect, limits=monitor_limits(cfg))

        return prober

    return factory


STOPPING = b"the exporter is stopping: this probe was cut short, not measured\n"


class ProbeCut(TokenpathError):
    """A probe the exporter's stop cut short: answered 503 (the scrape failed, the target not blamed)."""


class ProbeExporter:
    """/probe and /metrics, with no socket of its own: handle() is called from the server's threads."""

    def __init__(
        self,
        config: ExporterConfig,
        probers: ProberFactory,
        clock: Callable[[], float] = time.monotonic,
        stopped: threading.Event | None = None,
    ) -> None:
        self.config = config
        self._stopped = stopped  # set when the exporter stops: the probes in flight are cut, not measured
        self.metrics = ExporterMetrics(list(config.modules))
        self._probers = probers
        self._clock = clock
        self._slots = threading.BoundedSemaphore(config.max_concurrency)

    def handle(self, method: str, path: str, query: str, scrape_timeout: str | None) -> Answer:
        if path != "/probe":
            return Answer(404, b"tokenpath monitor --exporter: GET /probe?target=URL&module=NAME, or /metrics\n")
        if method != "GET":
            return Answer(405, b"GET /probe?target=URL&module=NAME\n")
        try:
            request = parse_probe_request(query, scrape_timeout, self.config)
        except Refusal as refusal:
            self.metrics.refused.labels(refusal.reason).inc()
            log_refusal(refusal)
            return Answer(refusal.status, f"{refusal}\n".encode())
        if not self._slots.acquire(blocking=False):
            self.metrics.dropped.inc()
            message = f"every one of the {self.config.max_concurrency} probe slots is busy (--max-concurrency)\n"
            return Answer(503, message.encode())
        try:
            with self.metrics.in_flight.track_inprogress():
                return Answer(200, self.probe(request), PROBE_CONTENT_TYPE)
        except ProbeCut:
            return Answer(503, STOPPING)
        finally:
            self._slots.release()

    def probe(self, request: ProbeRequest) -> bytes:
        """Every route of the request, `via` first (its result is the probe's; `direct` gets what is left of the
        deadline), then that probe's metrics."""
        started = self._clock()
        deadline = started + request.budget_s
        statuses: list[int] = []
        outcomes: dict[str, ProbeOutcome] = {}
        for route, cfg in request.routes.items():
            left = deadline - self._clock()
            sink: list[int] = statuses if route == "via" else []
            if left <= 0:
                outcomes[route] = _out_of_time(request.target, route, cfg)
                continue
            outcomes[route] = probe_route(
                request.target, route, replace(cfg, total_timeout_s=min(cfg.total_timeout_s, left)), self._probers(sink)
            )
        if self._stopped is not None and self._stopped.is_set():
            # the stop aborted it (the long-running monitor drops such a probe too): a 200 with probe_success 0 and
            # the abort's error blamed the target for every probe in flight at each rollout
            raise ProbeCut
        added = added_ttft_s(list(outcomes.values()))
        for outcome in outcomes.values():
            log_outcome(outcome, added if outcome.route == "via" else None)
        via = outcomes["via"]
        self.metrics.probes.labels(request.module.name, via.outcome).inc()
        status = via.metrics.status if via.metrics is not None else (statuses[0] if statuses else 0)
        result = ProbeResult(request.target, request.module.spec.api, outcomes, self._clock() - started, status, added)
        urls = {route: cfg.url for route, cfg in request.routes.items()}
        return render_probe(result, self.config.metric_names, urls, request.module.request.model)


def log_refusal(refusal: Refusal) -> None:
    """One line per refused /probe, with the reason the scraper was answered: the log is where whoever runs the
    exporter sees a scrape config (or someone else) asking for what it will not probe."""
    record = {"event": "refused", "status": refusal.status, "reason": refusal.reason, "message": str(refusal)}
    log.warning(json.dumps(record))


def _out_of_time(target: str, route: str, cfg: ProbeConfig) -> ProbeOutcome:
    message = "no time was left of the scrape's deadline for this route"
    return ProbeOutcome(target, route, "", "total_timeout", message, None, (), time.time(), asked_version(cfg))


def wsgi_app(exporter: ProbeExporter) -> Callable[[WSGIEnvironment, StartResponse], list[bytes]]:
    metrics_app = make_wsgi_app(exporter.metrics.registry)  # content negotiation (OpenMetrics, gzip) as elsewhere

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return list(metrics_app(environ, start_response))
        scrape_timeout = environ.get("HTTP_" + SCRAPE_TIMEOUT_HEADER.upper().replace("-", "_"))
        answer = exporter.handle(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""), scrape_timeout)
        headers = [("Content-Type", answer.content_type), ("Content-Length", str(len(answer.body)))]
        start_response(f"{answer.status} {HTTPStatus(answer.status).phrase}", headers)
        return [answer.body]

    return app


class ExporterApp:
    """The exporter as serve.runner's app: the answers served from threads; close() aborts the probes in flight."""

    def __init__(self, config: ExporterConfig) -> None:
        self.config = config
        self.aborter = Aborter()
        self.exporter = ProbeExporter(config, sniffing_prober(self.aborter), stopped=self.aborter.stopped)
        self._httpd: WSGIServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() first"
        return f"http://{join_hostport(self.config.host_port[0], self._httpd.server_address[1])}"

    def note(self) -> str:
        allowed = ", ".join(p.text for p in self.config.allow.patterns) or "nothing: pass --allow"
        return f"exporter: /probe?target=URL&module={'|'.join(self.config.modules)}, /metrics; allowed {allowed}"

    async def start(self) -> None:
        host, port = self.config.host_port
        threads = self.config.max_concurrency + SPARE_CONNECTIONS
        self._httpd = exposition.serve_app(host, port, wsgi_app(self.exporter), threads)

    async def close(self) -> None:
        self.aborter.stop()
        httpd = self._httpd
        if httpd is not None:

            def stop() -> None:  # shutdown() waits for serve_forever's loop: not on the event loop's thread
                httpd.shutdown()
                httpd.server_close()

            threading.Thread(target=stop, daemon=True).start()


def serve(config: ExporterConfig, announce: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT (serve.runner's signals); stopping aborts the probes in flight."""
    host, port = config.host_port
    Server(Config("monitor", host, port, loop="asyncio"), lambda _sock: ExporterApp(config)).run(announce)
    announce("stopped")
