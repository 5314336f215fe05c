"""The long-running monitor's measurements over OTLP/HTTP (protobuf), beside /metrics: `otlp_endpoint` in the
[monitor] table or `--otlp-endpoint URL`. The OpenTelemetry SDK and its OTLP/HTTP exporter do the wire work (an
optional extra, `pip install 'tokenpath[otel]'`: the monitor runs without it until OTLP is asked for).

What is exported, recorded from the very outcomes the Prometheus metrics record (runner.Watch's sinks):

- the GenAI semantic-convention histograms `gen_ai.client.operation.time_to_first_chunk` and
  `gen_ai.client.operation.time_per_output_chunk` (unit s, the conventions' buckets, their attributes plus
  `tokenpath.hop` and `tokenpath.target`: monitor/otel_names.py says what a chunk is in tokenpath's words);
- tokenpath's own, for what the conventions lack: `tokenpath.monitor.added_ttft` (s), `tokenpath.monitor
  .frames_per_read`, and the counters `tokenpath.monitor.probes` (by outcome), `tokenpath.monitor.stream_ends` (by
  `tokenpath.end`: complete, cut_error, cut_silent) and `tokenpath.monitor.probes_dropped` (by reason), under the
  same names /metrics uses once converted (dots to underscores, `_seconds`, `_total`).

Cumulative temporality (what a Prometheus-backed collector wants); every `otlp_interval_s` and once more on stop
(the flush). Headers (an API key) come from the environment as the SDK reads them, `OTEL_EXPORTER_OTLP_HEADERS`
or `OTEL_EXPORTER_OTLP_METRICS_HEADERS`: never from the config file, never printed. Series come only from the
config (targets, routes, outcome and drop-reason names), so a hostile target cannot grow them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tokenpath import __version__
from tokenpath.errors import UsageError
from tokenpath.monitor import otel_names
from tokenpath.monitor.config import MonitorConfig
from tokenpath.monitor.metrics import ADDED_BUCKETS, FPR_BUCKETS
from tokenpath.monitor.otlp_endpoint import endpoint_url
from tokenpath.monitor.probing import ProbeOutcome

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter

log = logging.getLogger("tokenpath.monitor")

# One export's POST, retries included (the periodic ones, on the SDK's own thread).
EXPORT_TIMEOUT_S = 5.0
# A stop flushes once and waits this long at most for it: a collector that does not answer then delays the monitor's
# exit by no more (the export still under way is dropped with the process).
STOP_FLUSH_TIMEOUT_S = 1.0
SDK_LOGGERS = ("opentelemetry",)  # the SDK's and its exporters' own log lines (an export that failed)
SCOPE = "tokenpath.monitor"  # the instrumentation scope's name
SERVICE_NAME = "tokenpath-monitor"  # the resource's service.name unless OTEL_SERVICE_NAME/_RESOURCE_ATTRIBUTES say
TARGET = "tokenpath.target"  # ours: the monitor's target name (two targets may share a server and a model)
OUTCOME = "tokenpath.outcome"  # ours: ok, or the failure's reason (as /metrics' `outcome` label)
DROP_REASON = "tokenpath.reason"  # ours: why a scheduled probe was dropped (schedule.py)
INSTALL_HINT = "pip install 'tokenpath[otel]'"


def log_as_json(level: str, endpoint: str | None = None) -> None:
    """The SDK's log lines (an export that failed, a retry) as the monitor's own: JSON lines on stderr at `level`,
    never plain text between them; `endpoint`'s query and user:password@ masked in them, as the monitor's own lines
    show it (urllib3's retry warnings quote the URL's path and query whole)."""
    from tokenpath.jsonlog import configure_logging

    for name in SDK_LOGGERS:
        configure_logging(level, logger=name)
        if endpoint is not None:
            for handler in logging.getLogger(name).handlers:
                handler.addFilter(MaskedEndpoint(endpoint))


class MaskedEndpoint(logging.Filter):
    """Rewrites a record's message with the endpoint's secrets (its query, its user:password) masked. Written here:
    logging has no redaction of its own, and the SDK's text is a third party's, with the URL anywhere in it."""

    def __init__(self, endpoint: str) -> None:
        super().__init__()
        parts = urlsplit(endpoint)
        userinfo = parts.netloc.rpartition("@")[0]
        self.secrets = [s for s in (parts.query, userinfo) if s]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            for secret in self.secrets:
                message = message.replace(secret, "***")
            record.msg, record.args = message, None
        return True


def require() -> None:
    """Raises a UsageError that says what to install when the SDK or its OTLP/HTTP exporter is missing."""
    _sdk()


def _sdk() -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
    except ImportError as exc:
        raise UsageError(
            f"`otlp_endpoint` needs the OpenTelemetry SDK and its OTLP/HTTP exporter ({exc.name or exc} is missing): "
            f"{INSTALL_HINT}"
        ) from None
    return OTLPMetricExporter, MeterProvider, PeriodicExportingMetricReader, Resource


class OtlpExport:
    """An OutcomeSink (runner.py) that exports over OTLP. `exporter` replaces the OTLP/HTTP one (not used by the
    monitor; the tests use the real one against a receiver on loopback)."""

    def __init__(self, config: MonitorConfig, *, exporter: MetricExporter | None = None) -> None:
        settings = config.settings
        if settings.otlp_endpoint is None and exporter is None:
            raise UsageError("OTLP export needs `otlp_endpoint`")
        otlp_exporter, meter_provider, periodic_reader, resource = _sdk()
        self.endpoint = endpoint_url(settings.otlp_endpoint) if settings.otlp_endpoint else "(given exporter)"
        if exporter is None:
            exporter = otlp_exporter(endpoint=self.endpoint, timeout=EXPORT_TIMEOUT_S)
        interval_ms = settings.otlp_interval_s * 1000
        reader = periodic_reader(
            exporter, export_interval_millis=interval_ms, export_timeout_millis=EXPORT_TIMEOUT_S * 1000
        )
        self._provider = meter_provider(
            metric_readers=[reader],
            resource=resource.create({"service.name": SERVICE_NAME, "service.version": __version__}),
            shutdown_on_exit=False,  # close() flushes; a second shutdown at exit would only warn
        )
        meter = self._provider.get_meter(SCOPE, __version__)
        buckets = list(otel_names.BUCKETS)
        self._ttfc = meter.create_histogram(
            otel_names.TIME_TO_FIRST_CHUNK,
            unit=otel_names.UNIT,
            description="Time to the first content chunk (frame), from the request's last byte",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self._per_chunk = meter.create_histogram(
            otel_names.TIME_PER_OUTPUT_CHUNK,
            unit=otel_names.UNIT,
            description="Time from the previous chunk (frame) to each chunk after the first, by arrival",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self._added = meter.create_histogram(
            "tokenpath.monitor.added_ttft",
            unit="s",
            description="TTFT via the path minus TTFT direct, probed back to back (a negative difference counts as 0)",
            explicit_bucket_boundaries_advisory=list(ADDED_BUCKETS),
        )
        self._fpr = meter.create_histogram(
            "tokenpath.monitor.frames_per_read",
            unit="1",
            description="Frames per read of one probe (1 = streamed)",
            explicit_bucket_boundaries_advisory=list(FPR_BUCKETS),
        )
        self._probes = meter.create_counter(
            "tokenpath.monitor.probes", unit="{probe}", description="Probes by outcome (ok, or the failure's reason)"
        )
        self._ends = meter.create_counter(
            otel_names.STREAM_ENDS,
            unit="{probe}",
            description="Probes' streams by how they ended: complete, cut_error or cut_silent (wire/ending.py)",
        )
        self._dropped = meter.create_counter(
            "tokenpath.monitor.probes_dropped",
            unit="{probe}",
            description="Scheduled probes that never ran: overrun or concurrency",
        )
        self._attributes: dict[tuple[str, str], dict[str, str | int]] = {}
        for target in config.targets:
            for route, cfg in target.routes.items():
                genai = otel_names.GenAIAttributes.of(str(cfg.api), cfg.model, cfg.url, route).otel()
                self._attributes[(target.name, route)] = {**genai, TARGET: target.name}
        self._closed = False

    def record(self, outcome: ProbeOutcome) -> None:
        attributes = self._attributes[(outcome.target, outcome.route)]
        self._probes.add(1, {TARGET: outcome.target, otel_names.HOP: outcome.route, OUTCOME: outcome.outcome})
        if outcome.end is not None:
            where = {TARGET: outcome.target, otel_names.HOP: outcome.route}
            self._ends.add(1, {**where, otel_names.END: outcome.end.kind.value})
        m = outcome.metrics
        if m is None or not outcome.ok:  # as /metrics: only an `ok` probe's stream gives figures
            return
        if m.frames_per_read is not None:
            self._fpr.record(m.frames_per_read, {TARGET: outcome.target, otel_names.HOP: outcome.route})
        if m.ttft_ms is not None:  # as /metrics: only a probe that measured a TTFT times chunks
            self._ttfc.record(m.ttft_ms / 1000, attributes)
            for t in otel_names.chunk_times(outcome.gaps_s, m.frames, m.arrivals):
                self._per_chunk.record(t, attributes)

    def record_added(self, target: str, added_s: float) -> None:
        self._added.record(max(added_s, 0.0), {TARGET: target})

    def record_dropped(self, target: str, reason: str, count: int) -> None:
        self._dropped.add(count, {TARGET: target, DROP_REASON: reason})

    def close(self) -> None:
        """Flush what was recorded since the last export, then stop: at most about STOP_FLUSH_TIMEOUT_S, however
        slow the collector (the SDK's thread, a daemon, is left to its POST)."""
        if self._closed:
            return
        self._closed = True
        self._provider.shutdown(timeout_millis=STOP_FLUSH_TIMEOUT_S * 1000)
