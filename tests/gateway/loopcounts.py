"""A test-only harness that COUNTS what the gateway does per upstream read (counts, not timings: exact on a loaded
machine). One gateway in process on asyncio, a member that sends one SSE frame per write in lockstep with the
client (the next frame only after the client has the previous one, so every frame is its own upstream read), and
a raw client. While the upstream link's data_received runs (one upstream read; over TLS decrypted there too):

- `scheduled`: callbacks it hands the event loop (call_soon, call_later, call_at, a future or task created; a
  future resolved or a task woken goes through call_soon): each one is an extra loop iteration for that read;
- `calls`: the Python calls it makes (cProfile, enabled only inside received): the interpreter's work per read.

The measured runs go without the cyclic garbage collector (_no_cyclic_collector): a collection that happens to start
inside a measured call runs the finalizers of whatever garbage is pending (an earlier event loop and its transports,
an earlier test's objects), and cProfile counts their calls as the gateway's. When it starts depends on allocations
since the last one, so on what ran before in the process and on how many loop iterations a loaded host takes.

bench/loop_iterations.py --calls prints them; tests/gateway/test_loop_counts.py holds them to their bounds."""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import io
import logging
import pstats
import ssl
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import h2.config
import h2.connection
import h2.events

from tokenpath.gateway import link
from tokenpath.gateway.config import AuthConfig, GatewayConfig, Member, PoolConfig
from tokenpath.gateway.server import GatewayServer
from tokenpath.jsonlog import batch_log_lines, configure_logging
from tokenpath.serve.tlscert import self_signed

SCHEDULERS = ("call_soon", "call_later", "call_at", "create_future", "create_task")
FRAME = b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n'
ROLE = b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
Protocol = Literal["http1", "h2"]
BODY = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'


@dataclass
class Counts:
    reads: int = 0
    scheduled: int = 0
    calls: int = 0
    collections: int = 0  # cyclic garbage collections started inside a measured read (their finalizers' calls counted)

    @property
    def scheduled_per_read(self) -> float:
        return self.scheduled / self.reads

    @property
    def calls_per_read(self) -> float:
        return self.calls / self.reads


class _Member(asyncio.Protocol):
    """Answers one streamed request per connection, a frame each time `send` is called (chunked)."""

    def __init__(self, connected: asyncio.Future[_Member]) -> None:
        if not connected.done():
            connected.set_result(self)
        self.head = b""
        self.got_request = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.head += data
        if b"\r\n\r\n" in self.head and not self.got_request.done():
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            self.transport.write(head)
            self.got_request.set_result(None)

    def send(self, frame: bytes) -> None:
        self.transport.write(b"%x\r\n%s\r\n" % (len(frame), frame))

    def end(self) -> None:
        self.transport.write(b"0\r\n\r\n")


async def _read_until(reader: asyncio.StreamReader, seen: bytearray, marker: bytes) -> None:
    while marker not in seen:
        data = await reader.read(65536)
        assert data, f"the gateway closed before {marker!r}; got {bytes(seen)!r}"
        seen += data


class _H2Member(asyncio.Protocol):
    """The same member over h2c (prior knowledge, the h2 library's server side): a DATA frame per `send`."""

    def __init__(self, connected: asyncio.Future[_H2Member]) -> None:
        if not connected.done():
            connected.set_result(self)
        self.stream_id = 0
        self.got_request = asyncio.get_running_loop().create_future()
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self.transport = transport
        self.conn.initiate_connection()
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.StreamEnded) and not self.got_request.done():
                self.stream_id = event.stream_id
                self.conn.send_headers(event.stream_id, [(b":status", b"200"), (b"content-type", b"text/event-stream")])
                self.got_request.set_result(None)
        self.transport.write(self.conn.data_to_send())

    def send(self, frame: bytes) -> None:
        self.conn.send_data(self.stream_id, frame)
        self.transport.write(self.conn.data_to_send())

    def end(self) -> None:
        self.conn.end_stream(self.stream_id)
        self.transport.write(self.conn.data_to_send())


