"""load/h2conn.py against an in-process HTTP/2 server (the h2 library's server side on a loopback socket): streams
per connection, the peer's concurrency limit, a server that is not HTTP/2, a reset, and the request's fields."""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from tokenpath.errors import HTTP2Unavailable, PeerError
from tokenpath.load import h2conn
from tokenpath.load.h2conn import H2LoadPool, h2_request
from tokenpath.load.lean import H2LeanRecorder
from tokenpath.probe.client import ProbeConfig, request_bytes
from tokenpath.probe.transport import TLSOptions
from tokenpath.serve.loops import new_event_loop
from tokenpath.serve.tlscert import self_signed
from tokenpath.wire.h2client import BROWSER_WINDOW, DEFAULT_WINDOW, H2Window

T = TypeVar("T")
FRAMES = 5


def chunk(i: int, text: str) -> bytes:
    delta = {"role": "assistant"} if i == 0 else {"content": text}
    body = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@dataclass
class Server:
    """Answers every stream with a role frame, FRAMES content frames and [DONE], each its own DATA frame."""

    max_streams: int = 100
    frame_pad: int = 0  # bytes of padding in each content frame's text (large frames exhaust a small window)
    reset_all: bool = False
    hold_until: int = 0  # answer no stream before this many requests came in (all of them open at once)
    goaway: bool = False  # GOAWAY after each answer: the connection takes no new stream
    die_first: bool = False  # the first connection is cut as soon as a request is whole
    connections: int = 0
    requests: list[dict[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    all_in: asyncio.Event | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.local_settings = h2.settings.Settings(
            client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams}
        )
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        bodies: dict[int, bytes] = {}
        pending: dict[int, list[bytes]] = {}  # what each stream still has to send, as the client's window allows
        if self.all_in is None:
            self.all_in = asyncio.Event()
        all_in = self.all_in

        async def release() -> None:
            await all_in.wait()
            self._send(conn, pending)
            writer.write(conn.data_to_send())

        held = asyncio.ensure_future(release())
        answered = 0  # streams answered on this connection
        for _ in range(100_000):  # bounded: a test connection sees far fewer reads
            data = await reader.read(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    self.requests.append(dict(event.headers))  # type: ignore[arg-type]
                    bodies[event.stream_id] = b""
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.bodies.append(bodies[event.stream_id])
                    if self.die_first and self.connections == 1:
                        writer.transport.abort()
                        held.cancel()
                        return
                    if self.reset_all:
                        conn.reset_stream(event.stream_id)
                        continue
                    conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "text/event-stream")])
                    text = "x" * self.frame_pad
                    frames = [chunk(i, f"{text}{i}") for i in range(FRAMES + 1)] + [b"data: [DONE]\n\n"]
                    pending[event.stream_id] = frames
                    answered += 1
            if len(self.bodies) >= self.hold_until:
                all_in.set()
            if all_in.is_set():
                self._send(conn, pending)
                if self.goaway and answered and not pending:
                    conn.close_connection()
            writer.write(conn.data_to_send())
            await writer.drain()
        held.cancel()
        writer.close()

    @staticmethod
    def _send(conn: h2.connection.H2Connection, pending: dict[int, list[bytes]]) -> None:
        for sid, frames in list(pending.items()):
            while frames:
                frame = frames[0]
                room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if room <= 0:
                    break
                piece, frames[0] = frame[:room], frame[room:]
                if not frames[0]:
                    frames.pop(0)
                conn.send_data(sid, piece, end_stream=not frames)
            if not frames:
                del pending[sid]


def run(server: Server, scenario: Callable[[int], Awaitable[T]], tls: ssl.SSLContext | None = None) -> T:
    async def main() -> T:
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
        port = listener.sockets[0].getsockname()[1]
        try:
            return await asyncio.wait_for(scenario(port), 30)
        finally:
            listener.close()

    loop = new_event_loop("uvloop")
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def request(port: int, sid: str = "tp-1") -> bytes:
    cfg = ProbeConfig(url=f"http://127.0.0.1:{port}/v1", prompt="word " * 400)
    return request_bytes(cfg, cfg.target, sid)


async def streams(
    port: int, n: int, per_connection: int, window: H2Window = DEFAULT_WINDOW, tls: ssl.SSLContext | None = None
) -> tuple[H2LoadPool, list]:  # type: ignore[type-arg]
    pool = H2LoadPool("127.0.0.1", port, per_connection=per_connection, window=window, ssl_context=tls)
    make = functools.partial(H2LeanRecorder)
    try:
        out = await asyncio.gather(
            *(pool.stream(h2_request(request(port, f"tp-{i}")), f"tp-{i}", make, timeout_s=20) for i in range(n)),
            return_exceptions=True,
        )
    finally:
        await pool.aclose()
    return pool, out


def test_streams_share_connections_as_asked_and_each_is_recorded_whole() -> None:
    server = Server(hold_until=20)
    pool, out = run(server, lambda port: streams(port, 20, 10))
    assert [o for o in out if isinstance(o, BaseException)] == []
    assert (pool.opened, server.connections, pool.peer_limit) == (2, 2, None)
    for trace, flow in out:
        assert trace.status == 200
        assert trace.first_content is not None
        assert trace.first_content_t_ns is not None
        assert trace.body.count(b"data: ") == FRAMES + 2
        assert flow.data_frames >= FRAMES + 2
        assert 1 <= flow.reads <= flow.data_frames
    assert len(server.bodies) == 20
    assert all(len(b) > 2000 for b in server.bodies)  # whole request bodies arrived


