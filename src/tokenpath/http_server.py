"""The asyncio shell around wire.server.ServerConnection: requests in, responses written by a handler. The stub and
the gateway both serve through it.

On asyncio protocols (not aiohttp/uvicorn) because the stub must decide the exact bytes and the exact moment of
every write (one SSE frame = one chunk = one `transport.write`, timestamped), and the gateway must write each
upstream read downstream at once, with backpressure, and see a client leave the moment it does. Parsing, framing
and limits are the core's; this module only moves bytes, runs the header timer and calls the handler.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable
from typing import Any, cast

from tokenpath.errors import RemoteProtocolError, UsageError
from tokenpath.wire.framing import Framing, frame_body
from tokenpath.wire.limits import LISTEN_BACKLOG, ServerLimits
from tokenpath.wire.server import END_OF_MESSAGE, Request, ResponseStart, ServerConnection

__all__ = ["HTTPConnection", "Handler", "Request", "Response", "bound_port", "error_body", "listen"]

log = logging.getLogger(__name__)

Handler = Callable[[Request, "Response"], None]


class Response:
    """Writes one response through the connection's core. HTTP/1.1 streams are chunked; an HTTP/1.0 client gets
    a close-delimited body."""

    def __init__(self, conn: HTTPConnection, request: Request) -> None:
        self._conn = conn
        self.request = request
        self.on_abort: Callable[[], None] | None = None  # called if the client goes away mid-response
        self.on_pause: Callable[[], None] | None = None  # the client's socket buffer is full: stop producing
        self.on_resume: Callable[[], None] | None = None
        self.finished = False
        self.framing: Framing | None = None  # decided by the core when the head is made

    @property
    def chunked(self) -> bool:
        return self.framing is Framing.CHUNKED

    @property
    def client_gone(self) -> bool:
        return self._conn.closed

    def send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        """A whole response with Content-Length (no body bytes to a HEAD request)."""
        head = self.start(status, headers, len(body))
        self._conn.write(head + body if self.framing is Framing.LENGTH else head)
        self._end()

    def send_json(self, status: int, obj: Any, headers: list[tuple[str, str]] | None = None) -> None:
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send(status, [("Content-Type", "application/json"), *(headers or [])], body)

    def start_stream(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        """Returns the encoded head of a streamed body; the caller writes it (alone or with the first frame)."""
        return self.start(status, headers, None)

    def start(self, status: int, headers: list[tuple[str, str]], content_length: int | None) -> bytes:
        """The head of a response whose body the caller writes: Content-Length when known, else streamed."""
        head = self._conn.core.send(ResponseStart(status, headers, content_length))
        self.framing = self._conn.core.framing
        return head

    def start_without_body(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        """The head of a response that has no body (HEAD, 204, 304): no framing header is added."""
        head = self._conn.core.send(ResponseStart(status, headers, has_body=False))
        self.framing = self._conn.core.framing
        return head

    def frame(self, data: bytes) -> bytes:
        """Body bytes framed for this response (a chunk, or as they are)."""
        return frame_body(self.framing, data) if self.framing is not None else data

    def end_bytes(self) -> bytes:
        """The bytes that end the body (the last chunk, or nothing); the response is over once they are written."""
        tail = self._conn.core.send(END_OF_MESSAGE) if self.framing is not None else b""
        self.framing = None
        return tail

    def close_connection(self) -> None:
        """End the response by closing (a close-delimited body, or one that cannot be finished properly)."""
        self._conn.core.keep_alive = False
        self._finish()

    def write(self, wire_bytes: bytes, last: bool = False) -> None:
        """Pre-framed bytes (the fast path: one frame, one write). With `last`, the bytes include the end of the
        body and the response is over."""
        self._conn.write(wire_bytes)
        if last:
            self._end()

    def _end(self) -> None:
        if self.framing is not None:
            self._conn.core.send(END_OF_MESSAGE)  # the bytes (if any) were written by the caller
            self.framing = None
        self._finish()

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._conn.response_done(self)


class HTTPConnection(asyncio.Protocol):
    def __init__(self, handler: Handler, limits: ServerLimits) -> None:
        self._handler = handler
        self.limits = limits
        self.core = ServerConnection(limits)
        self._transport: asyncio.Transport | None = None
        self._current: Response | None = None
        self._request_timer: asyncio.TimerHandle | None = None
        self.closed = False

    # asyncio protocol -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        peername = transport.get_extra_info("peername")
        self.core.peer = str(peername[0]) if isinstance(peername, tuple) else ""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._transport.set_write_buffer_limits(high=self.limits.write_buffer_high)
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
        try:
            self.core.receive_data(data)
        except RemoteProtocolError as exc:
            self._reject(exc.status_hint, str(exc))
            return
        if self._current is None:
            self._dispatch_next()

    def eof_received(self) -> bool | None:
        return None  # the client is gone: close, which aborts any running response

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._request_timer is not None:
            self._request_timer.cancel()
        current, self._current = self._current, None
        if current is not None and not current.finished and current.on_abort is not None:
            current.on_abort()

    # used by Response -------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    def response_done(self, response: Response) -> None:
        if response is not self._current:
            return
        self._current = None
        if not self.core.keep_alive:
            self._close()
        elif not self._dispatch_next():
            self._arm_request_timer()

    # internals --------------------------------------------------------------------------------------
    def _dispatch_next(self) -> bool:
        request = self.core.next_request()
        if request is None:
            return False
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None
        response = Response(self, request)
        self._current = response
        try:
            self._handler(request, response)
        except Exception as exc:  # a handler bug must cost one request, never the server
            log.exception("handler failed on %s %s", request.method, request.path)
            if not response.finished and response.framing is None:
                response.send_json(500, error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error"))
        return True

    def _reject(self, status: int, message: str) -> None:
        """Answer a request we could not parse or accept, then close: its framing can no longer be trusted."""
        if self.closed:
            return
        if self._current is None:  # never interleave with a response in flight
            body = json.dumps(error_body(message, "invalid_request_error")).encode()
            self.write(self.core.rejection_head(status, "application/json", len(body)) + body)
        self._close()

    def _close(self) -> None:
        if self._transport is not None and not self.closed:
            self.closed = True
            self._transport.close()

    def _arm_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
        loop = asyncio.get_running_loop()
        self._request_timer = loop.call_later(self.limits.request_timeout_s, self._close)


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


def bound_port(server: asyncio.Server | None) -> int:
    """The port a started server listens on (port 0 asks the kernel for one)."""
    assert server is not None, "start() first"
    return int(server.sockets[0].getsockname()[1])


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error shape, which OpenAI clients turn into a readable exception."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
