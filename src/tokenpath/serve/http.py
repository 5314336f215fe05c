"""The asyncio shell around wire.server.ServerConnection: requests in, responses written by a handler. The stub and
the gateway both serve through it.

On asyncio protocols (not aiohttp/uvicorn) because the stub must decide the exact bytes and the exact moment of
every write (one SSE frame = one chunk = one `transport.write`, timestamped), and the gateway must write each
upstream read downstream at once, with backpressure, and see a client leave the moment it does. Parsing, framing
and limits are the core's; this module only moves bytes, runs the header timer and calls the handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any, cast

from tokenpath.errors import RemoteProtocolError, UsageError
from tokenpath.serve.admission import Admission, Admitted, BodyBudget, BodyCharge, Refusal
from tokenpath.serve.timerwheel import TimerWheel, WheelTimer, loop_wheel
from tokenpath.wire.apis import Api
from tokenpath.wire.apispec import ErrorReply
from tokenpath.wire.errorshape import error_reply
from tokenpath.wire.framing import Framing, frame_body
from tokenpath.wire.limits import LISTEN_BACKLOG, ServerLimits
from tokenpath.wire.server import END_OF_MESSAGE, Request, ResponseStart, ServerConnection

__all__ = ["HTTPConnection", "Handler", "Request", "Response", "bound_port", "listen"]

log = logging.getLogger(__name__)

Handler = Callable[[Request, "Response"], None]
# Body bytes of queued (pipelined) requests held while a response runs; past this the socket is not read until the
# running response ends, so a client cannot queue 16 large bodies behind a stream.
PIPELINE_BUFFER_BYTES = 64 << 10
# After refusing a request whose body has not arrived, the connection is half-closed and what the client still
# sends is read and dropped for this long (or this many bytes): closing at once with unread bytes would send a
# reset that can destroy the refusal before the client reads it (nginx's lingering_close, same reason).
LINGER_S = 2.0
LINGER_BYTES = 16 << 20
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def reset_transport(transport: asyncio.Transport) -> None:
    """Abort with a reset (SO_LINGER 0): the kernel drops what the socket still holds for the peer, where a plain
    abort's close would keep sending it (a peer that reads nothing holds it for minutes)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def compact_json(obj: Any) -> bytes:
    """JSON as every answer of send_json is encoded (no spaces): what an answer written in pieces must match."""
    return json.dumps(obj, separators=(",", ":")).encode()


class Response:
    """Writes one response through the connection's core. HTTP/1.1 streams are chunked; an HTTP/1.0 client gets
    a close-delimited body."""

    def __init__(self, conn: HTTPConnection, request: Request) -> None:
        self._conn = conn
        self._init_state(request)

    def _init_state(self, request: Request) -> None:
        """The state every response keeps, whatever carries it (an HTTP/2 stream's too: serve/h2.py)."""
        self.request = request
        self.on_abort: Callable[[], None] | None = None  # called if the client goes away mid-response
        self.on_pause: Callable[[], None] | None = None  # the client's socket buffer is full: stop producing
        self.on_resume: Callable[[], None] | None = None
        self.finished = False
        self.framing: Framing | None = None  # decided by the core when the head is made
        self.context: Any = None  # what the handler's admit() returned for this request
        self.release: Callable[[], None] | None = None  # Admitted.release: called once, when the response ends
        self.charge: BodyCharge | None = None  # the request body's bytes held against the handler's BodyBudget

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
        body = compact_json(obj)
        self.send(status, [("Content-Type", "application/json"), *(headers or [])], body)

    def send_error(self, reply: ErrorReply, headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()) -> None:
        """An error answered in an API format's own shape (wire/errorshape.py)."""
        self.send(reply.status, [*reply.headers, *headers], reply.body)

    def start_stream(self, status: int, headers: list[tuple[str, str]], *, http10_chunked: bool = False) -> bytes:
        """Returns the encoded head of a streamed body; the caller writes it (alone or with the first frame).
        `http10_chunked`: chunked to an HTTP/1.0 client too (an origin behaviour the stub reproduces)."""
        if not http10_chunked:
            return self.start(status, headers, None)
        head = self._conn.core.send(ResponseStart(status, headers, None, http10_chunked=True))
        self.framing = self._conn.core.framing
        return head

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

    def switch_protocols(self, head: bytes, protocol: asyncio.Protocol) -> None:
        """Answer an upgrade offer the core let through (ServerLimits.upgrades) with `head` (a 101) and hand the
        connection to `protocol`: it gets the transport, the bytes that followed the offer, and everything after."""
        self._conn.switch(head, protocol)
        self.finished = True
        self.release_admission()

    def close_connection(self) -> None:
        """End the response by closing (a close-delimited body, or one that cannot be finished properly)."""
        self._conn.core.keep_alive = False
        self._finish()

    def abort_connection(self) -> None:
        """Drop the client now, with what is still queued for it: for a client that stopped reading, which a close
        would wait on for ever. The connection's loss then ends the response (on_abort)."""
        self._conn.reset()

    @property
    def writing_paused(self) -> bool:
        """The client's buffer is full now: a producer that starts (a pipelined response) waits for on_resume."""
        return self._conn.write_paused

    def write(self, wire_bytes: bytes, last: bool = False) -> None:
        """Pre-framed bytes (the fast path: one frame, one write). With `last`, the bytes include the end of the
        body and the response is over."""
        conn = self._conn  # HttpProtocol.write, inlined: once per relayed read
        if not conn.closed and conn._transport is not None:
            conn._transport.write(wire_bytes)
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
            self.release_admission()
            self._done()

    def _done(self) -> None:
        """Tells the carrier the response is over (here: the connection may answer its next request)."""
        self._conn.response_done(self)

    def release_admission(self) -> None:
        """Give back what admission reserved for this request and the bytes its body holds (once; the connection
        calls it when the response ends or the client leaves; a handler that is done with the body earlier, as the
        gateway once the client has the response head, calls it then and drops the body)."""
        release, self.release = self.release, None
        if release is not None:
            release()
        charge, self.charge = self.charge, None
        if charge is not None:
            charge.release()