def test_one_stream_per_connection_opens_one_connection_per_concurrent_stream() -> None:
    server = Server(hold_until=6)
    pool, out = run(server, lambda port: streams(port, 6, 1))
    assert not [o for o in out if isinstance(o, BaseException)]
    assert pool.opened == server.connections == 6


def test_a_peer_limit_below_the_ask_opens_more_connections_and_says_so() -> None:
    server = Server(max_streams=4, hold_until=20)
    pool, out = run(server, lambda port: streams(port, 20, 10))
    assert not [o for o in out if isinstance(o, BaseException)]
    assert pool.peer_limit == 4
    assert pool.opened == server.connections == 5


def test_a_small_window_and_large_frames_stall_and_the_browser_window_does_not() -> None:
    small = run(Server(frame_pad=30_000), lambda port: streams(port, 3, 3, DEFAULT_WINDOW))[1]
    large = run(Server(frame_pad=30_000), lambda port: streams(port, 3, 3, BROWSER_WINDOW))[1]
    assert not [o for o in small + large if isinstance(o, BaseException)]
    assert sum(flow.stalls for _, flow in small) > 0  # per stream it depends on how reads cut the window
    assert all(flow.stalls == 0 for _, flow in large)


def test_a_server_that_is_not_http2_fails_each_stream_in_one_line() -> None:
    async def http11(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = Server()
    server.handle = http11  # type: ignore[method-assign]
    _, out = run(server, lambda port: streams(port, 3, 3))
    assert out
    assert all(isinstance(o, HTTP2Unavailable) for o in out)
    assert "\n" not in str(out[0])


def server_tls(tmp_path: Path, alpn: list[str]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    files = self_signed(tmp_path, ["127.0.0.1"])
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(files.cert, files.key)
    server.set_alpn_protocols(alpn)
    return server, TLSOptions(cacert=str(files.cert), http2=True).context()


def test_over_tls_h2_is_chosen_by_alpn(tmp_path: Path) -> None:
    server_ctx, client_ctx = server_tls(tmp_path, ["h2", "http/1.1"])
    pool, out = run(Server(hold_until=4), lambda port: streams(port, 4, 4, tls=client_ctx), server_ctx)
    assert not [o for o in out if isinstance(o, BaseException)]
    assert pool.opened == 1


def test_over_tls_a_server_that_picks_http11_fails_without_falling_back(tmp_path: Path) -> None:
    server_ctx, client_ctx = server_tls(tmp_path, ["http/1.1"])
    _, out = run(Server(), lambda port: streams(port, 2, 2, tls=client_ctx), server_ctx)
    assert all(isinstance(o, HTTP2Unavailable) and "ALPN chose http/1.1" in str(o) for o in out)


def test_a_reset_stream_is_that_stream_error() -> None:
    _, out = run(Server(reset_all=True), lambda port: streams(port, 2, 2))
    assert all(isinstance(o, PeerError) and "reset" in str(o) for o in out)


def test_the_h2_request_carries_the_http11_request_fields() -> None:
    raw = request(8000, "tp-abc")
    req = h2_request(raw)
    assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    names = [n.lower() for n, _ in req.headers]
    assert not {"host", "connection", "content-length"} & set(names)
    assert dict((n.lower(), v) for n, v in req.headers)["x-tokenpath-stream"] == "tp-abc"
    assert json.loads(req.body)["user"] == "tp-abc"
    with pytest.raises(ValueError, match="no end of head"):
        h2_request(b"POST / HTTP/1.1\r\nHost: x\r\n")


def test_after_goaway_the_next_stream_opens_a_new_connection() -> None:
    async def one_at_a_time(port: int) -> tuple[H2LoadPool, list[object]]:
        pool = H2LoadPool("127.0.0.1", port, per_connection=10, window=DEFAULT_WINDOW)
        out: list[object] = []
        try:
            for i in range(3):
                out.append(await pool.stream(h2_request(request(port)), f"tp-{i}", H2LeanRecorder, timeout_s=20))
        finally:
            await pool.aclose()
        return pool, out

    server = Server(goaway=True)
    pool, out = run(server, one_at_a_time)
    assert len(out) == 3
    assert pool.opened == server.connections == 3


def test_a_connection_cut_mid_stream_fails_its_streams_and_the_next_ones_reconnect() -> None:
    async def twice(port: int) -> tuple[list[object], list[object], H2LoadPool]:
        pool = H2LoadPool("127.0.0.1", port, per_connection=10, window=DEFAULT_WINDOW)
        try:
            batch = [pool.stream(h2_request(request(port)), f"tp-{i}", H2LeanRecorder, timeout_s=20) for i in range(2)]
            first: list[object] = list(await asyncio.gather(*batch, return_exceptions=True))
            again = [pool.stream(h2_request(request(port)), f"tp-{i}", H2LeanRecorder, timeout_s=20) for i in range(2)]
            second: list[object] = list(await asyncio.gather(*again, return_exceptions=True))
        finally:
            await pool.aclose()
        return first, second, pool

    first, second, pool = run(Server(die_first=True), twice)
    assert all(isinstance(o, PeerError) for o in first)
    assert not [o for o in second if isinstance(o, BaseException)]
    assert pool.opened == 2


def test_a_server_that_never_speaks_fails_the_streams_waiting_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(1000):  # until the client gives up on it (EOF)
            if not await reader.read(65536):
                break
        writer.close()

    monkeypatch.setattr(h2conn, "SETTINGS_WAIT_S", 0.2)
    server = Server()
    server.handle = silent  # type: ignore[method-assign]
    _, out = run(server, lambda port: streams(port, 3, 3))
    assert all(isinstance(o, HTTP2Unavailable) and "no HTTP/2 SETTINGS" in str(o) for o in out)
