"""The stub's record of every write, and the rule that says whether a stream was paced as scheduled.

A run is only worth reporting if the emitter kept its schedule; the audit decides that from the stub's own
timestamps, independently of whatever proxy sits in the path. Tolerance = max(2 ms, 20 % of the interval):
a flat budget is meaningless at short intervals and a flat percentage is below scheduler granularity there.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from tokenpath.clock import NS_PER_MS
from tokenpath.stats import percentile
from tokenpath.stub.config import AUDIT_MAX_STREAMS
from tokenpath.stub.frames import completion_id

State = Literal["running", "complete", "client_gone"]


def tolerance_ns(interval_ms: float) -> int:
    return max(2 * NS_PER_MS, round(0.2 * interval_ms * NS_PER_MS))


@dataclass(slots=True)
class StreamLog:
    """Every write of one response: when it was due, when it was handed to the kernel, how many bytes."""

    stream_id: str
    interval_ms: float
    started_ns: int
    scheduled_ns: array[int] = field(default_factory=lambda: array("q"))
    actual_ns: array[int] = field(default_factory=lambda: array("q"))
    nbytes: array[int] = field(default_factory=lambda: array("q"))
    state: State = "running"

    def record(self, scheduled_ns: int, actual_ns: int, nbytes: int) -> None:
        self.scheduled_ns.append(scheduled_ns)
        self.actual_ns.append(actual_ns)
        self.nbytes.append(nbytes)

    def to_json(self, offset_ns: int = 0) -> dict[str, Any]:
        """`offset_ns` shifts every time (the stub's test-only clock offset); drifts are unchanged by it."""
        return {
            "stream_id": self.stream_id,
            "interval_ms": self.interval_ms,
            "started_ns": self.started_ns + offset_ns,
            "state": self.state,
            "writes": [
                [i, s + offset_ns, a + offset_ns, b]
                for i, (s, a, b) in enumerate(zip(self.scheduled_ns, self.actual_ns, self.nbytes, strict=True))
            ],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StreamLog:
        log = cls(obj["stream_id"], float(obj["interval_ms"]), int(obj["started_ns"]), state=obj["state"])
        for _, s, a, b in obj["writes"]:
            log.record(s, a, b)
        return log


@dataclass(frozen=True, slots=True)
class AuditVerdict:
    stream_id: str
    state: State
    writes: int
    tolerance_ms: float
    drift_p50_ms: float
    drift_p99_ms: float
    drift_max_ms: float
    late_writes: int  # writes whose drift exceeded the tolerance
    passed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "state": self.state,
            "writes": self.writes,
            "tolerance_ms": self.tolerance_ms,
            "drift_ms": {"p50": self.drift_p50_ms, "p99": self.drift_p99_ms, "max": self.drift_max_ms},
            "late_writes": self.late_writes,
            "passed": self.passed,
        }


def audit_stream(log: StreamLog, tolerance: int | None = None) -> AuditVerdict:
    """Pacing drift = actual - scheduled for each write; the stream passes if no write drifted past tolerance.

    A stream with no writes passes vacuously only if it is still running; a finished stream must have written.
    """
    tol = tolerance_ns(log.interval_ms) if tolerance is None else tolerance
    drifts = sorted(a - s for s, a in zip(log.scheduled_ns, log.actual_ns, strict=True))
    late = sum(1 for d in drifts if d > tol)
    early = sum(1 for d in drifts if d < 0)  # the pacer never writes early; if it did, the schedule is broken

    def pct(p: float) -> float:
        return percentile(drifts, p) / NS_PER_MS if drifts else 0.0

    return AuditVerdict(
        stream_id=log.stream_id,
        state=log.state,
        writes=len(drifts),
        tolerance_ms=tol / NS_PER_MS,
        drift_p50_ms=pct(50),
        drift_p99_ms=pct(99),
        drift_max_ms=drifts[-1] / NS_PER_MS if drifts else 0.0,
        late_writes=late,
        passed=late == 0 and early == 0 and (bool(drifts) or log.state == "running"),
    )


class AuditStore:
    """This process's logs, the newest `max_streams` kept (workers ask each other: see stub/siblings.py).

    A log is found by its stream id or by the completion id in its chunks: gateways that drop both the stream
    header and the body's `user` field (LiteLLM) still pass the chunks' `id` through."""

    def __init__(self, max_streams: int = AUDIT_MAX_STREAMS) -> None:
        self._logs: OrderedDict[str, StreamLog] = OrderedDict()
        self._by_completion: dict[str, str] = {}
        self._max = max_streams

    def open(self, stream_id: str, interval_ms: float, started_ns: int) -> StreamLog:
        log = StreamLog(stream_id, interval_ms, started_ns)
        self._logs.pop(stream_id, None)  # a reused id keeps only its newest stream
        self._logs[stream_id] = log
        self._by_completion[completion_id(stream_id)] = stream_id
        while len(self._logs) > self._max:
            old, _ = self._logs.popitem(last=False)
            self._by_completion.pop(completion_id(old), None)
        return log

    def close(self, log: StreamLog, state: State) -> None:
        log.state = state

    def get(self, stream_id: str) -> StreamLog | None:
        return self._logs.get(self._by_completion.get(stream_id, stream_id))

    def all(self) -> list[StreamLog]:
        return list(self._logs.values())
