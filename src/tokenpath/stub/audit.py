"""The stub's own side of the audit: every write recorded as it happens, and the logs this process keeps.

What is answered, and how a log is judged, is the audit protocol (tokenpath/audit.py), which the clients share.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

from tokenpath.audit import State, StreamLog, Write, completion_id
from tokenpath.stub.config import AUDIT_MAX_STREAMS


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
    """This process's logs, the newest `max_streams` kept (workers ask each other: see stub/siblings.py).

    A log is found by its stream id or by the completion id in its chunks: gateways that drop both the stream
    header and the body's `user` field (LiteLLM) still pass the chunks' `id` through."""

    def __init__(self, max_streams: int = AUDIT_MAX_STREAMS) -> None:
        self._logs: OrderedDict[str, StreamRecorder] = OrderedDict()
        self._by_completion: dict[str, str] = {}
        self._max = max_streams

    def open(
        self,
        stream_id: str,
        interval_ms: float,
        started_ns: int,
        first_content: int | None = None,
        reasoning: tuple[int, ...] = (),
        heartbeats: tuple[int, ...] = (),
    ) -> StreamRecorder:
        log = StreamRecorder(
            stream_id, interval_ms, started_ns, first_content=first_content, reasoning=reasoning, heartbeats=heartbeats
        )
        self._logs.pop(stream_id, None)  # a reused id keeps only its newest stream
        self._logs[stream_id] = log
        self._by_completion[completion_id(stream_id)] = stream_id
        while len(self._logs) > self._max:
            old, _ = self._logs.popitem(last=False)
            self._by_completion.pop(completion_id(old), None)
        return log

    def close(self, log: StreamRecorder, state: State) -> None:
        log.state = state

    def get(self, stream_id: str) -> StreamRecorder | None:
        return self._logs.get(self._by_completion.get(stream_id, stream_id))

    def all(self) -> list[StreamRecorder]:
        return list(self._logs.values())
