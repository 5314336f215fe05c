"""Test helpers: an event loop in a thread for in-process servers, raw-socket HTTP exchanges, and scripted HTTP
peers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.server
import importlib.util
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from tokenpath.proxies.base import Endpoint
from tokenpath.serve.loops import new_event_loop
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.wire.apis import SPECS, Api

if TYPE_CHECKING:
    from tokenpath.stub.server import StubServer

T = TypeVar("T")

# The formats with an HTTP stream (a POST answered with it): every one but a WebSocket-only API (Realtime).
HTTP_APIS = [api for api in Api if not SPECS[api].websocket_only]


class BackgroundLoop:
    """Runs an event loop (uvloop, as in production) in a thread; tests in the main thread use blocking I/O."""

    def __init__(self) -> None:
        self.loop = new_event_loop("uvloop")
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Any, *args: Any) -> Any:
        async def wrapper() -> Any:
            return fn(*args)

        return self.run(wrapper())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


@contextlib.contextmanager
def stubs(bg: BackgroundLoop, **defaults: object) -> Iterator[Callable[..., StubServer]]:
    """A starter of in-process stubs on `bg` (StubConfig's fields, over `defaults`, port 0); all closed after."""
    from tokenpath.stub.config import StubConfig  # imported here: the stub is heavy, and most helpers' users need none
    from tokenpath.stub.server import StubServer

    servers: list[StubServer] = []

    def start(**kwargs: object) -> StubServer:
        server = StubServer(StubConfig(**{"port": 0, **defaults, **kwargs}))  # type: ignore[arg-type]
        bg.run(server.start())
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            bg.run(server.close())


@contextlib.contextmanager
def stub_upstream() -> Iterator[Endpoint]:
    """A real stub process (`tokenpath stub --port 0`) as a proxy's upstream: its address while it runs, stopped
    after (the `stub` fixture of the tests that start real proxies)."""
    with ServiceProcess(tokenpath_argv("stub", "--port", "0"), "stub") as proc:
        url = urlsplit(proc.url or "")
        assert url.hostname is not None
        assert url.port is not None
        yield Endpoint(url.hostname, url.port)


def accept_each(listener: socket.socket, handle: Callable[[socket.socket], None]) -> None:
    """Accept on `listener` until it is closed, in a thread, each connection handled in a thread of its own: the
    accept loop of every scripted test server."""

    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


@contextlib.contextmanager
def scripted_servers() -> Iterator[Callable[[Callable[[socket.socket], None]], int]]:
    """Loopback servers, each answering every connection with `handle` (accept_each), closed on exit: yields a
    function that starts one and returns its port (the scripted-peer fixtures build their URLs on it)."""
    listeners: list[socket.socket] = []

    def start(handle: Callable[[socket.socket], None]) -> int:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        accept_each(listener, handle)
        return int(listener.getsockname()[1])

    try:
        yield start
    finally:
        for listener in listeners:
            listener.close()


def open_receive_window(sock: socket.socket) -> None:
    """Give a client that held its receive buffer small (to stall a sender) a normal one before it reads.

    On loopback (MSS ~64 KiB) a buffer of a few KiB has no room for the sender's ~32 KiB segments: the kernel drops
    them, and each is sent again only when its retransmission timer (200 ms and up, backing off) fires. Reading a
    stream of megabytes that way took 85-96 s in some runs, the sender idle with its data queued in its socket.
    """
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)


