"""Every audit log at once is answered in slices: the loop the stub paces streams on is never held for the whole
answer, and the answer's bytes are the ones AuditReply has always made."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from tests.helpers import BackgroundLoop, post
from tokenpath.audit import AuditEntry, AuditReply, audit_stream
from tokenpath.stub.audit import AuditStore
from tokenpath.stub.auditslices import SLICE_WRITES
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
    ids = ["s0", "s1", "running"]
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
