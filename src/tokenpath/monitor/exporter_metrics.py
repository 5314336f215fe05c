"""What the exporter writes: one probe's answer (a fresh registry per probe, blackbox_exporter's `probe_*` plus
tokenpath's figures of that one stream) and the exporter's own /metrics (probes by module and outcome, dropped,
refused, in flight).

One probe's figures are gauges, as blackbox_exporter's are: a scrape carries one stream, so a histogram of it would
hold one observation. The exception is `metric_names = "otel"`: the GenAI conventions define histograms, so the
answer has them, with that probe's observations (Prometheus keeps one sample set per scrape; sum them over time).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.metrics_core import Metric

from tokenpath.hostport import redacted
from tokenpath.monitor import otel_names
from tokenpath.monitor.metrics import BurstWindow, otel_histograms
from tokenpath.monitor.probing import ProbeOutcome


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One /probe: its routes' outcomes (`via` first), how long it took, and the status line the target sent."""

    target: str  # the URL probed
    api: str
    outcomes: Mapping[str, ProbeOutcome]  # route -> outcome
    duration_s: float
    http_status: int  # of the via route's answer; 0 when none came (no connection, no status line)
    added_ttft_s: float | None

    @property
    def success(self) -> bool:
        return self.outcomes["via"].ok


def render_probe(result: ProbeResult, metric_names: str, urls: Mapping[str, str], model: str) -> bytes:
    """The /probe answer in the Prometheus text format. `urls`: route -> the URL it probed (server.address)."""
    r = CollectorRegistry(auto_describe=False)
    Gauge("probe_success", "Whether the probe of the target (the via route) streamed content", registry=r).set(
        result.success
    )
    Gauge("probe_duration_seconds", "How long the probe (every route) took", registry=r).set(result.duration_s)
    Gauge("probe_http_status_code", "The target's response status (0: none)", registry=r).set(result.http_status)
    by_route = ["route"]
    failure = Gauge(
        "tokenpath_probe_failure", "1 for the reason a route's probe failed", [*by_route, "reason"], registry=r
    )
    ttfb = Gauge("tokenpath_probe_ttfb_seconds", "Request sent to first response byte", by_route, registry=r)
    fpr = Gauge("tokenpath_probe_frames_per_read", "Frames per read (1 = streamed)", by_route, registry=r)
    coalescing = Gauge(
        "tokenpath_probe_coalescing",
        "The burst size most arrivals carried (1 = every frame alone)",
        by_route,
        registry=r,
    )
    frames = Gauge("tokenpath_probe_frames", "Frames (SSE events) received", by_route, registry=r)
    gap_p50 = Gauge("tokenpath_probe_frame_gap_p50_seconds", "Median time between arrivals", by_route, registry=r)
    gap_max = Gauge(
        "tokenpath_probe_frame_gap_max_seconds", "Longest time between arrivals (the stall)", by_route, registry=r
    )
    end = Gauge(
        "tokenpath_probe_stream_end",
        "1 for how a route's stream ended: complete, cut_error or cut_silent (the body ended without the format's "
        "final event)",
        [*by_route, otel_names.END_LABEL],
        registry=r,
    )
    end_at = Gauge(
        "tokenpath_probe_stream_end_seconds",
        "Request sent to the stream's end (a cut's total limit)",
        by_route,
        registry=r,
    )
    end_idle = Gauge(
        "tokenpath_probe_stream_end_idle_seconds",
        "Last response byte to the stream's end (a cut's idle limit)",
        by_route,
        registry=r,
    )
    otel = metric_names == otel_names.OTEL
    if otel:
        ttft, chunk = otel_histograms(r)
    else:
        ttft_gauge = Gauge(
            "tokenpath_probe_ttft_seconds", "Request sent to the first content frame", by_route, registry=r
        )
    for route, outcome in result.outcomes.items():
        if not outcome.ok:
            failure.labels(route, outcome.outcome).set(1)
        cut = outcome.end is not None and outcome.end.cut
        if outcome.end is not None:
            end.labels(route, outcome.end.kind.value).set(1)
            if outcome.end.at_ns is not None:
                end_at.labels(route).set(outcome.end.at_ns / 1e9)
            if outcome.end.since_last_byte_ns is not None:
                end_idle.labels(route).set(outcome.end.since_last_byte_ns / 1e9)
        m = outcome.metrics
        if m is None:
            continue
        frames.labels(route).set(m.frames)
        if m.ttfb_ms is not None:
            ttfb.labels(route).set(m.ttfb_ms / 1000)
        if cut:
            continue  # a short stream: its frames per read, gaps and TTFT are no whole stream's
        if m.frames_per_read is not None:
            fpr.labels(route).set(m.frames_per_read)
        window = BurstWindow(1)
        window.add(m.bursts)
        modal = window.modal()
        if modal is not None:
            coalescing.labels(route).set(modal)
        if m.gaps_ms:
            gap_p50.labels(route).set(m.gaps_ms["p50"] / 1000)
            gap_max.labels(route).set(m.gaps_ms["max"] / 1000)
        if m.ttft_ms is None:
            continue
        if not otel:
            ttft_gauge.labels(route).set(m.ttft_ms / 1000)
            continue
        # the target's credentials and query masked in the label, as in the log line (the scrape config's choice to
        # copy the raw target into `instance` is its own)
        labels = otel_names.GenAIAttributes.of(result.api, model, urls[route], route).prometheus(
            redacted(result.target)
        )
        ttft.labels(**labels).observe(m.ttft_ms / 1000)
        chunk_time = chunk.labels(**labels)
        for t in otel_names.chunk_times(outcome.gaps_s, m.frames, m.arrivals):
            chunk_time.observe(t)
    if result.added_ttft_s is not None:
        Gauge(
            "tokenpath_probe_added_ttft_seconds",
            "TTFT via the target minus TTFT direct, probed back to back",
            registry=r,
        ).set(result.added_ttft_s)
    return generate_latest(_Measured(r))


class _Measured:
    """A registry's families that have samples: a probe answer names only what that probe measured."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        return (family for family in self._registry.collect() if family.samples)


class ExporterMetrics:
    """The exporter's own /metrics. Labels: module names (from the modules file), outcome and reason labels (a
    fixed set of words), never a target URL, so whoever sends /probe requests cannot grow the series count."""

    def __init__(self, modules: list[str], registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.probes = Counter(
            "tokenpath_exporter_probes_total",
            "Probes run, by module and the via route's outcome",
            ["module", "outcome"],
            registry=r,
        )
        self.dropped = Counter(
            "tokenpath_exporter_probes_dropped_total",
            "Probe requests answered 503 at once: every --max-concurrency slot was busy",
            registry=r,
        )
        self.refused = Counter(
            "tokenpath_exporter_probes_refused_total",
            "Probe requests refused before probing, by reason (not_allowed, no_allow_list, "
            "unknown_module, bad_request)",
            ["reason"],
            registry=r,
        )
        self.in_flight = Gauge("tokenpath_exporter_probes_in_flight", "Probes running now", registry=r)
        for module in modules:
            self.probes.labels(module, "ok")  # the series exists before the first probe ends
        for reason in ("not_allowed", "no_allow_list", "unknown_module", "bad_request"):
            self.refused.labels(reason)
