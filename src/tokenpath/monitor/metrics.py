"""The monitor's Prometheus metrics (prometheus-client). Labels come from the config only — `target` (its name)
and `route` (via the path, or direct around it) — never from anything an endpoint returns, so a hostile or
broken endpoint cannot grow the series count. Memory is fixed per target: histograms, gauges and one bounded
window of recent bursts.

With `metric_names = "otel"`, TTFT is the OpenTelemetry GenAI histogram
`gen_ai_client_operation_time_to_first_chunk_seconds` (its buckets, its attributes as labels, plus `tokenpath_hop`
and `target`; all from the config too) and `gen_ai_client_operation_time_per_output_chunk_seconds` is added;
everything the conventions lack keeps its tokenpath name and labels (monitor/otel_names.py).
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tokenpath.monitor import otel_names
from tokenpath.monitor.config import MonitorConfig
from tokenpath.monitor.probing import OK, ProbeOutcome
from tokenpath.monitor.schedule import DROP_REASONS
from tokenpath.wire.ending import EndKind

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
ADDED_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
GAP_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
FPR_BUCKETS = (1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 50.0, 100.0)  # the heatmap's rows


class BurstWindow:
    """The bursts (frames completed by one arrival) of the last N probes; `modal` is the burst most arrivals had.
    A tie goes to the larger burst: the gauge exists to say 'coalescing', so it does not round that away."""

    def __init__(self, size: int) -> None:
        self._probes: deque[dict[int, int]] = deque(maxlen=size)

    def add(self, bursts: dict[int, int]) -> None:
        self._probes.append(dict(bursts))

    def modal(self) -> int | None:
        tally: Tally[int] = Tally()
        for bursts in self._probes:
            tally.update(bursts)
        if not tally:
            return None
        return max(tally.items(), key=lambda kv: (kv[1], kv[0]))[0]


class MonitorMetrics:
    def __init__(
        self, config: MonitorConfig, registry: CollectorRegistry | None = None, started: float | None = None
    ) -> None:
        r = self.registry = registry or CollectorRegistry()
        by_route = ["target", "route"]
        self.ttfb = Histogram(
            "tokenpath_monitor_ttfb_seconds",
            "Last request byte written to first response byte",
            by_route,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.otel = config.settings.metric_names == otel_names.OTEL
        self.ttft, self.chunk_time = ttft_histograms(r, self.otel, by_route)
        self.first_token = Histogram(
            "tokenpath_monitor_first_token_seconds",
            "Last request byte written to the arrival of the first reasoning or content frame (TTFT unless a "
            "reasoning model thought first)",
            by_route,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.added_ttft = Histogram(
            "tokenpath_monitor_added_ttft_seconds",
            "TTFT via the path minus TTFT direct, probed back to back (a negative difference counts as 0)",
            ["target"],
            buckets=ADDED_BUCKETS,
            registry=r,
        )
        self.added_ttft_last = Gauge(
            "tokenpath_monitor_added_ttft_last_seconds",
            "The latest cycle's added TTFT, sign kept",
            ["target"],
            registry=r,
        )
        self.gap = Histogram(
            "tokenpath_monitor_frame_gap_seconds",
            "Time between two consecutive arrivals",
            by_route,
            buckets=GAP_BUCKETS,
            registry=r,
        )
        self.fpr = Histogram(
            "tokenpath_monitor_frames_per_read",
            "Frames per read of one probe (1 = streamed)",
            by_route,
            buckets=FPR_BUCKETS,
            registry=r,
        )
        self.coalescing = Gauge(
            "tokenpath_monitor_coalescing",
            "Modal burst over the latest probes: frames most arrivals carried (1 = every frame alone)",
            by_route,
            registry=r,
        )
        self.probes = Counter(
            "tokenpath_monitor_probes_total",
            "Probes by outcome (ok, or the failure's reason)",
            [*by_route, "outcome"],
            registry=r,
        )
        self.ends = Counter(
            otel_names.prometheus_name(otel_names.STREAM_ENDS, unit=""),
            "Probes' streams by how they ended: complete (the format's final event), cut_error (an error status, "
            "the format's error frame, a reset) or cut_silent (the body ended without the final event)",
            [*by_route, otel_names.END_LABEL],
            registry=r,
        )
        self.last_success = Gauge(
            "tokenpath_monitor_last_success_timestamp_seconds",
            "Unix time the latest successful probe started (the monitor's start until one has)",
            by_route,
            registry=r,
        )
        self.interval = Gauge(
            "tokenpath_monitor_interval_seconds", "Declared time between two probes of a target", ["target"], registry=r
        )
        self.dropped = Counter(
            "tokenpath_monitor_probes_dropped",
            "Scheduled probes that never ran: overrun (the target's previous probe still ran) or concurrency (every "
            "max_concurrency slot stayed busy)",
            ["target", "reason"],
            registry=r,
        )
        self._windows: dict[tuple[str, str], BurstWindow] = {}
        self._ttft_labels: dict[tuple[str, str], dict[str, str]] = {}  # the TTFT histograms' labels per route
        for target in config.targets:
            self.interval.labels(target.name).set(target.interval_s)
            for reason in DROP_REASONS:
                self.dropped.labels(target.name, reason)  # 0 until one is dropped, so rate() has a series
            for route, cfg in target.routes.items():
                self._windows[(target.name, route)] = BurstWindow(config.settings.coalescing_window)
                attributes = otel_names.GenAIAttributes.of(str(cfg.api), cfg.model, cfg.url, route)
                by_names = attributes.prometheus(target.name) if self.otel else {"target": target.name, "route": route}
                self._ttft_labels[(target.name, route)] = by_names
                self.probes.labels(target.name, route, OK)  # the series exists before the first probe ends
                # from the start, so the staleness alert fires for a target that never succeeds too (with no series
                # it had nothing to compare: a target down since the monitor started was never stale)
                self.last_success.labels(target.name, route).set(time.time() if started is None else started)
                for kind in EndKind:
                    self.ends.labels(target.name, route, kind.value)  # 0 until one ends so: increase() has a series

    def record(self, outcome: ProbeOutcome) -> None:
        labels = (outcome.target, outcome.route)
        self.probes.labels(*labels, outcome.outcome).inc()
        if outcome.end is not None:
            self.ends.labels(*labels, outcome.end.kind.value).inc()
        m = outcome.metrics
        if m is None:
            return
        if m.ttfb_ms is not None:
            self.ttfb.labels(*labels).observe(m.ttfb_ms / 1000)
        if not outcome.ok:
            # a cut stream, or one that carried no content (or a format not read): its TTFB is its own, but its frames
            # per read and gaps no measured stream's (a target answering empty streams in one write fired the
            # coalescing alert); only `ok` probes give figures, as `--once`'s summary has it
            return
        if m.frames_per_read is not None:
            self.fpr.labels(*labels).observe(m.frames_per_read)
        gap = self.gap.labels(*labels)
        for g in outcome.gaps_s:
            gap.observe(g)
        window = self._windows[labels]
        window.add(m.bursts)
        modal = window.modal()
        if modal is not None:
            self.coalescing.labels(*labels).set(modal)
        if m.ttft_ms is not None:
            ttft_labels = self._ttft_labels[labels]
            self.ttft.labels(**ttft_labels).observe(m.ttft_ms / 1000, exemplar={"stream_id": outcome.stream_id})
            self.last_success.labels(*labels).set(outcome.started_unix)
            if self.chunk_time is not None:
                chunk_time = self.chunk_time.labels(**ttft_labels)
                for t in otel_names.chunk_times(outcome.gaps_s, m.frames, m.arrivals):
                    chunk_time.observe(t)
        if m.first_token_ms is not None:
            self.first_token.labels(*labels).observe(m.first_token_ms / 1000)

    def record_added(self, target: str, added_s: float) -> None:
        self.added_ttft.labels(target).observe(max(added_s, 0.0))
        self.added_ttft_last.labels(target).set(added_s)

    def record_dropped(self, target: str, reason: str, count: int) -> None:
        self.dropped.labels(target, reason).inc(count)


def ttft_histograms(registry: CollectorRegistry, otel: bool, by_route: list[str]) -> tuple[Histogram, Histogram | None]:
    """TTFT, and with OpenTelemetry names also the time per output chunk (None otherwise)."""
    if otel:
        return otel_histograms(registry, exemplar=True)
    ttft = Histogram(
        "tokenpath_monitor_ttft_seconds",
        "Last request byte written to the arrival of the first content frame (exemplar: the stream id)",
        by_route,
        buckets=TTFT_BUCKETS,
        registry=registry,
    )
    return ttft, None


def otel_histograms(registry: CollectorRegistry, exemplar: bool = False) -> tuple[Histogram, Histogram]:
    """The GenAI conventions' two client histograms, time to first chunk and time per output chunk
    (monitor/otel_names.py: their names, buckets and labels), built here only: the monitor's /metrics and each
    exporter probe's answer. `exemplar`: the TTFT observations carry the stream id (the monitor's)."""
    ttft = Histogram(
        otel_names.prometheus_name(otel_names.TIME_TO_FIRST_CHUNK),
        "Time to the first content chunk (frame), from the request's last byte"
        + (" (exemplar: the stream id)" if exemplar else ""),
        otel_names.PROMETHEUS_LABELS,
        buckets=otel_names.BUCKETS,
        registry=registry,
    )
    chunk = Histogram(
        otel_names.prometheus_name(otel_names.TIME_PER_OUTPUT_CHUNK),
        "Time from the previous chunk (frame) to each chunk after the first, by arrival (0 within one read)",
        otel_names.PROMETHEUS_LABELS,
        buckets=otel_names.BUCKETS,
        registry=registry,
    )
    return ttft, chunk
