"""Every audit log at once is answered in slices: the loop the stub paces streams on is never held for the whole
answer, and the answer's bytes are the ones AuditReply has always made."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from tests.helpers import BackgroundLoop, post
from tokenpath.audit import AuditEntry, AuditReply, audit_stream
from tokenpath.stub.audit import AuditStore, StreamRecorder
from tokenpath.stub.auditslices import SLICE_INDICES, SLICE_WRITES, Encoded
from tokenpath.stub.loopshare import SLICE_NS, LoopShare
from tokenpath.stub.server import StubServer

StartStub = Callable[..., StubServer]
T = TypeVar("T")
MS = 1_000_000


def _fill(store: AuditStore, streams: int, writes: int) -> None:
    """Finished logs, one late write in every third, and one still running with reasoning and keep-alives."""
    for k in range(streams):
        log = store.open(f"s{k}", 14.0, 10**12, first_content=1, writes=writes)
        for i in range(writes):
            late = 5 * MS if k % 3 == 0 and i == writes // 2 else 50_000
            log.record(10**12 + i * 14 * MS, 10**12 + i * 14 * MS + late, 120 + i % 7)
        store.close(log, "complete")
    running = store.open("running", 10.0, 10**12, 2, reasoning=(1,), heartbeats=(3,), writes=9)
    for i in range(4):
        running.record(10**12 + i * MS, 10**12 + i * MS + 1, 60)


def _marked(store: AuditStore, stream_id: str, planned: int, writes: int) -> StreamRecorder:
    """A log planned to make `planned` writes, a reasoning delta every third and a keep-alive every third (its
    indices all known from its start), `writes` of them made (fewer: still running)."""
    reasoning, heartbeats = tuple(range(0, planned, 3)), tuple(range(1, planned, 3))
    log = store.open(stream_id, 10.0, 10**12, planned - 1, reasoning, heartbeats, writes=planned)
    for i in range(writes):
        log.record(10**12 + i * 10 * MS, 10**12 + i * 10 * MS + 30_000, 70 + i % 5)
    if writes == planned:
        store.close(log, "complete")
    return log


def _get(port: int, raw: bytes, timeout: float = 60.0) -> tuple[bytes, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        data = bytearray()
        while chunk := sock.recv(1 << 20):
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    return head, body


def _one(target: str) -> bytes:
    return f"GET /_tokenpath/audit/{target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()


def _expected(store: AuditStore, ids: list[str] | None, offset_ns: int = 0) -> bytes:
    logs = store.all() if ids is None else [log for i in ids if (log := store.get(i))]
    entries = tuple(AuditEntry(audit_stream(log), log.snapshot(offset_ns)) for log in logs)
    missing = () if ids is None else tuple(i for i in ids if store.get(i) is None)
    return json.dumps(AuditReply(entries, missing).to_json(), separators=(",", ":")).encode()


def test_the_answer_s_bytes_are_audit_reply_s(bg: BackgroundLoop, start_stub: StartStub) -> None:
    stub = start_stub(clock_offset_ms=2.5)
    bg.call(_fill, stub.audit, 40, 30)
    head, body = _get(stub.port, b"GET /_tokenpath/audit HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert body == _expected(stub.audit, None, 2_500_000)
    assert f"\r\ncontent-length: {len(body)}\r\n".encode() in head.lower()
    ids = ["s3", "nope", "running", "s39"]
    head, body = _get(stub.port, post("/_tokenpath/audit", {"ids": ids}))
    assert body == _expected(stub.audit, ids, 2_500_000)
    head, body = _get(stub.port, b"GET /_tokenpath/audit/s4 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    log = stub.audit.get("s4")
    assert log is not None
    entry = AuditEntry(audit_stream(log), log.snapshot(2_500_000)).to_json()
    assert body == json.dumps(entry, separators=(",", ":")).encode()


def test_a_long_log_s_bytes_are_audit_reply_s(bg: BackgroundLoop, start_stub: StartStub) -> None:
    """A log longer than a slice is judged and encoded in pieces (stub/auditslices.py): the same bytes, alone, among
    others, without its writes, and while running (later writes are the next answer's)."""
    stub = start_stub(clock_offset_ms=2.5)
    bg.call(_fill, stub.audit, 3, SLICE_WRITES * 3 + 17)
    # Long logs with many reasoning and keep-alive indices: finished, and running (all its indices, 3 writes)
    bg.call(_marked, stub.audit, "marked", 3 * SLICE_INDICES + 50, 3 * SLICE_INDICES + 50)
    bg.call(_marked, stub.audit, "early", 300_000, 3)
    ids = ["s0", "s1", "running", "marked", "early"]
    head, body = _get(stub.port, post("/_tokenpath/audit", {"ids": ids}))
    assert body == _expected(stub.audit, ids, 2_500_000)
    assert f"\r\ncontent-length: {len(body)}\r\n".encode() in head.lower()
    for sid in ("s0", "s1"):
        log = stub.audit.get(sid)
        assert log is not None
        _, body = _get(stub.port, _one(sid))
        entry = AuditEntry(audit_stream(log), log.snapshot(2_500_000)).to_json()
        assert body == json.dumps(entry, separators=(",", ":")).encode()
        _, body = _get(stub.port, _one(sid + "?log=0"))
        assert body == json.dumps(AuditEntry(audit_stream(log)).to_json(), separators=(",", ":")).encode()
        assert json.loads(body)["verdict"]["passed"] == (sid != "s0")  # s0 has a late write: found all the same
    for sid in ("marked", "early"):
        log = stub.audit.get(sid)
        assert log is not None
        _, body = _get(stub.port, _one(sid))
        entry = AuditEntry(audit_stream(log), log.snapshot(2_500_000)).to_json()
        assert body == json.dumps(entry, separators=(",", ":")).encode()


def test_a_long_log_s_indices_are_encoded_in_slices() -> None:
    """100,000 reasoning and 100,000 keep-alive indices, of a finished log and of one that has just begun (its
    indices are planned from its start): encoded with the log's head in one step they held the loop ~13 ms; in
    slices no piece holds more than a slice of them, and the loop gets a turn between slices."""
    store = AuditStore()
    for log in (_marked(store, "long", 300_000, 300_000), _marked(store, "begun", 300_000, 3)):
        ticks = itertools.count(step=SLICE_NS)  # a slice's time between reads: a turn after every item
        share = LoopShare(clock=lambda ticks=ticks: next(ticks))  # type: ignore[misc]
        entry = asyncio.run(Encoded.of_log(log, True, 0, share))
        assert b"".join(entry.parts) == Encoded.of(AuditEntry(audit_stream(log), log.snapshot())).parts[0]
        assert max(map(len, entry.parts)) < 8 * SLICE_INDICES, "a piece holds more than a slice of indices"
        assert share.turns >= 2 * 100_000 // SLICE_INDICES


def test_answering_every_log_does_not_hold_the_loop(bg: BackgroundLoop, start_stub: StartStub) -> None:
    """A probe on the stub's loop sees its longest stall while every log is answered. Built in one step (the
    defect) the stall is the whole answer; in slices it is a small part of it. A ratio, not a time: the host is
    shared."""
    stub = start_stub()
    bg.call(_fill, stub.audit, 3000, 200)
    raw = b"GET /_tokenpath/audit HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    body, worst, took = worst_stall(bg, lambda: _get(stub.port, raw)[1])
    assert json.loads(body)["summary"]["streams"] == 3001
    assert worst < took / 2, f"the loop stalled {worst * 1000:.0f} ms of a {took * 1000:.0f} ms answer"


def test_answering_one_long_log_does_not_hold_the_loop(bg: BackgroundLoop, start_stub: StartStub) -> None:
    """One log of 300,000 writes (a 100,000-token stream with its reasoning deltas and keep-alives): built in one
    step it held the loop ~800 ms, the whole answer; in slices the longest stall is a small part of it."""
    stub = start_stub()
    bg.call(_fill, stub.audit, 1, 300_000)
    raw = b"GET /_tokenpath/audit/s0 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    body, worst, took = worst_stall(bg, lambda: _get(stub.port, raw)[1])
    assert len(json.loads(body)["log"]["writes"]) == 300_000
    assert worst < took / 4, f"the loop stalled {worst * 1000:.0f} ms of a {took * 1000:.0f} ms answer"


def worst_stall(bg: BackgroundLoop, work: Callable[[], T]) -> tuple[T, float, float]:
    """`work()`'s result, the longest a probe task on `bg`'s loop waited past its 1 ms sleep while it ran, and how
    long it took (s). Compare the two as a ratio: the host is shared, an absolute time would flake."""
    worst = [0.0]
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            worst[0] = max(worst[0], time.perf_counter() - t)

    task = asyncio.run_coroutine_threadsafe(probe(), bg.loop)
    try:
        time.sleep(0.05)
        bg.call(worst.__setitem__, 0, 0.0)
        t0 = time.perf_counter()
        result = work()
        took = time.perf_counter() - t0
    finally:
        bg.call(stop.set)
        task.result(5)
    return result, worst[0], took
