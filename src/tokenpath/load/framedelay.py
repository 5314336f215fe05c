"""The added delay of every frame after the first content frame (issue 24 §6, "after the first token"): its arrival
at the client minus the stub's write of it. A path that delivers the first token on time and then bunches the rest
shows here, not in added TTFT.

No frame is parsed for it: the client keeps one mark per read (when it returned, and how many decoded body bytes had
arrived by then), and the stub's write log says how many bytes each write carried. On a path that passes the bytes
through (the body's length is the sum of the writes'), frame k ends at the sum of the first k + 1 writes' bytes and
arrived with the first read whose mark reaches that offset. A path that changed the bytes (re-serialised, dropped
or added frames) has no such mapping and gives no per-frame figure (None).
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenpath.audit import StreamLog


def frame_delays_ns(log: StreamLog, first_content: int, marks: Sequence[int]) -> list[int] | None:
    """Arrival minus write, in ns, for each write after `first_content` (the first content frame's write) but the
    keep-alives (the log's `heartbeats`: a comment, not a frame anyone reads; their bytes still count to the offsets).
    `marks` is flat (t_ns, cumulative bytes) pairs in read order. None when the body is not the writes' bytes."""
    writes = log.writes
    beats = frozenset(log.heartbeats)
    if not marks or sum(w.nbytes for w in writes) != marks[-1]:
        return None
    delays = []
    end = sum(w.nbytes for w in writes[: first_content + 1])
    m = 0  # index of the mark (pair) being compared: both walks only move forward
    for k, write in enumerate(writes[first_content + 1 :], first_content + 1):
        end += write.nbytes
        while marks[2 * m + 1] < end:
            m += 1
        if k not in beats:
            delays.append(marks[2 * m] - write.actual_ns)
    return delays
