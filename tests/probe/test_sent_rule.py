"""probe/trace.py SENT_RULE: a request's sent time is read just before the write that carries its last byte, on every
transport of the probe and of the load client. Each test's clock jumps JUMP inside that write, as a client preempted
in it (by the peer it just woke) would see: a time read after the write would be JUMP later."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aioquic.h3.connection import H3Connection

from tests.probe.test_client import HEAD, ScriptedTransport, chunk
from tests.probe.test_h2stream import CONTENT, SSE, H2Peer
from tests.probe.test_h3stream import Behaviour, _cfg, _start_server
from tests.wssession import scripted
from tokenpath.load.h2conn import H2LoadConnection, h2_request
from tokenpath.load.lean import H2LeanRecorder, LeanRecorder
from tokenpath.load.wsconn import WsLeanRecorder, WsLoadStream, WsRequest, final_types
from tokenpath.probe.aio import _StreamProtocol
from tokenpath.probe.client import ProbeConfig, request_bytes
from tokenpath.probe.h3stream import _H3Client as H3Client
from tokenpath.probe.stream import _connect, probe_stream
from tokenpath.probe.transport import Target, Transport, parse_target
from tokenpath.serve.loops import new_event_loop
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.h2client import DEFAULT_WINDOW
from tokenpath.wire.httpversion import HttpVersion

JUMP = 500_000_000  # 0.5 s: far past the code between a stamp and its write; far inside every timeout


class JumpClock:
    """A clock that moves 1 us a read, and JUMP when told (inside a write)."""

    def __init__(self) -> None:
        self.now = 10**12

    def __call__(self) -> int:
        self.now += 1_000
        return self.now

    def jump(self) -> int:
        """The time the write began; the clock is JUMP later when it returns."""
        began = self.now
        self.now += JUMP
        return began


def assert_stamped_before(sent: int, write_began: int) -> None:
    assert write_began - 100_000 < sent <= write_began, f"sent {sent - write_began} ns from the write's start"


# the probe ------------------------------------------------------------------------------------------------------


class _SlowH1(ScriptedTransport):
    def __init__(self, clock: JumpClock, steps: list[tuple[float, bytes | None]]) -> None:
        super().__init__(clock, steps)  # type: ignore[arg-type]
        self.jumps: list[int] = []

    def sendall(self, data: bytes) -> None:
        super().sendall(data)
        self.jumps.append(self.clock.jump())  # type: ignore[attr-defined]


def test_the_http1_probe_stamps_its_request_before_the_write() -> None:
    clock = JumpClock()
    transport = _SlowH1(clock, [(1, HEAD + chunk(b"data: 1\n\n") + b"0\r\n\r\n")])
    trace = probe_stream(ProbeConfig(url="http://127.0.0.1:9/v1"), clock=clock, connect=lambda t, c: transport)
    assert len(transport.jumps) == 1
    assert_stamped_before(trace.t_sent_ns, transport.jumps[0])


def test_the_http2_probe_stamps_its_request_before_the_write() -> None:
    clock = JumpClock()
    jumps: list[int] = []

    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, CONTENT, end_stream=True)
        return [peer.take()]

    class Slow(H2Peer):
        def sendall(self, data: bytes) -> None:
            super().sendall(data)
            jumps.append(clock.jump())

    peer = Slow(script)

    def connect(target: Target, c: ProbeConfig) -> Transport:
        return peer

    cfg = ProbeConfig(url="http://127.0.0.1:9", http_version=HttpVersion.HTTP2, first_byte_timeout_s=1)
    trace = probe_stream(cfg, connect=connect, clock=clock)
    assert_stamped_before(trace.t_sent_ns, jumps[0])  # the preface, SETTINGS and the request: the first write


class _SlowSocket:
    """A real transport whose writes make the clock jump."""

    def __init__(self, inner: Transport, clock: JumpClock) -> None:
        self.inner = inner
        self.clock = clock
        self.jumps: list[int] = []

    def sendall(self, data: bytes) -> None:
        self.inner.sendall(data)
        self.jumps.append(self.clock.jump())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_websocket_probe_stamps_its_message_before_the_write(start_stub: Callable[..., StubServer]) -> None:
    stub = start_stub(tokens=3, interval_ms=1, ttft_ms=1)
    clock = JumpClock()
    made: list[_SlowSocket] = []

    def connect(target: Target, cfg: ProbeConfig) -> Transport:
        made.append(_SlowSocket(_connect(target, cfg), clock))
        return made[-1]

    cfg = ProbeConfig(url=stub.url, api=Api.RESPONSES, transport="websocket", first_byte_timeout_s=5)
    trace = probe_stream(cfg, clock=clock, connect=connect)
    assert trace.ws is not None
    assert trace.ws.upgraded
    assert_stamped_before(trace.t_sent_ns, made[0].jumps[1])  # the offer, then the response.create


def test_a_refused_websocket_offer_is_timed_from_before_its_write() -> None:
    clock = JumpClock()
    made: list[_SlowSocket] = []

    def connect(target: Target, cfg: ProbeConfig) -> Transport:
        made.append(_SlowSocket(_connect(target, cfg), clock))
        return made[-1]

    def refuse(conn: socket.socket, key: str) -> None:
        conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")

    for url in scripted(refuse):
        cfg = ProbeConfig(url=url, api=Api.RESPONSES, transport="websocket", first_byte_timeout_s=5)
        trace = probe_stream(cfg, clock=clock, connect=connect)
    assert trace.ws is not None
    assert not trace.ws.upgraded
    assert_stamped_before(trace.t_sent_ns, made[0].jumps[0])


@pytest.fixture
def h3_running(tmp_path: Any) -> Iterator[Any]:
    running = _start_server(tmp_path, Behaviour())
    try:
        yield running.h3
    finally:
        running.stop()


def test_the_http3_probe_stamps_its_request_before_the_datagrams_go(
    h3_running: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = JumpClock()
    marks: dict[str, int] = {}
    send_data, flush = H3Connection.send_data, H3Client.flush

    def data(self: H3Connection, stream_id: int, payload: bytes, end_stream: bool) -> None:
        send_data(self, stream_id, payload, end_stream)
        if end_stream:
            marks["request"] = clock.now  # the request is whole in QUIC's buffers; the next flush sends it

    def slow_flush(self: H3Client) -> None:
        flush(self)
        if "request" in marks and "write" not in marks:
            marks["write"] = clock.jump()

    monkeypatch.setattr(H3Connection, "send_data", data)
    monkeypatch.setattr(H3Client, "flush", slow_flush)
    trace = probe_stream(_cfg(h3_running), clock=clock)
    assert trace.http_version == "3"
    assert_stamped_before(trace.t_sent_ns, marks["write"])


# the load client ------------------------------------------------------------------------------------------------


class _SlowAsyncTransport(asyncio.Transport):
    def __init__(self, clock: JumpClock) -> None:
        super().__init__()
        self.clock = clock
        self.jumps: list[int] = []
        self.written = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)
        self.jumps.append(self.clock.jump())

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        pass


def _in_loop(body: Callable[[asyncio.AbstractEventLoop], None]) -> None:
    loop = new_event_loop()
    try:

        async def run() -> None:
            body(asyncio.get_running_loop())

        loop.run_until_complete(run())
    finally:
        loop.close()


def test_the_load_clients_http1_stream_stamps_its_request_before_the_write() -> None:
    clock = JumpClock()
    stamps: list[int] = []

    def body(loop: asyncio.AbstractEventLoop) -> None:
        request = request_bytes(ProbeConfig(url="http://127.0.0.1:9/v1"), parse_target("http://127.0.0.1:9/v1"), "s")

        def make(sid: str, t: int) -> LeanRecorder:
            stamps.append(t)
            return LeanRecorder(sid, t)

        protocol = _StreamProtocol("s", request, clock, loop.create_future(), make)
        transport = _SlowAsyncTransport(clock)
        protocol.connection_made(transport)
        assert transport.written == request
        assert_stamped_before(stamps[0], transport.jumps[0])

    _in_loop(body)


def test_the_load_clients_http2_stream_stamps_its_request_before_the_write() -> None:
    clock = JumpClock()
    stamps: list[int] = []

    def body(loop: asyncio.AbstractEventLoop) -> None:
        conn = H2LoadConnection("127.0.0.1:9", "http", DEFAULT_WINDOW, clock)
        transport = _SlowAsyncTransport(clock)
        conn.connection_made(transport)  # the preface: a write of its own
        target = parse_target("http://127.0.0.1:9/v1")
        request = h2_request(request_bytes(ProbeConfig(url="http://127.0.0.1:9/v1"), target, "s"))

        def make(sid: str, t: int) -> H2LeanRecorder:
            stamps.append(t)
            return H2LeanRecorder(sid, t)

        conn.open(request, "s", make)
        assert_stamped_before(stamps[0], transport.jumps[-1])

    _in_loop(body)


def test_the_load_clients_websocket_offer_is_timed_from_before_its_write() -> None:
    clock = JumpClock()

    def body(loop: asyncio.AbstractEventLoop) -> None:
        request = WsRequest("127.0.0.1:9", "/v1/responses", (), ('{"type":"response.create"}',))
        stream = WsLoadStream(request, "s", WsLeanRecorder, loop.create_future(), final_types(Api.RESPONSES), clock)
        transport = _SlowAsyncTransport(clock)
        stream.connection_made(transport)
        assert_stamped_before(stream._offered_ns, transport.jumps[0])

    _in_loop(body)
