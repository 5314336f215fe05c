"""The stub's audit store is bounded by bytes as well as by count: a few long streams cannot hold the machine."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers import CHAT, BackgroundLoop, post
from tokenpath.stub.audit import AuditStore, log_bytes
from tokenpath.stub.config import AUDIT_MAX_BYTES
from tokenpath.stub.replay import RecordedEvent, RecordedWrite, Recording
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.kinds import FrameKind

StartStub = Callable[..., StubServer]


def _written(store: AuditStore, stream_id: str, writes: int) -> None:
    log = store.open(stream_id, 14.0, 0, writes=writes)
    for i in range(writes):
        log.record(i, i + 1, 60)
    store.close(log, "complete")


def test_long_streams_drop_the_oldest_logs_by_bytes() -> None:
    store = AuditStore(max_streams=1000, max_bytes=3 * log_bytes(10_000, 0))
    for k in range(5):
        _written(store, f"s{k}", 10_000)
    assert [log.stream_id for log in store.all()] == ["s2", "s3", "s4"]  # far under the count bound
    assert store.nbytes == 3 * log_bytes(10_000, 0)
    assert store.get("s0") is None


def test_a_log_is_counted_when_it_opens_then_by_what_it_wrote() -> None:
    store = AuditStore(max_bytes=10 * log_bytes(1000, 0))
    log = store.open("s", 14.0, 0, reasoning=(1, 2), heartbeats=(3,), writes=1000)
    assert store.nbytes == log_bytes(1000, 3)  # planned: before a single write
    for i in range(10):  # the client left after 10 writes
        log.record(i, i, 60)
    store.close(log, "client_gone")
    assert store.nbytes == log_bytes(10, 3)


def test_a_running_log_dropped_is_answered_as_gone_and_never_counted_again() -> None:
    store = AuditStore(max_bytes=log_bytes(1000, 0) + log_bytes(10, 0))
    running = store.open("running", 14.0, 0, writes=1000)
    running.record(0, 1, 60)
    _written(store, "next", 1000)  # over the bound: the oldest goes, running or not
    assert store.get("running") is None
    running.record(1, 2, 60)  # its stream still writes to it: no error, and no memory of the store's
    store.close(running, "complete")
    assert store.nbytes == log_bytes(1000, 0)
    assert [log.stream_id for log in store.all()] == ["next"]


def test_a_reused_id_counts_only_its_newest_log() -> None:
    store = AuditStore()
    _written(store, "same", 500)
    _written(store, "same", 20)
    assert store.nbytes == log_bytes(20, 0)
    assert AuditStore()._max_bytes == AUDIT_MAX_BYTES  # the default bound, the stub's own


def test_the_stub_counts_a_long_stream_while_it_runs(bg: BackgroundLoop, start_stub: StartStub) -> None:
    """The app tells the store how many writes a stream will make: a stream still running is counted in full."""
    stub = start_stub(tokens=20_000, interval_ms=50, ttft_ms=0, format="plain")
    with socket.create_connection(("127.0.0.1", stub.port), timeout=5) as sock:
        sock.sendall(post("/v1/chat/completions", {**CHAT, "user": "long"}))
        sock.recv(4096)
        deadline = time.monotonic() + 5.0
        while stub.audit.get("long") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bg.call(lambda: stub.audit.nbytes) >= log_bytes(20_000, 0)


def _running_charge(bg: BackgroundLoop, stub: StubServer, body: dict[str, object], stream_id: str) -> int:
    """What the store counts for a stream once its log is open, while it still runs (its first bytes read)."""
    with socket.create_connection(("127.0.0.1", stub.port), timeout=5) as sock:
        sock.sendall(post("/v1/chat/completions", {**body, "user": stream_id}))
        sock.recv(4096)
        deadline = time.monotonic() + 5.0
        while stub.audit.get(stream_id) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        log = stub.audit.get(stream_id)
        assert log is not None
        assert log.state == "running"
        charged: int = bg.call(lambda: log.charged)
        return charged


def test_a_planned_stream_is_counted_in_full_when_it_opens(bg: BackgroundLoop, start_stub: StartStub) -> None:
    """Reasoning deltas and keep-alives take the plan's path (stub/plan.py): its writes, counted at the start."""
    stub = start_stub(tokens=20_000, interval_ms=50, ttft_ms=0, reasoning_tokens=10)
    assert _running_charge(bg, stub, CHAT, "planned") >= log_bytes(20_000, 10)


def test_a_replayed_stream_is_counted_in_full_when_it_opens(
    bg: BackgroundLoop, start_stub: StartStub, tmp_path: Path
) -> None:
    """A recording's writes (stub/replay.py): counted at the start as a generated stream's are."""
    events = tuple(RecordedEvent(FrameKind.CONTENT, b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n')
                   for _ in range(4))  # fmt: skip
    writes = tuple(RecordedWrite(50.0 * k, (event,)) for k, event in enumerate(events * 1000, 1))
    rec = Recording("long", Api.OPENAI, "chunked", "text/event-stream", (), 1.0, writes, {})
    path = tmp_path / "long.json"
    path.write_text(rec.dumps())
    stub = start_stub(replays=(str(path),))
    assert _running_charge(bg, stub, CHAT, "replayed") >= log_bytes(4000, 0)
