"""One probe run and what it yields, joined with the stub's write log: the unit every row is built from."""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenpath.audit import AuditVerdict, StreamLog, added_ns
from tokenpath.clock import ns_to_ms
from tokenpath.probe.metrics import RunMetrics, run_metrics
from tokenpath.probe.trace import Trace
from tokenpath.results.model import MatrixRun
from tokenpath.stats import percentile
from tokenpath.wire.ending import StreamEnd


@dataclass(slots=True)
class RunRecord:
    path: str  # PathSpec label
    stream_id: str
    metrics: RunMetrics | None = None
    error: str | None = None
    path_added_ttft_ms: float | None = None  # first content arrival - the stub's write of that frame
    frame_delay_ms: dict[str, float] = field(default_factory=dict)  # the same for every frame: p50, max
    audit: AuditVerdict | None = None  # the stub's verdict for this stream, by the declared rule
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (ms after the stub's first write, frames)
    writes_ms: list[float] = field(default_factory=list)  # the stub's write of each frame, ms after its first
    drift_ms: list[float] = field(default_factory=list)  # each write's actual - scheduled time (pacing drift)
    trace: Trace | None = field(default=None, repr=False)  # kept until joined with the stub's log
    audited: bool = True  # False against a real endpoint: no write log exists, so only a failed probe excludes
    content_encoding: str = "identity"  # the response's Content-Encoding as the probe decoded it
    # How the stream ended (wire/ending.py), also when the probe failed on it (a reset, a body cut short); None
    # when no stream began. A run whose stream was cut is excluded, by its kind, whatever else it measured.
    end: StreamEnd | None = None

    @property
    def cut(self) -> bool:
        return self.end is not None and self.end.cut

    unpaired: str | None = None  # against a started origin: why its direct pair could not be trusted (pairs.py)

    @property
    def included(self) -> bool:
        if self.cut or self.transport_failure:
            return False
        if not self.audited:
            return self.metrics is not None and not self.error and self.unpaired is None
        return self.metrics is not None and self.audit is not None and self.audit.passed

    @property
    def transport_failure(self) -> str:
        """Over WebSocket: the upgrade the path did not carry, or a close that cut the stream ("" otherwise)."""
        ws = self.metrics.ws if self.metrics is not None else None
        return ws.note if ws is not None else ""

    @property
    def upgrade_refused(self) -> bool:
        ws = self.metrics.ws if self.metrics is not None else None
        return ws is not None and not ws.upgraded

    @property
    def host_delay_ms(self) -> float:
        """The most this host delayed the stub's own timers during the run (its worst write's lateness, 0.0 without
        a write log): a measure, in the same run, of how late a waiting process was given the CPU. A proxy in the
        path is one more waiting process, so up to this much of its added first token can be the host's, not the
        proxy's (rows.py judges each run net of it)."""
        return max(0.0, *self.drift_ms) if self.drift_ms else 0.0

    @property
    def frames_per_read_net(self) -> float | None:
        """Frames per read, an arrival's frames counted as read apart when the stub wrote them all within the host's
        delay in this run (host_delay_ms) of each other: one late wake-up of a process on the path joins those
        without any proxy holding them. A hold joins frames written further apart than the host ever delayed a
        timer, and is counted as measured. As measured when the arrivals cannot be matched to the writes."""
        fpr = self.metrics.frames_per_read if self.metrics is not None else None
        delay = self.host_delay_ms
        if fpr is None or delay <= 0.0 or not self.arrivals:
            return fpr
        frames = reads = 0
        for _, count in self.arrivals:
            if frames + count > len(self.writes_ms):
                return fpr
            joined_by_a_late_wake = self.writes_ms[frames + count - 1] - self.writes_ms[frames] <= delay
            reads += count if joined_by_a_late_wake else 1
            frames += count
        return frames / reads

    @property
    def exclusion_reason(self) -> str | None:
        """Why the run is not in the row's figures: its first word (before the colon) is what rows count it as
        (`probe failed`, `cut_silent`, `cut_error`, `stub audit failed` ...)."""
        if self.error:
            return f"probe failed: {self.error}"
        if self.transport_failure:
            return self.transport_failure  # before the audit: the stub never saw a WebSocket request
        if self.end is not None and self.end.cut:  # a short stream is not a whole one: counted, never averaged
            return f"{self.end.kind.value}: {self.end.describe()}"
        if not self.audited:
            return self.unpaired if self.metrics is not None else "probe failed: no trace"
        if self.audit is None:
            return "no audit for this stream"
        if not self.audit.passed:
            return f"stub audit failed: {self.audit.late_writes} late writes"
        return None

    def to_run(self) -> MatrixRun:
        """The run as the results model holds it (the verdict recorded as the stub's JSON)."""
        return MatrixRun(
            stream_id=self.stream_id,
            included=self.included,
            excluded_because=None if self.included else self.exclusion_reason,
            metrics=self.metrics,
            path_added_ttft_ms=self.path_added_ttft_ms,
            frame_delay_ms=dict(self.frame_delay_ms),
            audit=self.audit.to_json() if self.audit is not None else None,
            arrivals=tuple(self.arrivals),
            writes_ms=tuple(self.writes_ms),
            error=self.error,
            audited=self.audited,
            content_encoding=self.content_encoding,
            end=self.end,
        )


def join(record: RunRecord, trace: Trace, log: StreamLog | None) -> None:
    """Client arrivals against the stub's writes (tokenpath/audit.py's `added_ns`: frame k = write k)."""
    record.metrics = run_metrics(trace)
    record.content_encoding = trace.content_encoding
    record.end = trace.end
    if log is None or not log.writes:
        return
    first_write = log.writes[0].actual_ns
    record.drift_ms = [ns_to_ms(w.drift_ns) for w in log.writes]
    record.arrivals = [(round(ns_to_ms(r.t_ns - first_write), 3), r.frames) for r in trace.reads if r.frames]
    record.writes_ms = [round(ns_to_ms(w.actual_ns - first_write), 3) for w in log.writes]
    added = [added_ns(log, k, f.t_ns) for k, f in enumerate(trace.frames)]
    delays = sorted(ns_to_ms(d) for d in added if d is not None)
    if delays:
        record.frame_delay_ms = {"p50": percentile(delays, 50), "max": delays[-1]}
    i = trace.first_content
    if i is not None:
        after = sorted(ns_to_ms(d) for d in added[i + 1 :] if d is not None)
        if after:
            record.frame_delay_ms["after_first_p50"] = percentile(after, 50)
            record.frame_delay_ms["after_first_p99"] = percentile(after, 99)
    first = added[i] if i is not None and i < len(added) else None
    if first is not None:
        record.path_added_ttft_ms = ns_to_ms(first)
