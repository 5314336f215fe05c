"""One probe run and what it yields, joined with the stub's write log: the unit every row is built from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenpath.clock import ns_to_ms
from tokenpath.probe.metrics import RunMetrics, run_metrics
from tokenpath.probe.trace import Trace
from tokenpath.stats import percentile


@dataclass(slots=True)
class RunRecord:
    path: str  # PathSpec label
    stream_id: str
    metrics: RunMetrics | None = None
    error: str | None = None
    path_added_ttft_ms: float | None = None  # first content arrival - the stub's write of that frame
    frame_delay_ms: dict[str, float] = field(default_factory=dict)  # the same for every frame: p50, max
    audit: dict[str, Any] | None = None  # the stub's verdict for this stream
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (ms after the stub's first write, frames)
    writes_ms: list[float] = field(default_factory=list)  # the stub's write of each frame, ms after its first
    drift_ms: list[float] = field(default_factory=list)  # each write's actual - scheduled time (pacing drift)
    trace: Trace | None = field(default=None, repr=False)  # kept until joined with the stub's log
    audited: bool = True  # False against a real endpoint: no write log exists, so only a failed probe excludes

    @property
    def included(self) -> bool:
        if not self.audited:
            return self.metrics is not None and not self.error
        return self.metrics is not None and self.audit is not None and bool(self.audit.get("passed"))

    @property
    def exclusion_reason(self) -> str | None:
        if self.error:
            return f"probe failed: {self.error}"
        if not self.audited:
            return None if self.metrics is not None else "probe failed: no trace"
        if self.audit is None:
            return "no audit for this stream"
        if not self.audit.get("passed"):
            return f"stub audit failed: {self.audit.get('late_writes')} late writes"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "included": self.included,
            "excluded_because": None if self.included else self.exclusion_reason,
            "metrics": self.metrics.to_json() if self.metrics else None,
            "path_added_ttft_ms": self.path_added_ttft_ms,
            "frame_delay_ms": self.frame_delay_ms,
            "audit": self.audit,
            "arrivals": self.arrivals,
            "writes_ms": self.writes_ms,
            "error": self.error,
            "audited": self.audited,
        }


def join(record: RunRecord, trace: Trace, log: dict[str, Any] | None) -> None:
    """Client arrivals against the stub's writes. A byte-passing proxy keeps frame k = write k."""
    record.metrics = run_metrics(trace)
    if not log or not log.get("writes"):
        return
    writes = log["writes"]  # [seq, scheduled_ns, actual_ns, bytes]
    first_write = writes[0][2]
    record.drift_ms = [ns_to_ms(w[2] - w[1]) for w in writes]
    record.arrivals = [(round(ns_to_ms(r.t_ns - first_write), 3), r.frames) for r in trace.reads if r.frames]
    record.writes_ms = [round(ns_to_ms(w[2] - first_write), 3) for w in writes]
    n = min(len(writes), len(trace.frames))
    delays = sorted(ns_to_ms(trace.frames[k].t_ns - writes[k][2]) for k in range(n))
    if delays:
        record.frame_delay_ms = {"p50": percentile(delays, 50), "max": delays[-1]}
    i = trace.first_content
    if i is not None and i < len(writes):
        record.path_added_ttft_ms = ns_to_ms(trace.frames[i].t_ns - writes[i][2])
