"""The stub's streams wait for a client that stops reading, and drop one that never reads again: a frame that falls
due while the client's socket buffer (or an HTTP/2 stream's window) is full is held and written when it has room,
late by as long as it was kept waiting (the audit logs the real write time), so a client can never make the stub
queue a stream's frames in memory; a stream held for stub.app.STALL_S is dropped (its connection reset, its frames
freed, its audit state client_gone). Found by a hostile pass: one pipelining client that never read grew the stub by
~37 MB a request, for as long as it stayed connected."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.wspeer import TEXT, frame, session
from tests.helpers import CHAT, BackgroundLoop, open_receive_window, post
from tokenpath.stub import app as stub_app
from tokenpath.stub.server import StubServer
from tokenpath.wire.request import STREAM_HEADER

StartStub = Callable[..., StubServer]
FRAME = 2000
# The most a socket's send buffer grows to (Linux's tcp_wmem maximum: ~4 MB by default): what the kernel takes from a
# stub whose client does not read, before the stub's own writes are held. A stream of 2.5 times that, written at once
# (0 ms apart), is far more than the kernel holds, and within the stub's 32 MB limit.
SEND_BUFFER_MAX = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
TOKENS = min(int(2.5 * SEND_BUFFER_MAX) // FRAME, (32 << 20) // FRAME - 8)
BIG = {"tokens": TOKENS, "interval_ms": 0, "ttft_ms": 0, "frame_bytes": FRAME}
# What the stub may have written while the client read nothing: the kernel's buffers (the send buffer, the client's
# small receive buffer) and asyncio's up to its high-water mark, with the write that crossed it.
HELD_BYTES = SEND_BUFFER_MAX + (512 << 10)
# On a host whose send buffer can hold most of the stream, what was written while the client read nothing cannot
# tell a held stream from a queued one: those tests say so (skipped), rather than pass without telling.
TELLS = HELD_BYTES < TOKENS * FRAME // 2
needs_room = pytest.mark.skipif(not TELLS, reason=f"a {SEND_BUFFER_MAX} B send buffer holds most of a 32 MB stream")


def _quiet_client(port: int) -> socket.socket:
    """A client whose receive buffer is small (set before the connect, so the window it advertises is small)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def _writes(stub: StubServer, stream_id: str) -> int:
    log = stub.audit.get(stream_id)
    return 0 if log is None else len(log.actual_ns)


def _settled(stub: StubServer, stream_id: str) -> int:
    """The stream's writes once they stop growing (the stub waiting on the client), at least 0.5 s after its first.
    A stream this long is built before its first write (stub/app.py SLICED_FRAMES), for longer than 0.5 s on a loaded
    host: counted from a fixed moment, writes that had not begun read as writes that had stopped (0)."""
    deadline = time.monotonic() + 10
    while not _writes(stub, stream_id) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    before = -1
    deadline = time.monotonic() + 10
    while (now := _writes(stub, stream_id)) != before and time.monotonic() < deadline:
        before = now
        time.sleep(0.2)
    return now


@needs_room
def test_a_client_that_stops_reading_holds_the_stream_and_gets_every_frame_when_it_reads(
    start_stub: StartStub,
) -> None:
    stub = start_stub(**BIG)
    with _quiet_client(stub.port) as sock:
        sock.sendall(post("/v1/chat/completions", {**CHAT, "user": "slow-reader"}))
        held = _settled(stub, "slow-reader")
        assert 0 < held * FRAME < HELD_BYTES  # writes stopped with the client's buffers full: not the stream queued
        open_receive_window(sock)
        data = bytearray()
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(1 << 20)
            assert chunk, "the stub closed before the stream's end"
            data += chunk
    log = stub.audit.get("slow-reader")
    assert log is not None
    assert log.state == "complete"
    assert data.count(b"data: ") == len(log.actual_ns) > TOKENS  # every frame, once the client read
    assert all(a >= s for s, a in zip(log.scheduled_ns, log.actual_ns, strict=True))  # late, never early


@needs_room
def test_a_client_that_never_reads_again_is_dropped_after_the_stall_limit(
    bg: BackgroundLoop, start_stub: StartStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stub_app, "STALL_S", 0.3)
    stub = start_stub(**BIG)
    with _quiet_client(stub.port) as sock:
        sock.sendall(post("/v1/chat/completions", {**CHAT, "user": "never-reads"}))
        deadline = time.monotonic() + 10
        # A stream this long is built in slices first (stub/app.py SLICED_FRAMES): its log opens when it starts.
        while stub.audit.get("never-reads") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        while bg.call(lambda: len(stub.app.streams)) and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.05)
        assert bg.call(lambda: (len(stub.app.streams), len(stub.app.pacer))) == (0, 0)  # type: ignore[union-attr]
        log = stub.audit.get("never-reads")
        assert log is not None
        assert log.state == "client_gone"
        assert len(log.actual_ns) * FRAME < HELD_BYTES
        with pytest.raises(ConnectionResetError):  # dropped, what was queued with it: not a close that waits on it
            _read_to_end(sock)


def _read_to_end(sock: socket.socket) -> None:
    while sock.recv(1 << 20):
        pass


