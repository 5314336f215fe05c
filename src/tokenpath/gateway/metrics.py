"""Prometheus metrics of the gateway (prometheus-client), served on their own port.

With several workers every process writes its samples to a shared directory (prometheus-client's multiprocess
mode) and the parent serves the merged view. Per-read counting stays off the hot path: a stream adds its frames
and bytes once, when it ends."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TypeVar

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tokenpath.serve import exposition

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ADDED_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MULTIPROC_PREFIX = "tokenpath-gw-metrics-"  # + the parent's pid + "-": a later run can tell whose dir it was
LabelledMetric = TypeVar("LabelledMetric", Counter, Gauge, Histogram)


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self._children: dict[tuple[int, tuple[str, ...]], object] = {}  # see child()
        self.upstream_ttft = Histogram(
            "tokenpath_gateway_upstream_ttft_seconds",
            "Request sent upstream to the upstream's first content frame, by its API format's classification (not a "
            "role-only delta, comment, heartbeat, start or ping event; for a response that is not a token stream, "
            "its first body byte)",
            ["pool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_head = Histogram(
            "tokenpath_gateway_upstream_head_seconds",
            "Request sent upstream to the upstream's response head",
            ["pool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.added_ttft = Histogram(
            "tokenpath_gateway_added_ttft_seconds",
            "TTFT the gateway adds: first upstream body byte in to the same bytes written to the client",
            buckets=ADDED_BUCKETS,
            registry=r,
        )
        self.streams_active = Gauge(
            "tokenpath_gateway_streams_active", "Responses in flight", multiprocess_mode="livesum", registry=r
        )
        self.requests = Counter(
            "tokenpath_gateway_requests_total",
            "Requests answered, by the status the client got (a stream that failed after its head, under that head's)",
            ["code"],
            registry=r,
        )
        self.frames = Counter(
            "tokenpath_gateway_frames_relayed_total",
            "Stream frames relayed to clients: SSE events, event-stream messages, NDJSON lines",
            registry=r,
        )
        self.bytes = Counter(
            "tokenpath_gateway_bytes_relayed_total", "Response body bytes relayed to clients", registry=r
        )
        self.keepalives = Counter(
            "tokenpath_gateway_keepalives_total",
            "Keep-alives written to clients while their upstream was silent (limits.keepalive_interval_s): the "
            "format's own (an SSE comment line, Anthropic's ping event), by pool and API format",
            ["pool", "format"],
            registry=r,
        )
        self.errors = Counter(
            "tokenpath_gateway_errors_total",
            "Failures by reason: each failed attempt at a member before the response head, by its kind; each request "
            "that ended abnormally, once, by its outcome",
            ["reason"],
            registry=r,
        )
        self.failovers = Counter("tokenpath_gateway_failovers_total", "Retries elsewhere", ["pool"], registry=r)
        self.tls_handshakes = Counter(
            "tokenpath_gateway_upstream_tls_handshakes_total",
            "TLS handshakes with https members, by resumption",
            ["pool", "resumed"],
            registry=r,
        )
        self.member_healthy = Gauge(
            "tokenpath_gateway_member_healthy",
            "1 when the member takes traffic, 0 while ejected",
            ["pool", "member"],
            multiprocess_mode="min",
            registry=r,
        )

    def child(self, metric: LabelledMetric, *labels: str) -> LabelledMetric:
        """`metric.labels(*labels)`, looked up once: the request path's labels are few (pools, members, statuses)
        and prometheus-client's own lookup costs a lock and a dozen calls each time."""
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
