"""The stub's own side of the audit: every write recorded as it happens, and the logs this process keeps.

What is answered, and how a log is judged, is the audit protocol (tokenpath/audit.py), which the clients share.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

from tokenpath.audit import State, StreamLog, Write, completion_id
from tokenpath.stub.config import AUDIT_MAX_BYTES, AUDIT_MAX_STREAMS

# What one log holds, measured with tracemalloc (CPython 3.11): three int64 columns per write and the arrays'
# over-allocation, each index of a reasoning delta or keep-alive a tuple slot and an int, and the recorder itself
# with its ids and the store's two dict entries. Rounded up: the bound is on memory, so an estimate errs high.
LOG_BYTES = 768
BYTES_PER_WRITE = 26
BYTES_PER_INDEX = 40


@dataclass(slots=True)
class StreamRecorder:
    """The stub's own record of one response while it runs: appended once per frame, so columns of machine ints."""

    stream_id: str
    interval_ms: float
    started_ns: int
    scheduled_ns: array[int] = field(default_factory=lambda: array("q"))
    actual_ns: array[int] = field(default_factory=lambda: array("q"))
    nbytes: array[int] = field(default_factory=lambda: array("q"))
    state: State = "running"
    first_content: int | None = None  # index of the write that carries the first content frame
    reasoning: tuple[int, ...] = ()  # indices of the writes that carry reasoning deltas
    heartbeats: tuple[int, ...] = ()  # indices of the keep-alive writes
    charged: int = 0  # the bytes the store counts for this log while it keeps it (AuditStore._charge)

    def record(self, scheduled_ns: int, actual_ns: int, nbytes: int) -> None:
        self.scheduled_ns.append(scheduled_ns)
        self.actual_ns.append(actual_ns)
        self.nbytes.append(nbytes)

    def snapshot(self, offset_ns: int = 0) -> StreamLog:
        """The log as answered; `offset_ns` shifts every time (the stub's test-only clock offset), drifts unchanged."""
        writes = tuple(
            Write(i, s + offset_ns, a + offset_ns, b)
            for i, (s, a, b) in enumerate(zip(self.scheduled_ns, self.actual_ns, self.nbytes, strict=True))
        )
        started = self.started_ns + offset_ns
        return StreamLog(
            self.stream_id,
            self.interval_ms,
            started,
            self.state,
            writes,
            self.first_content,
            self.reasoning,
            self.heartbeats,
        )


class AuditStore:
    """This process's logs, the newest kept within `max_streams` and `max_bytes` (workers ask each other: see
    stub/siblings.py). Bytes are counted when a log opens (from the writes it is planned to make) and again when it
    closes (from those it made), never per write: `record` is the instrument's hot path. The oldest log goes first,
    running or not: a running log dropped stays its stream's to write to (its memory goes with the stream) and is
    answered as dropped as too old, as a finished one is.

    A log is found by its stream id or by the completion id in its chunks: gateways that drop both the stream
    header and the body's `user` field (LiteLLM) still pass the chunks' `id` through."""

    def __init__(self, max_streams: int = AUDIT_MAX_STREAMS, max_bytes: int = AUDIT_MAX_BYTES) -> None:
        self._logs: OrderedDict[str, StreamRecorder] = OrderedDict()
        self._by_completion: dict[str, str] = {}
        self._max = max_streams
        self._max_bytes = max_bytes
        self.nbytes = 0  # what the kept logs hold, as estimated by log_bytes

    def open(
        self,
        stream_id: str,
        interval_ms: float,
        started_ns: int,
        first_content: int | None = None,
        reasoning: tuple[int, ...] = (),
        heartbeats: tuple[int, ...] = (),
        writes: int = 0,
    ) -> StreamRecorder:
        """A new log; `writes`: how many the stream is planned to make, counted now so that long streams still
        running cannot hold more than the bound between them."""
        log = StreamRecorder(
            stream_id, interval_ms, started_ns, first_content=first_content, reasoning=reasoning, heartbeats=heartbeats
        )
        old = self._logs.pop(stream_id, None)  # a reused id keeps only its newest stream
        if old is not None:
            self.nbytes -= old.charged
        self._logs[stream_id] = log
        self._by_completion[completion_id(stream_id)] = stream_id
        self._charge(log, writes)
        return log

    def close(self, log: StreamRecorder, state: State) -> None:
        log.state = state
        if self._logs.get(log.stream_id) is log:  # a log already dropped is no longer counted
            self._charge(log, len(log.nbytes))

    def get(self, stream_id: str) -> StreamRecorder | None:
        return self._logs.get(self._by_completion.get(stream_id, stream_id))

    def all(self) -> list[StreamRecorder]:
        return list(self._logs.values())

    def _charge(self, log: StreamRecorder, writes: int) -> None:
        """Count `log` (kept) as holding `writes` writes, then drop the oldest logs until both bounds hold (the
        newest log is kept even if it alone is over the byte bound: its stream is running, and bounded itself)."""
        charged = log_bytes(writes, len(log.reasoning) + len(log.heartbeats))
        self.nbytes += charged - log.charged
        log.charged = charged
        while len(self._logs) > self._max or (self.nbytes > self._max_bytes and len(self._logs) > 1):
            _, dropped = self._logs.popitem(last=False)
            self._by_completion.pop(completion_id(dropped.stream_id), None)
            self.nbytes -= dropped.charged


def log_bytes(writes: int, indices: int) -> int:
    """What a log of `writes` writes and `indices` marked writes (reasoning deltas, keep-alives) holds in memory."""
    return LOG_BYTES + BYTES_PER_WRITE * writes + BYTES_PER_INDEX * indices