class _H1Client:
    """The client over HTTP/1.1: the body as it comes on the wire (chunk framing included)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.seen = bytearray()
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
        )

    async def read_until(self, marker: bytes) -> None:
        await _read_until(self.reader, self.seen, marker)

    async def read_to_end(self) -> None:
        await self.read_until(b"0\r\n\r\n")


class _H2Client:
    """The client over h2c with prior knowledge: the DATA it gets, each acknowledged at once (window kept open)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.seen = bytearray()
        self.ended = False
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        self.stream_id = self.conn.get_next_available_stream_id()
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":authority", b"gw"),
            (b":path", b"/v1/chat/completions"),
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(BODY)),
        ]
        self.conn.send_headers(self.stream_id, headers)
        self.conn.send_data(self.stream_id, BODY, end_stream=True)
        writer.write(self.conn.data_to_send())

    async def _read(self) -> None:
        data = await self.reader.read(65536)
        assert data, f"the gateway closed; got {bytes(self.seen)!r}"
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                self.seen += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.ended = True
            elif isinstance(event, h2.events.StreamReset):
                raise AssertionError(f"the gateway reset the stream: {event}")
        self.writer.write(self.conn.data_to_send())

    async def read_until(self, marker: bytes) -> None:
        while marker not in self.seen:
            await self._read()

    async def read_to_end(self) -> None:
        while not self.ended:
            await self._read()