class HTTPConnection(asyncio.Protocol):
    def __init__(self, handler: Handler, limits: ServerLimits) -> None:
        self._handler = handler
        self._admit: Callable[[Request], Admission | Awaitable[Admission]] | None = getattr(handler, "admit", None)
        self._budget: BodyBudget | None = getattr(handler, "body_budget", None)
        self._error_api: Callable[[str], Api | None] | None = getattr(handler, "error_api", None)
        self._wheel: TimerWheel | None = getattr(handler, "timer_wheel", None)  # else the loop's (loop_wheel)
        self.limits = limits
        self.core = ServerConnection(limits)
        self._transport: asyncio.Transport | None = None
        self._current: Response | None = None
        self._request_timer: WheelTimer | None = None
        self._admitted_seq = 0  # the request whose head was accepted (its body may still be arriving)
        self._admitted: Admitted | None = None
        self._charge: BodyCharge | None = None  # the admitted request's body bytes, held against the budget
        self._admitting = False  # an admission is being awaited: the socket is not read
        self._reading = True
        self.write_paused = False  # the transport's buffer is over its high-water mark (pause_writing, not resumed)
        self._error: RemoteProtocolError | None = None  # written once the requests queued before it are answered
        self._lingering = -1  # bytes dropped after a refusal; -1 while not lingering
        self._upgraded: asyncio.Protocol | None = None  # the protocol the connection was switched to (a 101)
        self.closed = False

    # asyncio protocol -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        peername = transport.get_extra_info("peername")
        self.core.peer = str(peername[0]) if isinstance(peername, tuple) else ""
        # TCP_NODELAY is the loop's: uvloop and asyncio set it on every TCP transport (tests/serve/test_nodelay.py),
        # so no socket object per connection (a dup's getsockname calls) and no second setsockopt.
        self._transport.set_write_buffer_limits(high=self.limits.write_buffer_high)
        self._arm_request_timer()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self._upgraded is not None:
            self._upgraded.pause_writing()
        elif self._current is not None and self._current.on_pause is not None:
            self._current.on_pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._upgraded is not None:
            self._upgraded.resume_writing()
        elif self._current is not None and self._current.on_resume is not None:
            self._current.on_resume()

    def data_received(self, data: bytes) -> None:
        if self._upgraded is not None:
            self._upgraded.data_received(data)
            return
        if self._lingering >= 0:
            self._lingering += len(data)
            if self._lingering > LINGER_BYTES:
                self._abort()
            return
        if self.closed:
            return
        try:
            self.core.receive_data(data)
        except RemoteProtocolError as exc:
            self._error = exc
        if self._charge is not None and not self._charge_body():
            return
        self._advance()

    def eof_received(self) -> bool | None:
        return None  # the client is gone: close, which aborts any running response

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._upgraded is not None:
            self._upgraded.connection_lost(exc)
            self._let_go()
            return
        self._cancel_request_timer()
        current, self._current = self._current, None
        if current is not None and not current.finished and current.on_abort is not None:
            current.on_abort()
        if current is not None:
            current.release_admission()
        self._abandon_admitted()
        self._let_go()

    def _let_go(self) -> None:
        """The connection is gone. The transport refers to this protocol and this to it, as the core to its parser:
        both cycles cut, so the connection and what it served are freed by reference counting now, not by the
        cyclic collector (wire/framing.py NO_CALLBACKS)."""
        self._transport = None
        self.core.detach()

    # used by Response -------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    def switch(self, head: bytes, protocol: asyncio.Protocol) -> None:
        """The rest of the connection is `protocol`'s (see Response.switch_protocols)."""
        if self.closed or self._transport is None:
            return
        self._cancel_request_timer()
        self._current = None
        self._upgraded = protocol
        self._transport.write(head)
        protocol.connection_made(self._transport)
        after = self.core.take_after_upgrade()
        self._set_reading(True)
        if after:
            protocol.data_received(after)

    def response_done(self, response: Response) -> None:
        if response is not self._current:
            return
        self._current = None
        if not self.core.keep_alive and self._error is None:
            self._close()
        else:
            self._advance()
            if self._current is None and not self.closed:
                self._arm_request_timer()

    # internals --------------------------------------------------------------------------------------
    def _advance(self) -> None:
        """Admit and dispatch what the core has, in order; then decide whether to keep reading."""
        core = self.core
        while self._current is None and not self._admitting and not self.closed:
            head = core.next_head()
            if head is None:
                if self._error is not None:
                    self._reject(self._error.status_hint, str(self._error))
                    return
                break
            if head.seq != self._admitted_seq and not self._admit_head(head):
                return
            request = core.next_request()
            if request is None:
                break  # admitted; its body is still arriving
            self._dispatch(request)
        if self.closed:
            return
        waiting = self._admitting or (self._current is not None and core.buffered_bytes > PIPELINE_BUFFER_BYTES)
        self._set_reading(not waiting and self._error is None)

    def _admit_head(self, head: Request) -> bool:
        """Decide on a request by its head. Returns False while the decision is awaited or the request was
        refused and the connection is closing."""
        admission: Admission | Awaitable[Admission] = Admitted() if self._admit is None else self._admit(head)
        if not isinstance(admission, (Admitted, Refusal)):
            self._admitting = True
            self._set_reading(False)
            task = asyncio.ensure_future(admission)
            task.add_done_callback(lambda t: self._admission_done(head, t))
            return False
        return self._apply_admission(head, admission)

    def _admission_done(self, head: Request, task: asyncio.Future[Admission]) -> None:
        self._admitting = False
        if self.closed:
            if not task.cancelled() and task.exception() is None:
                _release(task.result())  # admitted after the client left
            return
        if task.cancelled() or task.exception() is not None:
            if not task.cancelled():
                log.error("admission of %s %s failed", head.method, head.path, exc_info=task.exception())
            admission: Admission = Refusal(500, "internal error while admitting the request", "internal_error")
        else:
            admission = task.result()
        if self._apply_admission(head, admission):
            self._advance()

    def _apply_admission(self, head: Request, admission: Admission) -> bool:
        """Returns True when the caller may dispatch the admitted request (or wait for its body)."""
        if isinstance(admission, Admitted):
            self._admitted_seq = head.seq
            self._admitted = admission
            if self._budget is not None:
                self._charge = self._budget.charge()
                if not self._charge_body():
                    return False
            if head.expects_continue and self.core.body_not_started(head):
                self.write(CONTINUE)  # the client holds its body until told to send it
            return True
        request = self.core.next_request()
        if request is not None:  # the whole request is in: answer it and keep the connection
            assert request.seq == head.seq
            response = Response(self, request)
            self._current = response
            reply = error_reply(admission.api, admission.status, admission.message, admission.code)
            response.send_error(reply, admission.headers)  # response_done advances
            return False
        # The body has not arrived (or not all of it): answer now, without reading it, and close.
        self._reject(admission.status, admission.message, admission.code, admission.headers, admission.api)
        return False

    def _charge_body(self) -> bool:
        """Hold the admitted request's body bytes read so far against the handler's budget. Past it, that request is
        refused (its own bytes crossed it; a request that sent nothing costs nothing): False."""
        charge = self._charge
        assert charge is not None
        size = self.core.body_bytes(self._admitted_seq)
        if size <= charge.held or charge.take(size - charge.held):
            return True
        assert self._budget is not None
        refusal = self._budget.refusal
        head = self.core.next_head()
        self._abandon_admitted()
        if head is not None and head.seq == self._admitted_seq:
            self._apply_admission(head, refusal)
        else:
            self._reject(refusal.status, refusal.message, refusal.code, refusal.headers, refusal.api)
        return False

    def _dispatch(self, request: Request) -> None:
        self._cancel_request_timer()
        response = Response(self, request)
        admitted, self._admitted = self._admitted, None
        charge, self._charge = self._charge, None
        if admitted is not None and self._admitted_seq == request.seq:
            response.context = admitted.context
            response.release = admitted.release
            response.charge = charge
        else:
            _release(admitted)  # admitted for another request: never leave its reservation held
            if charge is not None:
                charge.release()
        self._current = response
        try:
            self._handler(request, response)
        except Exception:  # a handler bug must cost one request, never the server
            log.exception("handler failed on %s %s", request.method, request.path)
            if not response.finished and response.framing is None:
                response.send_error(self._error_reply(request.path, 500, "internal server error", None))  # the log

    def _reject(
        self,
        status: int,
        message: str,
        code: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
        api: Api | None = None,
    ) -> None:
        """Answer a request we could not parse or will not accept, then close: unread bytes of it (and its
        framing) can no longer be trusted. Only between responses, never interleaved with one. The error is in the
        shape of the API the request's path is (`api`, else the handler's error_api), when its path is known."""
        if self.closed or self._current is not None:
            return
        self._abandon_admitted()  # an admitted request whose body broke a limit never reaches the handler
        if api is not None:
            reply = error_reply(api, status, message, code)
        else:
            reply = self._error_reply(self.core.failed_path, status, message, code)
        head = self.core.rejection_head(status, reply.headers, len(reply.body), headers)
        self.write(head + reply.body)
        self._linger()

    def _error_reply(self, path: str | None, status: int, message: str, code: str | None) -> ErrorReply:
        api = self._error_api(path) if path is not None and self._error_api is not None else None
        return error_reply(api, status, message, code)

    def _abandon_admitted(self) -> None:
        """The request admitted on its head will never reach the handler: give back what admission reserved and
        what its body held."""
        admitted, self._admitted = self._admitted, None
        _release(admitted)
        charge, self._charge = self._charge, None
        if charge is not None:
            charge.release()

    def _linger(self) -> None:
        """Half-close, then drop what the client still sends for a bounded time (see LINGER_S)."""
        transport = self._transport
        if transport is None or self.closed:
            return
        self.closed = True
        self._cancel_request_timer()
        if not transport.can_write_eof():
            transport.close()
            return
        self._lingering = 0
        transport.write_eof()
        self._set_reading(True)
        asyncio.get_running_loop().call_later(LINGER_S, self._abort)

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def reset(self) -> None:
        if self._transport is not None:
            reset_transport(self._transport)

    def _set_reading(self, on: bool) -> None:
        if on == self._reading or self._transport is None:
            return
        self._reading = on
        if on:
            self._transport.resume_reading()
        else:
            self._transport.pause_reading()

    def _close(self) -> None:
        if self._transport is not None and not self.closed:
            self.closed = True
            self._transport.close()

    def _arm_request_timer(self) -> None:
        """The head timer: the next request's head and body are due within request_timeout_s (also the keep-alive
        idle time), on the worker's timer wheel (within its resolution after that, never before)."""
        wheel = self._wheel
        if wheel is None:
            wheel = self._wheel = loop_wheel()
        if self._request_timer is not None:
            wheel.cancel(self._request_timer)
        self._request_timer = wheel.arm(wheel.clock() + self.limits.request_timeout_s, self._timed_out)

    def _cancel_request_timer(self) -> None:
        timer, self._request_timer = self._request_timer, None
        if timer is not None and self._wheel is not None:
            self._wheel.cancel(timer)

    def _timed_out(self, _: object) -> None:
        self._request_timer = None
        self._close()