def exchange(port: int, raw: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        out = bytearray()  # grows in place: a 30 MB answer read 64 KB at a time stays linear
        while chunk := sock.recv(65536):
            out += chunk
        return bytes(out)


def post(path: str, body: dict[str, Any] | bytes, *, version: str = "1.1", extra: str = "") -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (
        f"POST {path} HTTP/{version}\r\nHost: t\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode() + data


def status_and_json(response: bytes) -> tuple[int, Any]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A scripted peer's request handler: HTTP/1.1 keep-alive, no access log on stderr."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass


class LoopbackHTTPS:
    """The same over TLS: each handshake in the connection's own thread; a client that fails it is dropped (the
    point of some tests), never an error of the server."""

    def __init__(self, ctx: ssl.SSLContext, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request: Any, client_address: Any) -> None:
                try:
                    tls = ctx.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return
                with tls:
                    handler(tls, client_address, self)

        self.httpd = Server(("127.0.0.1", 0), handler)
        self.port = int(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class LoopbackHTTP:
    """A real HTTP server on a free loopback port, served from a thread: a peer whose answers the test scripts."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# Between the head, the burst and the last frame: longer than a loaded host keeps a runnable client waiting, so the
# three never merge into one read by accident.
GAP_S = 0.3


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class TLSRecordBurst:
    """A TLS peer that answers one streamed response with a known shape: the head, then `burst` SSE frames as
    separate TLS records sent in one TCP write (TCP_CORK holds them until the last one), then one frame alone
    (`[DONE]`, so the stream ends complete).

    This is what HAProxy 2.8+ does over TLS. A client that counts one arrival per record read would see
    `burst` arrivals; one that counts wake-ups sees one."""

    def __init__(self, cert: str, key: str, burst: int = 5) -> None:
        self.burst = burst
        self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ctx.load_cert_chain(cert, key)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            raw, _ = self._listener.accept()
            with self._ctx.wrap_socket(raw, server_side=True) as tls:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += tls.recv(65536)
                tls.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                    b"Connection: close\r\n\r\n"
                )
                time.sleep(GAP_S)
                tls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                for i in range(self.burst):
                    tls.sendall(_chunk(b"data: %d\n\n" % i))  # one record each
                tls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)  # all of them go now, together
                time.sleep(GAP_S)
                tls.sendall(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")  # the last frame: the final event
                with contextlib.suppress(OSError):
                    tls.unwrap()

    def close(self) -> None:
        self._listener.close()
        self._thread.join(5)


class CountingJson:
    """The json module, counting its parses: put in a module's `json` (monkeypatch) to count what that module parses."""

    def __init__(self) -> None:
        self.loads_calls = 0

    def loads(self, text: str | bytes, **kw: Any) -> Any:
        self.loads_calls += 1
        return json.loads(text, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)


def invoked_once(seen: list[T], *argv: str) -> tuple[T, str]:
    """`tokenpath ARGV` by typer's CliRunner, with the command's runner replaced by a recorder into `seen`: it must
    exit 0 having called the runner once. That call, and what the command printed on stdout (a flag test's look at
    whether a flag reached what it configures)."""
    from typer.testing import CliRunner

    from tokenpath.cli import app  # here: most tests importing this module never run a command

    out = CliRunner().invoke(app, list(argv))
    assert out.exit_code == 0, out.output
    assert len(seen) == 1
    return seen[0], out.stdout


def tiny_experiment(name: str, *, proxy: str | None = "pass") -> str:
    """A matrix experiment's TOML of one condition and one run of 10 frames (through the pass relay unless told
    otherwise): the least a CLI test of `matrix` or `report` needs."""
    text = f"""\
name = "{name}"
frames = 10
runs = 1

[conditions]
interval_ms = [50]
frame_bytes = [60]
link = ["loopback"]
tls = [false]
"""
    return text if proxy is None else f'{text}\n[[proxy]]\nname = "{proxy}"\n'


def load_script(path: Path, name: str) -> ModuleType:
    """A script outside the package (bench/, examples/, a peer's app) imported from its file, as a module."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def garbage_kept() -> Iterator[list[object]]:
    """The cyclic collector off and everything it finds unreachable kept (gc.DEBUG_SAVEALL) until the block ends:
    after `gc.collect()`, `gc.garbage` lists what only a reference cycle kept alive."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.garbage.clear()
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def left_in_cycles(garbage: list[object], skip: Callable[[object], bool] = lambda thing: False) -> list[str]:
    """The types of tokenpath's objects and httptools' parsers among `garbage` (what a test's own client, asyncio's
    streams, leaves is not the code under test's), `skip` aside."""
    names = {
        f"{type(thing).__module__}.{type(thing).__qualname__}"
        for thing in garbage
        if type(thing).__module__.startswith(("tokenpath.", "httptools")) and not skip(thing)
    }
    return sorted(names)


class FlushScheduler:
    """Stands in for the gateway's timer wheel as a batched log handler's schedule (jsonlog.batch_log_lines):
    remembers the flushes asked for; `run` calls them."""

    def __init__(self) -> None:
        self.asked: list[Callable[[], None]] = []

    def __call__(self, flush: Callable[[], None]) -> None:
        self.asked.append(flush)

    def run(self) -> None:
        asked, self.asked = self.asked, []
        for flush in asked:
            flush()
