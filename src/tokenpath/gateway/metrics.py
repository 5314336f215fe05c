"""Prometheus metrics of the gateway (prometheus-client), served on their own port.

One worker keeps them as plain numbers read at scrape time (gateway/tallies.py). With several workers every process
writes its samples to a shared directory (prometheus-client's multiprocess mode) and the parent serves the merged
view. Per-read counting stays off the hot path: a stream adds its frames and bytes once, when it ends."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol, TypeVar

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values

from tokenpath.gateway import tallies
from tokenpath.serve import exposition

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ADDED_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MULTIPROC_PREFIX = "tokenpath-gw-metrics-"  # + the parent's pid + "-": a later run can tell whose dir it was


class CounterSeries(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class GaugeSeries(Protocol):
    def inc(self, amount: float = 1) -> None: ...
    def dec(self, amount: float = 1) -> None: ...
    def set(self, value: float) -> None: ...


class HistogramSeries(Protocol):
    def observe(self, amount: float) -> None: ...


MergeMode = Literal["livesum", "min"]  # how workers' values of a gauge merge (prometheus-client's multiprocess_mode)
S_co = TypeVar("S_co", covariant=True)
S = TypeVar("S")
F = TypeVar(
    "F",
    tallies.Family[tallies.CounterTally],
    tallies.Family[tallies.GaugeTally],
    tallies.Family[tallies.HistogramTally],
)


class Labelled(Protocol[S_co]):
    """A metric with labels: prometheus-client's Counter, Gauge, Histogram, or a tallies.Family."""

    def labels(self, *labelvalues: str) -> S_co: ...


