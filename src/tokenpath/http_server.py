"""A small HTTP/1.x server connection on httptools: requests in, responses written by a handler. The stub and the
gateway both serve through it.

Hand-written on asyncio protocols (not aiohttp/uvicorn) because the stub must decide the exact bytes and the
exact moment of every write (one SSE frame = one chunk = one `transport.write`, timestamped), and the gateway must
write each upstream read downstream at once, with backpressure, and see a client leave the moment it does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, cast

import httptools

from tokenpath.errors import UsageError
from tokenpath.stub.config import MAX_HEAD_BYTES, REQUEST_TIMEOUT_S

LISTEN_BACKLOG = 4096  # connections a burst of clients can queue before accept() catches up
WRITE_BUFFER_HIGH = 64 << 10  # bytes queued for a slow client before the response's producer is paused

log = logging.getLogger(__name__)

MAX_PIPELINED = 16  # requests queued behind a running response before the connection is refused more


@dataclass(slots=True)
class Request:
    method: str
    target: str
    path: str
    query: str
    http_version: str
    keep_alive: bool
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    peer: str = ""  # the client's address (empty on a Unix socket)

    def header(self, name: str) -> str | None:
        lname = name.lower()
        for key, value in self.headers:
            if key.lower() == lname:
                return value
        return None


Handler = Callable[[Request, "Response"], None]


class Response:
    """Writes one response. HTTP/1.1 streams are chunked; an HTTP/1.0 client gets a close-delimited body."""

    def __init__(self, conn: HTTPConnection, request: Request) -> None:
        self._conn = conn
        self.request = request
        self.on_abort: Callable[[], None] | None = None  # called if the client goes away mid-response
        self.on_pause: Callable[[], None] | None = None  # the client's socket buffer is full: stop producing
        self.on_resume: Callable[[], None] | None = None
        self.finished = False
        self.chunked = False  # decided by start_stream: HTTP/1.1 streams are chunked

    @property
    def client_gone(self) -> bool:
        return self._conn.closed

    def send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        """A whole response with Content-Length."""
        head = self._head(status, [*headers, ("Content-Length", str(len(body)))])
        self._conn.write(head + body)
        self._finish()

    def send_json(self, status: int, obj: Any, headers: list[tuple[str, str]] | None = None) -> None:
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send(status, [("Content-Type", "application/json"), *(headers or [])], body)

    def start_stream(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        """Returns the encoded head; the caller writes it (alone or with the first frame)."""
        self.chunked = self.request.http_version == "1.1"
        extra = [("Transfer-Encoding", "chunked")] if self.chunked else []
        return self._head(status, [*headers, *extra], stream=True)

    def start(self, status: int, headers: list[tuple[str, str]], content_length: int | None) -> bytes:
        """The head of a response whose body the caller writes: Content-Length when known, else streamed."""
        if content_length is None:
            return self.start_stream(status, headers)
        return self._head(status, [*headers, ("Content-Length", str(content_length))])

    def start_without_body(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        """The head of a response that has no body (HEAD, 204, 304): no framing header is added."""
        return self._head(status, headers)

    def close_connection(self) -> None:
        """End the response by closing (a close-delimited body, or one that cannot be finished properly)."""
        self._conn.keep_alive = False
        self._finish()

    def write(self, wire_bytes: bytes, last: bool = False) -> None:
        self._conn.write(wire_bytes)
        if last:
            self._finish()

    def _head(self, status: int, headers: list[tuple[str, str]], stream: bool = False) -> bytes:
        keep = self.request.keep_alive and not (stream and not self.chunked)
        self._conn.keep_alive = keep
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        lines = [f"HTTP/1.1 {status} {phrase}", *(f"{k}: {v}" for k, v in headers)]
        if not keep:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._conn.response_done(self)


class HTTPConnection(asyncio.Protocol):
    def __init__(
        self,
        handler: Handler,
        *,
        max_body_bytes: int,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_head_bytes: int = MAX_HEAD_BYTES,
        write_buffer_high: int = WRITE_BUFFER_HIGH,
    ) -> None:
        self._handler = handler
        self._max_body = max_body_bytes
        self._max_head = max_head_bytes
        self._write_high = write_buffer_high
        self._request_timeout_s = request_timeout_s
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._queue: deque[Request] = deque()
        self._current: Response | None = None
        self._request_timer: asyncio.TimerHandle | None = None
        self._reset_message()
        self._peer = ""
        self.closed = False
        self.keep_alive = True

    # asyncio protocol -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        peername = transport.get_extra_info("peername")
        self._peer = str(peername[0]) if isinstance(peername, tuple) else ""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._transport.set_write_buffer_limits(high=self._write_high)
        self._arm_request_timer()

    def pause_writing(self) -> None:
        if self._current is not None and self._current.on_pause is not None:
            self._current.on_pause()

    def resume_writing(self) -> None:
        if self._current is not None and self._current.on_resume is not None:
            self._current.on_resume()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if not self._headers_done:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            if not self.closed:
                self._reject(400, f"malformed HTTP request: {exc}")
        if not self._headers_done and self._head_bytes > self._max_head:
            self._reject(431, f"request head larger than {self._max_head} bytes")

    def eof_received(self) -> bool | None:
        return None  # the client is gone: close, which aborts any running response

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._request_timer is not None:
            self._request_timer.cancel()
        current, self._current = self._current, None
        self._queue.clear()
        if current is not None and not current.finished and current.on_abort is not None:
            current.on_abort()

    # httptools callbacks ------------------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))
        self._count_head(len(name) + len(value) + 4)

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self._max_head:
            self._reject(431, f"request head larger than {self._max_head} bytes")
            raise httptools.HttpParserError("rejected")

    def on_headers_complete(self) -> None:
        self._headers_done = True
        length = next((v for k, v in self._headers if k.lower() == "content-length"), None)
        if length is not None and length.isdigit() and int(length) > self._max_body:
            self._reject(413, f"request body larger than {self._max_body} bytes")
            raise httptools.HttpParserError("rejected")  # stop parsing; the response is already sent

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._max_body:
            self._reject(413, f"request body larger than {self._max_body} bytes")
            raise httptools.HttpParserError("rejected")
        self._body.append(body)

    def on_message_complete(self) -> None:
        parsed = httptools.parse_url(bytes(self._url))
        request = Request(
            method=self._parser.get_method().decode("latin-1"),
            target=self._url.decode("latin-1"),
            path=parsed.path.decode("latin-1") if parsed.path else "/",
            query=parsed.query.decode("latin-1") if parsed.query else "",
            http_version=self._parser.get_http_version(),
            peer=self._peer,
            keep_alive=self._parser.should_keep_alive(),
            headers=self._headers,
            body=b"".join(self._body),
        )
        self._reset_message()
        if len(self._queue) >= MAX_PIPELINED:
            self._reject(429, f"more than {MAX_PIPELINED} pipelined requests")
            return
        self._queue.append(request)
        if self._current is None:
            self._dispatch_next()

    # internals ----------------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    def response_done(self, response: Response) -> None:
        if response is not self._current:
            return
        self._current = None
        if not self.keep_alive:
            self._close()
        elif self._queue:
            self._dispatch_next()
        else:
            self._arm_request_timer()

    def _dispatch_next(self) -> None:
        request = self._queue.popleft()
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None
        response = Response(self, request)
        self._current = response
        try:
            self._handler(request, response)
        except Exception as exc:  # a handler bug must cost one request, never the server
            log.exception("handler failed on %s %s", request.method, request.path)
            if not response.finished:
                response.send_json(500, error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error"))

    def _reject(self, status: int, message: str) -> None:
        """Answer a request we could not parse or accept, then close: its framing can no longer be trusted."""
        if self.closed:
            return
        body = json.dumps(error_body(message, "invalid_request_error")).encode()
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        if self._current is None:  # never interleave with a response in flight
            self.write(head + body)
        self._close()

    def _close(self) -> None:
        if self._transport is not None and not self.closed:
            self.closed = True
            self._transport.close()

    def _arm_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
        loop = asyncio.get_running_loop()
        self._request_timer = loop.call_later(self._request_timeout_s, self._close)

    def _reset_message(self) -> None:
        self._url = bytearray()
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_bytes = 0  # bytes received while the head was incomplete (catches one endless line)
        self._head_size = 0  # bytes of request line and headers as parsed
        self._headers_done = False


async def listen(
    factory: Callable[[], HTTPConnection], host: str, port: int, sock: socket.socket | None = None
) -> asyncio.Server:
    """Serve connections on `sock` (a SO_REUSEPORT worker's, already bound) or on host:port. A port that cannot be
    bound is the user's problem to fix, so it is a UsageError with the reason, not a traceback."""
    loop = asyncio.get_running_loop()
    try:
        if sock is not None:
            return await loop.create_server(factory, sock=sock, backlog=LISTEN_BACKLOG)
        return await loop.create_server(factory, host, port, backlog=LISTEN_BACKLOG, reuse_address=True)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error shape, which OpenAI clients turn into a readable exception."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