def _release(admission: Admission | None) -> None:
    if isinstance(admission, Admitted) and admission.release is not None:
        admission.release()


async def listen(
    factory: Callable[[], asyncio.Protocol],
    host: str,
    port: int,
    sock: socket.socket | None = None,
    ssl_context: ssl.SSLContext | None = None,
    handshake_timeout_s: float | None = None,
) -> asyncio.Server:
    """Serve connections on `sock` (a SO_REUSEPORT worker's, already bound) or on host:port, over TLS with
    `ssl_context`, whose handshake must end within `handshake_timeout_s` (a server's head timeout: asyncio's own
    default, 60 s, let 300 connections that sent nothing after the TCP handshake hold their sockets six times longer
    than a slow head may). A port that cannot be bound is the user's problem to fix, so it is a UsageError with the
    reason, not a traceback."""
    loop = asyncio.get_running_loop()
    tls: dict[str, Any] = {}
    if ssl_context is not None:
        tls = {"ssl": ssl_context, "ssl_handshake_timeout": handshake_timeout_s}
    try:
        if sock is not None:
            return await loop.create_server(factory, sock=sock, backlog=LISTEN_BACKLOG, **tls)
        return await loop.create_server(factory, host, port, backlog=LISTEN_BACKLOG, reuse_address=True, **tls)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def bound_port(server: asyncio.Server | None) -> int:
    """The port a started server listens on (port 0 asks the kernel for one)."""
    assert server is not None, "start() first"
    return int(server.sockets[0].getsockname()[1])