class _Tallied:
    """The metrics as tallies (gateway/tallies.py), exposed by one collector on the registry: one worker (a gauge's
    MergeMode is not used: one process has nothing to merge)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.families: list[tallies.AnyFamily] = []

    def _kept(self, family: F) -> F:
        self.families.append(family)
        return family

    def counter(self, name: str, doc: str, labelnames: Sequence[str]) -> Labelled[CounterSeries]:
        return self._kept(tallies.counters(name, doc, labelnames))

    def gauge(self, name: str, doc: str, labelnames: Sequence[str], shared_as: MergeMode) -> Labelled[GaugeSeries]:
        return self._kept(tallies.gauges(name, doc, labelnames))

    def histogram(
        self, name: str, doc: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> Labelled[HistogramSeries]:
        return self._kept(tallies.histograms(name, doc, buckets, labelnames))

    def one_counter(self, name: str, doc: str) -> CounterSeries:
        return self._kept(tallies.counters(name, doc)).only()

    def one_gauge(self, name: str, doc: str, shared_as: MergeMode) -> GaugeSeries:
        return self._kept(tallies.gauges(name, doc)).only()

    def one_histogram(self, name: str, doc: str, buckets: Sequence[float]) -> HistogramSeries:
        return self._kept(tallies.histograms(name, doc, buckets)).only()

    def done(self) -> None:
        self.registry.register(tallies.TallyCollector(self.families))


class _Shared:
    """prometheus-client's own metrics: with several workers their samples go to the shared multiprocess files as
    they happen, so a client that has its answer finds it in the parent's /metrics."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def counter(self, name: str, doc: str, labelnames: Sequence[str]) -> Labelled[CounterSeries]:
        return Counter(name, doc, labelnames, registry=self.registry)

    def gauge(self, name: str, doc: str, labelnames: Sequence[str], shared_as: MergeMode) -> Labelled[GaugeSeries]:
        return Gauge(name, doc, labelnames, multiprocess_mode=shared_as, registry=self.registry)

    def histogram(
        self, name: str, doc: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> Labelled[HistogramSeries]:
        return Histogram(name, doc, labelnames, buckets=buckets, registry=self.registry)

    def one_counter(self, name: str, doc: str) -> CounterSeries:
        return Counter(name, doc, registry=self.registry)

    def one_gauge(self, name: str, doc: str, shared_as: MergeMode) -> GaugeSeries:
        return Gauge(name, doc, multiprocess_mode=shared_as, registry=self.registry)

    def one_histogram(self, name: str, doc: str, buckets: Sequence[float]) -> HistogramSeries:
        return Histogram(name, doc, buckets=buckets, registry=self.registry)

    def done(self) -> None:
        pass


class Metrics:
    """The gateway's metrics. One worker keeps them as tallies read at scrape time; with several workers
    (`shared`, by default when prometheus-client's multiprocess directory is set) they are prometheus-client's own.
    Either way the same names, labels, help and samples reach /metrics."""

    def __init__(self, registry: CollectorRegistry, shared: bool | None = None) -> None:
        if shared is None:  # as prometheus-client chose at its import (either spelling of its directory's variable)
            shared = values.ValueClass is not values.MutexValue
        m: _Tallied | _Shared = _Shared(registry) if shared else _Tallied(registry)
        self._children: dict[tuple[int, tuple[str, ...]], object] = {}  # see child()
        self.upstream_ttft = m.histogram(
            "tokenpath_gateway_upstream_ttft_seconds",
            "Request sent upstream to the upstream's first content frame, by its API format's classification (not a "
            "role-only delta, comment, heartbeat, start or ping event; for a response that is not a token stream, "
            "its first body byte)",
            ["pool"],
            LATENCY_BUCKETS,
        )
        self.upstream_head = m.histogram(
            "tokenpath_gateway_upstream_head_seconds",
            "Request sent upstream to the upstream's response head",
            ["pool"],
            LATENCY_BUCKETS,
        )
        self.added_ttft = m.one_histogram(
            "tokenpath_gateway_added_ttft_seconds",
            "TTFT the gateway adds: first upstream body byte in to the same bytes written to the client",
            ADDED_BUCKETS,
        )
        self.streams_active = m.one_gauge("tokenpath_gateway_streams_active", "Responses in flight", "livesum")
        self.requests = m.counter(
            "tokenpath_gateway_requests_total",
            "Requests answered, by the status the client got (a stream that failed after its head, under that head's)",
            ["code"],
        )
        self.frames = m.one_counter(
            "tokenpath_gateway_frames_relayed_total",
            "Stream frames relayed to clients: SSE events, event-stream messages, NDJSON lines",
        )
        self.bytes = m.one_counter("tokenpath_gateway_bytes_relayed_total", "Response body bytes relayed to clients")
        self.keepalives = m.counter(
            "tokenpath_gateway_keepalives_total",
            "Keep-alives written to clients while their upstream was silent (limits.keepalive_interval_s): the "
            "format's own (an SSE comment line, Anthropic's ping event), by pool and API format",
            ["pool", "format"],
        )
        self.errors = m.counter(
            "tokenpath_gateway_errors_total",
            "Failures by reason: each failed attempt at a member before the response head, by its kind; each request "
            "that ended abnormally, once, by its outcome",
            ["reason"],
        )
        self.failovers = m.counter("tokenpath_gateway_failovers_total", "Retries elsewhere", ["pool"])
        self.tls_handshakes = m.counter(
            "tokenpath_gateway_upstream_tls_handshakes_total",
            "TLS handshakes with https members, by resumption",
            ["pool", "resumed"],
        )
        self.member_healthy = m.gauge(
            "tokenpath_gateway_member_healthy",
            "1 when the member takes traffic, 0 while ejected",
            ["pool", "member"],
            "min",
        )
        m.done()

    def child(self, metric: Labelled[S], *labels: str) -> S:
        """`metric.labels(*labels)`, looked up once: the request path's labels are few (pools, members, statuses)
        and prometheus-client's own lookup (with workers) costs a lock and a dozen calls each time; a tallies.Family's
        is one dict lookup, as this is."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found  # type: ignore[return-value]


def serve(host: str, port: int, registry: CollectorRegistry | None, multiproc_dir: Path | None = None) -> None:
    """Start the /metrics endpoint in a thread. With a multiprocess dir, serve the merged view of all workers."""
    if multiproc_dir is not None:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(multiproc_dir))  # type: ignore[no-untyped-call]
    exposition.serve(host, port, registry or CollectorRegistry())


def sweep_orphaned_dirs() -> None:
    """Remove multiprocess dirs left by gateways that died without cleaning up (SIGKILL)."""
    for path in Path(tempfile.gettempdir()).glob(f"{MULTIPROC_PREFIX}*-*"):
        pid = path.name.removeprefix(MULTIPROC_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def enable_multiprocess(directory: Path) -> None:
    """Must run before prometheus_client creates any metric in a worker (spawned workers inherit the env)."""
    os.environ[MULTIPROC_ENV] = str(directory)
