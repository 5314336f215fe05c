"""The audit protocol: what the stub answers about its writes, and the rules every reader of it shares.

A run is only worth reporting if the emitter kept its schedule; the audit decides that from the stub's own
timestamps, independently of whatever proxy sits in the path. Tolerance = max(2 ms, 20 % of the interval):
a flat budget is meaningless at short intervals and a flat percentage is below scheduler granularity there.

The stub (stub/audit.py records, stub/app.py answers) and its clients (the probe's write join, the matrix, load,
the cluster) import this module; none of them imports the other's side. A stream is known by its id and by its
label, the fixed-length hash the stub writes into every id of the stream (OpenAI's completion id), so a path that
drops the stream id still names the stream.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tokenpath.clock import NS_PER_MS
from tokenpath.stats import percentile

State = Literal["running", "complete", "client_gone"]

LABEL_CHARS = 24  # hex digits of a stream's label: the tail of every id the stub writes for it


def stream_label(stream_id: str) -> str:
    """Fixed length, so a frame's natural size does not depend on the stream id."""
    return hashlib.blake2b(stream_id.encode(), digest_size=LABEL_CHARS // 2).hexdigest()


def completion_id(stream_id: str) -> str:
    """The id in an OpenAI stream's chunks; the audit finds a stream by it too."""
    return "cmpl-" + stream_label(stream_id)


def tolerance_ns(interval_ms: float) -> int:
    return max(2 * NS_PER_MS, round(0.2 * interval_ms * NS_PER_MS))


@dataclass(frozen=True, slots=True)
class Write:
    """One write of a stream: its place, when it was due, when it was handed to the kernel, how many bytes.

    On the wire a write is the array `[seq, scheduled_ns, actual_ns, bytes]` (the shape every stub has sent)."""

    seq: int
    scheduled_ns: int
    actual_ns: int
    nbytes: int

    @property
    def drift_ns(self) -> int:
        return self.actual_ns - self.scheduled_ns

    def to_json(self) -> list[int]:
        return [self.seq, self.scheduled_ns, self.actual_ns, self.nbytes]

    @classmethod
    def from_json(cls, obj: Sequence[int]) -> Write:
        seq, scheduled, actual, nbytes = obj
        return cls(int(seq), int(scheduled), int(actual), int(nbytes))


@dataclass(frozen=True, slots=True)
class StreamLog:
    """Every write of one response, as the stub's audit answers it (the stub records into stub/audit.py's
    StreamRecorder)."""

    stream_id: str
    interval_ms: float
    started_ns: int
    state: State = "running"
    writes: tuple[Write, ...] = ()
    first_content: int | None = None  # the write that carried the first content frame (None: an older stub's log)
    reasoning: tuple[int, ...] = ()  # the writes that carried reasoning deltas (--reasoning-tokens)
    heartbeats: tuple[int, ...] = ()  # the writes that carried keep-alive comments (--heartbeat-ms)

    @property
    def first_content_write(self) -> Write | None:
        """When the first content frame was written: what added TTFT subtracts (None until it has been)."""
        k = self.first_content
        return self.writes[k] if k is not None and k < len(self.writes) else None

    @property
    def first_token(self) -> int | None:
        """The write of the first reasoning or content frame: what a first-token figure joins with."""
        return self.reasoning[0] if self.reasoning else self.first_content

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "stream_id": self.stream_id,
            "interval_ms": self.interval_ms,
            "started_ns": self.started_ns,
            "state": self.state,
            "first_content": self.first_content,
            "writes": [w.to_json() for w in self.writes],
        }
        # Only when there are any: a log without them reads as every stub's always has.
        if self.reasoning:
            out["reasoning"] = list(self.reasoning)
        if self.heartbeats:
            out["heartbeats"] = list(self.heartbeats)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> StreamLog:
        writes = tuple(Write.from_json(w) for w in obj["writes"])
        first = obj.get("first_content")
        return cls(
            obj["stream_id"],
            float(obj["interval_ms"]),
            int(obj["started_ns"]),
            obj["state"],
            writes,
            None if first is None else int(first),
            tuple(int(i) for i in obj.get("reasoning") or ()),
            tuple(int(i) for i in obj.get("heartbeats") or ()),
        )


def added_ns(log: StreamLog, frame: int, arrival_ns: int) -> int | None:
    """The join: a frame's arrival at the client - the stub's write of that frame (a byte-passing path keeps frame k
    = write k), on the stub's clock. Added TTFT is this for the first content frame, the added frame delay for every
    frame; None when the stub made no such write. Callers choose the unit (the matrix ms, load's histograms us)."""
    if 0 <= frame < len(log.writes):
        return arrival_ns - log.writes[frame].actual_ns
    return None


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

    @property
    def settled(self) -> bool:
        """The stream has ended (complete, or its client gone): a later answer says the same."""
        return self.state != "running"

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

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AuditVerdict:
        drift = obj["drift_ms"]
        return cls(
            stream_id=obj["stream_id"],
            state=obj["state"],
            writes=int(obj["writes"]),
            tolerance_ms=float(obj["tolerance_ms"]),
            drift_p50_ms=float(drift["p50"]),
            drift_p99_ms=float(drift["p99"]),
            drift_max_ms=float(drift["max"]),
            late_writes=int(obj["late_writes"]),
            passed=bool(obj["passed"]),
        )


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One stream in an audit answer: the stub's verdict, and its write log when asked for (`log=1`)."""

    verdict: AuditVerdict
    log: StreamLog | None = None

    @property
    def stream_id(self) -> str:
        return self.verdict.stream_id

    @property
    def settled(self) -> bool:
        return self.verdict.settled

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verdict": self.verdict.to_json()}
        if self.log is not None:
            out["log"] = self.log.to_json()
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AuditEntry:
        log = obj.get("log")
        return cls(AuditVerdict.from_json(obj["verdict"]), StreamLog.from_json(log) if log is not None else None)