@needs_room
def test_a_websocket_client_that_stops_reading_holds_its_response(start_stub: StartStub) -> None:
    stub = start_stub(**BIG)
    sock, reader = session(stub.port, extra=f"{STREAM_HEADER}: ws-slow\r\n")
    with sock:
        create = {"type": "response.create", "model": "m", "input": "hi"}
        sock.sendall(frame(TEXT, json.dumps(create).encode()))
        held = _settled(stub, "ws-slow")
        assert 0 < held * FRAME < HELD_BYTES
        kinds: list[str] = []
        while not kinds or kinds[-1] not in ("response.completed", "response.incomplete", "error"):
            got = reader.next()
            assert got is not None, "the stub closed before the response's end"
            if got.opcode == TEXT:
                kinds.append(json.loads(got.payload)["type"])
        assert kinds[-1] == "response.completed"
    log = stub.audit.get("ws-slow")
    assert log is not None
    assert log.state == "complete"


def test_an_http2_stream_whose_window_stays_shut_is_reset_after_the_stall_limit(
    bg: BackgroundLoop, start_stub: StartStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """h2c with prior knowledge, the client's initial window 0: the stream is paused from its first DATA, then reset
    (RST_STREAM CANCEL) after the stall limit, and its connection stays usable."""
    import h2.errors

    monkeypatch.setattr(stub_app, "STALL_S", 0.3)
    stub = start_stub(**BIG)
    body = json.dumps({**CHAT, "user": "h2-shut"}).encode()
    headers = [(":method", "POST"), (":path", "/v1/chat/completions"), (":scheme", "http"), (":authority", "t"),
               ("content-type", "application/json"), ("content-length", str(len(body)))]  # fmt: skip
    assert shut_window_resets(stub.port, headers, body, 10) == [(1, h2.errors.ErrorCodes.CANCEL)]
    log = stub.audit.get("h2-shut")
    assert log is not None
    assert log.state == "client_gone"
    assert bg.call(lambda: len(stub.app.streams)) == 0  # type: ignore[union-attr]


class _FullWriter:
    """A FrameWriter whose client's buffer is already full when its stream starts (a response behind a pipelined
    one, a stream opened on a paused HTTP/2 connection): the carrier signals no pause, it only says so."""

    def __init__(self) -> None:
        self.on_abort: Callable[[], None] | None = None
        self.on_pause: Callable[[], None] | None = None
        self.on_resume: Callable[[], None] | None = None
        self.writing_paused = True
        self.writes: list[tuple[bytes, bool]] = []

    def write(self, wire_bytes: bytes, last: bool = False) -> None:
        self.writes.append((wire_bytes, last))

    def abort_connection(self) -> None:
        raise AssertionError("not stalled")


def test_a_stream_that_starts_on_a_full_buffer_holds_until_the_client_takes_room() -> None:
    import asyncio

    from tokenpath.stub.audit import AuditStore
    from tokenpath.stub.pacing import Pacer

    async def scenario() -> tuple[int, list[tuple[bytes, bool]]]:
        pacer, audit, writer = Pacer(asyncio.get_running_loop()), AuditStore(), _FullWriter()
        frames = 10
        log = audit.open("full", 1.0, time.monotonic_ns())
        offsets = [i * 1_000_000 for i in range(frames)]  # 1 ms apart: each after the head falls due while full
        done: list[object] = []
        wire = [b"f%d;" % i for i in range(frames)]
        stream = stub_app.PacedStream(
            writer, wire, [3] * frames, offsets, log, pacer, audit, time.monotonic_ns, done.append
        )
        stream.start(b"head;")
        await asyncio.sleep(0.1)  # every frame has fallen due
        held = len(writer.writes)
        writer.writing_paused = False
        assert writer.on_resume is not None
        writer.on_resume()
        for _ in range(100):
            if done:
                break
            await asyncio.sleep(0.01)
        return held, writer.writes

    held, writes = asyncio.run(scenario())
    assert held == 1  # the head and the frame due with it; nothing after it while the buffer was full
    assert b"".join(w for w, _ in writes) == b"head;" + b"".join(b"f%d;" % i for i in range(10))
    assert [last for _, last in writes].count(True) == 1  # the body ended once ...
    assert writes[-1][1]  # ... by its last frame


def shut_window_resets(port: int, headers: list[tuple[str, str]], body: bytes | None, timeout_s: float) -> list[Any]:
    """One h2c request (stream 1) on a connection whose initial window is 0, read until a stream is reset: the
    (stream id, error code) of each reset. The connection must stay open: only the stream is to be reset."""
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    conn.send_headers(1, headers, end_stream=body is None)
    if body is not None:
        conn.send_data(1, body, end_stream=True)
    events: list[h2.events.Event] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(conn.data_to_send())
        deadline = time.monotonic() + timeout_s
        while not any(isinstance(e, h2.events.StreamReset) for e in events) and time.monotonic() < deadline:
            data = sock.recv(65536)
            assert data, "the connection closed: only the stream was to be reset"
            events += conn.receive_data(data)
            sock.sendall(conn.data_to_send())
    return [(e.stream_id, e.error_code) for e in events if isinstance(e, h2.events.StreamReset)]