async def _run(
    frames: int,
    counts: Counts,
    profile: cProfile.Profile,
    tls: Path | None,
    downstream: Protocol = "http1",
    upstream: Protocol = "http1",
) -> None:
    loop = asyncio.get_running_loop()
    connected: asyncio.Future[Any] = loop.create_future()
    ctx = None
    if tls is not None:
        files = self_signed(tls, ["127.0.0.1"])
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(files.cert, files.key)
        ctx.set_alpn_protocols(["h2"] if upstream == "h2" else ["http/1.1"])
    member_type = _H2Member if upstream == "h2" else _Member
    member_server = await loop.create_server(lambda: member_type(connected), "127.0.0.1", 0, ssl=ctx)
    member_port = member_server.sockets[0].getsockname()[1]
    scheme, ca_file = ("https", str(files.cert)) if tls is not None else ("http", None)
    pool = PoolConfig("p", (Member(f"{scheme}://127.0.0.1:{member_port}"),), protocol=upstream, ca_file=ca_file)
    gateway = GatewayServer(GatewayConfig((pool,), listen_port=0, auth=AuthConfig(mode="none")))
    port = await gateway.start()
    inside = [False]
    measuring = [False]  # the steady state only: the first frames (first byte, first token) are news, off the hot path
    originals: dict[str, Callable[..., Any]] = {}
    for name in SCHEDULERS:
        original = originals[name] = getattr(loop, name)

        def counted(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            if inside[0]:
                counts.scheduled += 1
            return _original(*args, **kwargs)

        setattr(loop, name, counted)
    received = link.UpstreamLink.data_received

    def measured(self: link.UpstreamLink, data: bytes) -> None:
        if not measuring[0]:
            received(self, data)
            return
        counts.reads += 1
        inside[0] = True
        profile.enable()
        try:
            received(self, data)
        finally:
            profile.disable()
            inside[0] = False

    def collecting(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and inside[0]:
            counts.collections += 1

    link.UpstreamLink.data_received = measured  # type: ignore[method-assign]
    gc.callbacks.append(collecting)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = _H2Client(reader, writer) if downstream == "h2" else _H1Client(reader, writer)
        member = await connected
        await member.got_request
        member.send(ROLE)  # the first frames: first byte, first token (news, off the hot path)
        await client.read_until(b"assistant")
        member.send(FRAME)
        await client.read_until(b"tok")
        measuring[0] = True
        for i in range(frames):  # the steady state: one frame, one upstream read, one client write
            member.send(FRAME.replace(b"tok", b"t%05d" % i))
            await client.read_until(b"t%05d" % i)
        measuring[0] = False
        member.end()
        await client.read_to_end()
        writer.close()
    finally:
        gc.callbacks.remove(collecting)
        link.UpstreamLink.data_received = received  # type: ignore[method-assign]
        for name, original in originals.items():
            setattr(loop, name, original)
        await gateway.close(0.1)
        member_server.close()


@contextlib.contextmanager
def _no_cyclic_collector() -> Iterator[None]:
    """Pending garbage collected now, and no collection until the block ends (none starting in a measured call)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def count(frames: int = 50, tls: bool = False, downstream: Protocol = "http1", upstream: Protocol = "http1") -> Counts:
    """Counts for `frames` steady-state upstream reads of one stream: the client speaks `downstream` (h2: h2c with
    prior knowledge), the member `upstream` (h2: h2c, or h2 by ALPN with `tls`); `tls`: the member over TLS, its
    certificate self-signed."""
    counts = Counts()
    with tempfile.TemporaryDirectory() as directory:
        where = Path(directory) if tls else None
        warm = Counts()  # imports and first-time caches out of the way
        asyncio.run(_run(frames, warm, cProfile.Profile(), where, downstream, upstream))
        profile = cProfile.Profile()
        with _no_cyclic_collector():
            asyncio.run(_run(frames, counts, profile, where, downstream, upstream))
    stats = pstats.Stats(profile)
    counts.calls = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
    return counts


class _ShortMember(asyncio.Protocol):
    """Answers every request on its connection at once with a short stream: the role, one token, [DONE]."""

    STREAM = b"".join(b"%x\r\n%s\r\n" % (len(f), f) for f in (ROLE, FRAME, b"data: [DONE]\n\n")) + b"0\r\n\r\n"

    def __init__(self) -> None:
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            self.transport.write(head + self.STREAM)


def _in_tokenpath(key: tuple[str, int, str]) -> bool:
    return "/tokenpath/" in key[0].replace("\\", "/")


@dataclass
class RequestCounts:
    own: float  # Python calls per request in tokenpath's own functions
    every: float  # all of them (prometheus-client's, asyncio's, logging's, the harness's few)
    loop_timers: float  # event-loop timers armed per request (call_later, call_at), the timer wheel's ticks apart
    lines: list[str]  # the access log's lines, when logged


def _is_wheel_tick(callback: Callable[..., Any]) -> bool:
    return type(getattr(callback, "__self__", None)).__name__ == "LoopWheel"


@contextlib.contextmanager
def _production_logging(lines: io.StringIO | None) -> Iterator[None]:
    """The gateway's logging as `tokenpath gateway` sets it up (jsonlog.configure_logging at info: the access log
    line per request), into `lines`; with None, as in a process where nothing set it up (no handler of ours, no line
    built): whatever an earlier test in this process left configured would change the count (a CI run's worker had
    a gateway's logging left on by a test before, and counted the access line as the request's). Logging's state as
    it was afterwards (pytest's caplog needs it)."""
    logger = logging.getLogger("tokenpath")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    flags = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")
    saved_flags = {name: getattr(logging, name) for name in flags}
    if lines is None:
        logger.handlers[:], logger.propagate = [], True
        logger.setLevel(logging.NOTSET)
    else:
        stderr, sys.stderr = sys.stderr, lines
        try:
            configure_logging("info", batched=True)
        finally:
            sys.stderr = stderr
    try:
        yield
    finally:
        handlers, level, propagate = saved
        logger.handlers[:], logger.propagate = handlers, propagate
        logger.setLevel(level)  # not the attribute: setLevel clears the loggers' isEnabledFor caches, which the info
        # level filled (a later test's gateway would otherwise build access lines at the level it restored)
        for name, value in saved_flags.items():
            setattr(logging, name, value)


def _never(flush: Callable[[], None]) -> None:
    """A flush schedule that never runs it (the gateway's close writes what waits)."""


# The headers the official OpenAI Python SDK sends with a chat completion (httpx's and its own x-stainless-* ones),
# the Host and Content-Length apart: a request as the clients people use make it.
SDK_HEADERS = (
    b"Accept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nAccept: application/json\r\n"
    b"User-Agent: OpenAI/Python 1.99.0\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.99.0\r\n"
    b"X-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\n"
    b"X-Stainless-Runtime-Version: 3.11.7\r\nAuthorization: Bearer sk-test\r\nX-Stainless-Async: false\r\n"
    b"x-stainless-retry-count: 0\r\nx-stainless-read-timeout: 600\r\n"
)


async def _requests(
    requests: int, profile: cProfile.Profile | None, timers: list[int] | None = None, headers: bytes = b""
) -> None:
    """`requests` short requests on one keep-alive connection after two warm-ups: profiled (`profile`), or with the
    event-loop timers they arm counted into `timers` (a wrapper cProfile would count too: never both at once)."""
    loop = asyncio.get_running_loop()
    measuring = [False]
    call_at = loop.call_at  # asyncio's call_later arms through it

    def counted(when: float, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if timers is not None and measuring[0] and not _is_wheel_tick(callback):
            timers[0] += 1
        return call_at(when, callback, *args, **kwargs)

    if timers is not None:
        loop.call_at = counted  # type: ignore[method-assign,assignment]
    member_server = await loop.create_server(_ShortMember, "127.0.0.1", 0)
    member_port = member_server.sockets[0].getsockname()[1]
    pool = PoolConfig("p", (Member(f"http://127.0.0.1:{member_port}"),))
    gateway = GatewayServer(GatewayConfig((pool,), listen_port=0, auth=AuthConfig(mode="none")))
    port = await gateway.start()
    # The access log's lines (with it on) wait for the close: a flush on the wheel's schedule would land inside the
    # measured requests or not, as the host's speed decides (tests/gateway/test_access_log_batches.py tests it).
    batch_log_lines(_never)
    body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n%s"
        b"Content-Length: %d\r\n\r\n%s" % (headers, len(body), body)
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(requests + 2):  # two first: the upstream connection opened and pooled, caches warm
            if i == 2:
                measuring[0] = True
                if profile is not None:
                    profile.enable()
            writer.write(request)
            seen = bytearray()
            await _read_until(reader, seen, b"0\r\n\r\n")
        if profile is not None:
            profile.disable()
        measuring[0] = False
        writer.close()
    finally:
        loop.call_at = call_at  # type: ignore[method-assign]
        await gateway.close(0.1)
        member_server.close()


def calls_per_request(requests: int = 20, logged: bool = False, headers: bytes = b"") -> RequestCounts:
    """Python calls and event-loop timers per short request (3 frames, one keep-alive client connection, a pooled
    upstream one). `logged`: with the access log on, as `tokenpath gateway` runs (its lines kept, to check).
    `headers`: more header lines in each request (SDK_HEADERS: as the OpenAI SDK sends it)."""
    asyncio.run(_requests(requests, None, headers=headers))  # imports and first-time caches out of the way
    profile = cProfile.Profile()
    timers = [0]
    lines = io.StringIO()
    with _production_logging(lines if logged else None), _no_cyclic_collector():
        asyncio.run(_requests(requests, profile, headers=headers))
    asyncio.run(_requests(requests, None, timers, headers))
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    ours = sum(entry[1] for key, entry in stats.items() if _in_tokenpath(key))
    every = sum(entry[1] for entry in stats.values())
    return RequestCounts(ours / requests, every / requests, timers[0] / requests, lines.getvalue().splitlines())