@dataclass(frozen=True, slots=True)
class AuditReply:
    """The stub's bulk audit answer: {"streams": [entries], "missing": [ids], "summary": {streams, passed, failed}},
    and "unanswered" (reply_json) when a worker of a multi-worker stub did not answer (an all-logs lookup, or one of
    ids some of which are missing).

    Entries are found by the id asked for: a stream id, or the completion id in its chunks (stub/audit.py's
    AuditStore)."""

    streams: tuple[AuditEntry, ...] = ()
    missing: tuple[str, ...] = ()
    unanswered: tuple[str, ...] = ()

    def by_id(self) -> dict[str, AuditEntry]:
        """Every entry under its stream id and its completion id: what a join over many streams looks up."""
        return {k: e for e in self.streams for k in (e.stream_id, completion_id(e.stream_id))}

    @property
    def failed(self) -> int:
        return sum(1 for e in self.streams if not e.verdict.passed)

    def to_json(self) -> dict[str, Any]:
        summary = reply_summary(e.verdict for e in self.streams)
        return reply_json([e.to_json() for e in self.streams], self.missing, summary, self.unanswered)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AuditReply:
        streams = tuple(AuditEntry.from_json(e) for e in obj["streams"])
        return cls(streams, tuple(obj.get("missing") or ()), tuple(obj.get("unanswered") or ()))


def reply_summary(verdicts: Iterable[AuditVerdict]) -> dict[str, int]:
    """The bulk answer's `summary` of its entries' verdicts."""
    n = failed = 0
    for verdict in verdicts:
        n += 1
        failed += not verdict.passed
    return {"streams": n, "passed": n - failed, "failed": failed}


def reply_json(
    streams: list[Any], missing: Sequence[str], summary: dict[str, int], unanswered: Sequence[str] = ()
) -> dict[str, Any]:
    """The bulk answer's members in their order: AuditReply.to_json's, and the stub's, which writes its entries in
    pieces around the rest (stub/app.py). `unanswered`: the workers of a multi-worker stub that did not answer an
    all-logs lookup (their streams may be absent: no id was asked, so `missing` cannot name them), or a lookup of
    ids some of which are `missing` (those may be theirs, not unknown); the member only when there are any, so an
    answer without them reads as every stub's always has."""
    out: dict[str, Any] = {"streams": streams, "missing": list(missing), "summary": summary}
    if unanswered:
        out["unanswered"] = list(unanswered)
    return out


class WriteColumns(Protocol):
    """A log kept as columns of times (the stub's own StreamRecorder): judged without making a Write per row."""

    @property
    def stream_id(self) -> str: ...
    @property
    def interval_ms(self) -> float: ...
    @property
    def state(self) -> State: ...
    @property
    def scheduled_ns(self) -> Sequence[int]: ...
    @property
    def actual_ns(self) -> Sequence[int]: ...


def audit_stream(log: StreamLog | WriteColumns, tolerance: int | None = None) -> AuditVerdict:
    """Pacing drift = actual - scheduled for each write; the stream passes if no write drifted past tolerance.

    A stream with no writes passes vacuously only if it is still running; a finished stream must have written.
    """
    if isinstance(log, StreamLog):
        drifts = sorted(w.drift_ns for w in log.writes)
    else:  # the stub's own recorder: no Write objects made to judge it
        drifts = sorted(a - s for s, a in zip(log.scheduled_ns, log.actual_ns, strict=True))
    return judge(log.stream_id, log.interval_ms, log.state, drifts, tolerance)


def judge(
    stream_id: str, interval_ms: float, state: State, drifts: Sequence[int], tolerance: int | None = None
) -> AuditVerdict:
    """audit_stream's verdict on a stream's drifts, sorted (the stub sorts a long log's a slice at a time,
    stub/auditslices.py). Counted by bisection: a verdict on 300,000 writes is not another pass over them."""
    tol = tolerance_ns(interval_ms) if tolerance is None else tolerance
    late = len(drifts) - bisect_right(drifts, tol)
    early = bisect_left(drifts, 0)  # the pacer never writes early; if it did, the schedule is broken

    def pct(p: float) -> float:
        return percentile(drifts, p) / NS_PER_MS if drifts else 0.0

    return AuditVerdict(
        stream_id=stream_id,
        state=state,
        writes=len(drifts),
        tolerance_ms=tol / NS_PER_MS,
        drift_p50_ms=pct(50),
        drift_p99_ms=pct(99),
        drift_max_ms=drifts[-1] / NS_PER_MS if drifts else 0.0,
        late_writes=late,
        passed=late == 0 and early == 0 and (bool(drifts) or state == "running"),
    )
