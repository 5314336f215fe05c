"""One long audit log judged and encoded a slice at a time (stub/loopshare.py), so that answering it never holds up
the streams the stub is pacing: a log of 300,000 writes built in one step held the loop ~800 ms.

The answer's bytes are the ones `AuditEntry(audit_stream(log), log.snapshot(offset)).to_json()` encodes to
(tests/stub/test_audit_slices.py holds them equal): the same verdict (tokenpath/audit.py's judge, on the same drifts
sorted), and the writes as Write.to_json makes them and the reasoning and keep-alive indices, encoded in pieces
joined with commas.
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass
from itertools import islice
from operator import sub
from typing import Protocol

from tokenpath.audit import AuditEntry, AuditVerdict, StreamLog, Write, audit_stream, judge
from tokenpath.serve.http import compact_json
from tokenpath.stub.audit import StreamRecorder


class Turns(Protocol):
    """What a long job awaits between items: stub/loopshare.py's LoopShare, or one that also shows an asking
    sibling progress (stub/siblings.py Working)."""

    async def turn(self) -> None: ...


# A log with more writes than this is answered in slices of this many: ~1 ms each at ~2 µs a write, and fewer rows
# alive at once than the collector's first threshold (700), so they are not promoted and set off no full pass
# (1,024 did: two passes of ~12 ms an answer). A shorter log is built in one step, as every log was before.
SLICE_WRITES = 512
# A log's reasoning and keep-alive indices (up to 100,000 each: one step held the loop ~13 ms) are encoded in slices
# of this many: ~0.4 ms each, as a slice of writes is.
SLICE_INDICES = 8192
_WRITES_MARKER = b'"writes":[]'  # where an entry made with no writes takes them: no JSON string can hold it


@dataclass(frozen=True, slots=True)
class Encoded:
    """One stream's audit entry, encoded as soon as it is made: an answer of every log holding each log's Write
    objects until the end would give the cyclic collector millions of objects to walk (0.7 s in one pass, measured
    at 20,000 logs of 200 writes), on the loop."""

    verdict: AuditVerdict
    parts: tuple[bytes, ...]  # the AuditEntry's JSON, as Response.send_json encodes it: one piece unless a long log's

    @classmethod
    def of(cls, entry: AuditEntry) -> Encoded:
        return cls(entry.verdict, (compact_json(entry.to_json()),))

    @classmethod
    async def of_log(cls, log: StreamRecorder, with_log: bool, offset_ns: int, share: Turns) -> Encoded:
        """One of this worker's logs; a long one judged and encoded in slices."""
        if _short(log, with_log):
            return cls.of(AuditEntry(audit_stream(log), log.snapshot(offset_ns) if with_log else None))
        return cls(*await encoded_entry(log, with_log, offset_ns, share))

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.parts))


def _short(log: StreamRecorder, with_log: bool) -> bool:
    """Built in one step: few writes, and few indices if they are answered (a running log holds all its planned
    indices from its start, its writes only as they are made)."""
    indices = len(log.reasoning) + len(log.heartbeats) if with_log else 0
    return len(log.nbytes) <= SLICE_WRITES and indices <= SLICE_INDICES


async def encoded_entry(
    log: StreamRecorder, with_log: bool, offset_ns: int, share: Turns
) -> tuple[AuditVerdict, tuple[bytes, ...]]:
    """The log's verdict and its entry's compact JSON in pieces (never joined: a copy of 12 MB holds the loop ~10 ms,
    its pages faulted in), as it stood when called: a running log's later writes and its end are its next answer's."""
    n, state = len(log.nbytes), log.state
    scheduled, actual = log.scheduled_ns, log.actual_ns  # append-only: the first n never change
    verdict = judge(log.stream_id, log.interval_ms, state, await _sorted_drifts(scheduled, actual, n, share))
    # No writes and no indices: they are encoded in slices, after the log's other members.
    head = StreamLog(log.stream_id, log.interval_ms, log.started_ns + offset_ns, state, (), log.first_content)
    text = compact_json(AuditEntry(verdict, head if with_log else None).to_json())
    if not with_log:
        return verdict, (text,)
    before, marker, after = text.partition(_WRITES_MARKER)
    assert marker, "an entry with a log has a writes array"
    pieces = [before + b'"writes":[']
    for i in range(0, n, SLICE_WRITES):
        j = min(i + SLICE_WRITES, n)
        rows = zip(range(i, j), scheduled[i:j], actual[i:j], log.nbytes[i:j], strict=True)
        piece = compact_json([Write(k, s + offset_ns, a + offset_ns, b).to_json() for k, s, a, b in rows])[1:-1]
        pieces.append(b"," + piece if i else piece)
        await share.turn()
    pieces[-1] += b"]"
    # StreamLog.to_json's last members, after the writes and only when there are any
    for name, indices in (("reasoning", log.reasoning), ("heartbeats", log.heartbeats)):
        if indices:
            pieces[-1] += b"," + compact_json(name) + b":["
            pieces += await _index_pieces(indices, share)
            pieces[-1] += b"]"
    pieces[-1] += after
    return verdict, tuple(pieces)


async def _index_pieces(indices: tuple[int, ...], share: Turns) -> list[bytes]:
    """The indices as a JSON array's inside (no brackets), a slice of SLICE_INDICES at a time."""
    pieces = []
    for i in range(0, len(indices), SLICE_INDICES):
        piece = compact_json(list(indices[i : i + SLICE_INDICES]))[1:-1]
        pieces.append(b"," + piece if i else piece)
        await share.turn()
    return pieces


async def _sorted_drifts(scheduled: array[int], actual: array[int], n: int, share: Turns) -> array[int]:
    """Every write's drift, sorted: runs of SLICE_WRITES sorted one at a time, then merged a slice at a time (one
    sort of 300,000 drifts holds the loop ~40 ms). Held as machine ints: a list of 300,000 int objects takes
    ~10 ms to free, in one step."""
    runs: list[array[int]] = []
    for i in range(0, n, SLICE_WRITES):
        j = min(i + SLICE_WRITES, n)
        runs.append(array("q", sorted(map(sub, actual[i:j], scheduled[i:j]))))
        await share.turn()
    merged = heapq.merge(*runs)
    out = array("q")
    while len(out) < n:
        out.extend(islice(merged, SLICE_WRITES))
        await share.turn()
    return out
