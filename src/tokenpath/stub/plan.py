"""What one stream writes when, once the options of what real servers send around the first token are applied
(issue 24 §4): keep-alive comments merged into the schedule, the head held until the first token, and a silence
mid-stream. Sans-IO: lists in, lists out; the app writes them (PacedStream) and the audit records them.

Why heartbeats are planned, not timed: every write is one audited frame (frame k on the client = write k in the
audit, the join added TTFT is made by), so a keep-alive must have its own place and deadline in the stream, fixed
before the first write like every other frame's. Their grid is the response start + k x heartbeat_ms, as a server's
keep-alive timer runs (sse-starlette pings on a fixed period whether or not data went out), and stops before the
last frame. A keep-alive due at the same moment as a frame goes after it, so it never delays a token.

With the head held (`head_at` "first-token", as some gateways do), everything due before the first token (the lead
frames) is due with it, in the same write as the head; keep-alives start after it (a server that has not sent its
head has nothing to keep alive).

A pause (`pause_ms` after content token `pause_after`) moves every later frame by as much: it is part of the
schedule, so the audit holds each write to its paused deadline, and the keep-alive grid, which runs on the clock,
goes on through it. A pause after the stream's last token falls before its final events.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenpath.clock import NS_PER_MS
from tokenpath.stub.frames import StreamShape
from tokenpath.stub.loopshare import Steps, finish, in_one_go

STEP_WRITES = 2048  # writes planned between two steps of plan_steps: ~0.5 us each, ~1 ms


@dataclass(frozen=True, slots=True)
class WritePlan:
    """Every write of one stream: its bytes on the wire, its SSE size, its offset from the response start."""

    wire: list[bytes]
    sizes: list[int]
    offsets: list[int]
    first_content: int  # the write that carries the first content (what added TTFT subtracts)
    reasoning: tuple[int, ...] = ()  # the reasoning deltas' writes
    heartbeats: tuple[int, ...] = ()  # the keep-alive comments' writes
    head_offset_ns: int = 0  # when the head leaves (0: at once); the frames due by then leave with it


def plan_steps(
    shape: StreamShape,
    wire: list[bytes],
    offsets: list[int],
    *,
    heartbeat: tuple[bytes, int] | None = None,
    heartbeat_ms: float | None = None,
    head_at_first_token: bool = False,
    pause_ms: float = 0.0,
    pause_after: int = 1,
) -> Steps[WritePlan]:
    """`shape`'s frames (`wire`, due at `offsets`) with keep-alives every `heartbeat_ms` (`heartbeat`: the comment
    as framed on the wire, and its SSE bytes), with `head_at_first_token` the head held for the first token, and
    `pause_ms` of silence after content token `pause_after`. Yields every STEP_WRITES frames (stub/loopshare.py)."""
    offsets = yield from paused_steps(offsets, shape.first_content + pause_after, pause_ms)
    head_ns = 0
    if head_at_first_token:
        head_ns = offsets[shape.first_token]
        for j in range(shape.first_token):
            offsets[j] = head_ns  # held, so due with the first token
    reasoning = tuple(shape.reasoning)
    if heartbeat is None or not heartbeat_ms:
        return WritePlan(wire, shape.sizes, offsets, shape.first_content, reasoning, (), head_ns)
    beat_wire, beat_bytes = heartbeat
    period = round(heartbeat_ms * NS_PER_MS)
    end = offsets[-1]
    beat = head_ns + period if head_at_first_token else period
    out_wire: list[bytes] = []
    out_sizes: list[int] = []
    out_offsets: list[int] = []
    beats: list[int] = []
    where: list[int] = []  # where each shape frame went
    for j, at in enumerate(offsets):
        while beat < at and beat < end:
            beats.append(len(out_wire))
            out_wire.append(beat_wire)
            out_sizes.append(beat_bytes)
            out_offsets.append(beat)
            beat += period
        where.append(len(out_wire))
        out_wire.append(wire[j])
        out_sizes.append(shape.sizes[j])
        out_offsets.append(at)
        if j % STEP_WRITES == STEP_WRITES - 1:
            yield
    return WritePlan(
        out_wire,
        out_sizes,
        out_offsets,
        where[shape.first_content],
        tuple(where[j] for j in reasoning),
        tuple(beats),
        head_ns,
    )


plan_writes = in_one_go(plan_steps)


def paused(offsets: list[int], cut: int, pause_ms: float) -> list[int]:
    """`offsets` with every frame from index `cut` on (at most the last frame) `pause_ms` later."""
    return finish(paused_steps(offsets, cut, pause_ms))


def paused_steps(offsets: list[int], cut: int, pause_ms: float) -> Steps[list[int]]:
    """`paused`, STEP_WRITES x 8 offsets at a time (a copy is ~0.1 us an offset)."""
    pause_ns = round(pause_ms * NS_PER_MS)
    step = STEP_WRITES * 8
    out: list[int] = []
    if not pause_ns or not offsets:
        for i in range(0, len(offsets), step):
            out += offsets[i : i + step]
            yield
        return out
    cut = min(cut, len(offsets) - 1)
    for i in range(0, len(offsets), step):
        out += [at + pause_ns if j >= cut else at for j, at in enumerate(offsets[i : i + step], i)]
        yield
    return out
