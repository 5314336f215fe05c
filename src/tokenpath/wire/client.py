"""The client side of an HTTP/1.1 connection, sans-IO (h11's shape; httptools/llhttp is the engine inside, as in
uvicorn's httptools_impl).

    conn.start_response("POST")      # a request went out: expect its response
    conn.receive_data(read)          # raises RemoteProtocolError on bytes that are not HTTP
    while (event := conn.next_event()) is not None: ...   # ResponseHead, Data, EndOfMessage
    conn.receive_eof()               # the peer closed: ends a close-delimited body, else raises

Nothing here touches a socket or a clock, so the blocking probe, the asyncio load client, the gateway's upstream
side and the control clients parse responses the same way, and the conformance battery can feed it byte by byte.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import httptools

from tokenpath.errors import ProtocolViolation, RemoteProtocolError, ResponseTooLarge
from tokenpath.wire.framing import NO_CALLBACKS, Framing, find_header, received_framing


@dataclass(frozen=True, slots=True)
class ResponseHead:
    status: int
    http_version: str
    headers: tuple[tuple[str, str], ...]
    framing: Framing
    keep_alive: bool  # the server will take another request on this connection after this response

    def header(self, name: str) -> str | None:
        return find_header(self.headers, name)

    @property
    def content_type(self) -> str:
        return (self.header("content-type") or "").split(";", 1)[0].strip().lower()

    @property
    def close_delimited(self) -> bool:
        return self.framing is Framing.CLOSE


@dataclass(frozen=True, slots=True)
class Data:
    data: bytes  # de-framed body bytes


@dataclass(frozen=True, slots=True)
class EndOfMessage:
    pass


END_OF_MESSAGE = EndOfMessage()
ResponseEvent = ResponseHead | Data | EndOfMessage


# What the feed ClientConnection.body_feed hands out raises on bytes that break HTTP (parse_failed says what it means).
ParseError = httptools.HttpParserError
UPGRADE_REFUSED = "the server answered 101 Switching Protocols to a request that did not ask for an upgrade"
# A response head larger than this is refused: real ones are well under 8 KiB, and a peer streaming header lines
# forever must not grow a reader's memory.
MAX_RESPONSE_HEAD_BYTES = 64 << 10


class State(Enum):
    IDLE = "idle"  # no request outstanding: bytes from the server now are a protocol violation
    WAITING = "waiting"  # a request went out; its response has not ended
    DONE = "done"  # the response ended; later bytes are not ours to interpret
    ERROR = "error"


class ClientConnection:
    """Events by default. A relay or reader on a hot path may instead pass callables for any kind (`on_head`,
    `on_body`, `on_end`): each is then called in stream order as llhttp finds it, inside `receive_data` /
    `receive_eof`, with no object per read. Kinds without a callable stay events (`pending` says if any wait).

    `direct_body`: llhttp calls `on_body` itself, one Python call less per read. It then also hands over the body
    bytes of anything that follows the response's end in the same read (a second response): the caller drops what
    came after `on_end` (load/lean.py does)."""

    def __init__(
        self,
        method: str | None = None,
        *,
        on_head: Callable[[ResponseHead], object] | None = None,
        on_body: Callable[[bytes], object] | None = None,
        on_end: Callable[[], object] | None = None,
        max_head_bytes: int = MAX_RESPONSE_HEAD_BYTES,
        direct_body: bool = False,
    ) -> None:
        self.state = State.IDLE
        self.max_head_bytes = max_head_bytes
        self._head_bytes = 0
        self.head: ResponseHead | None = None
        self._on_head = on_head
        self._on_body = on_body
        self._on_end = on_end
        if direct_body and on_body is not None:
            # httptools looks its callbacks up on this object when a parser is made: the instance's wins.
            self.on_body = on_body  # type: ignore[method-assign,assignment]
        self._waiting = False  # == (state is WAITING), as a plain bool for the per-read callbacks
        self._events: deque[ResponseEvent] = deque()
        self._method = "GET"
        self._upgraded = False
        self._headers: list[tuple[str, str]] = []
        if method is not None:
            self.start_response(method)  # which makes the parser (one per response: one here, not two)
        else:
            self._parser = httptools.HttpResponseParser(self)

    @property
    def complete(self) -> bool:
        return self.state is State.DONE

    @property
    def reusable(self) -> bool:
        """The response ended cleanly and the server keeps the connection open for another request."""
        return self.state is State.DONE and self.head is not None and self.head.keep_alive

    def start_response(self, method: str, on_body: Callable[[bytes], object] | None = None) -> None:
        """A request with `method` was sent: read its response (HEAD responses carry no body). `on_body`: this
        response's body callable, in place of the one given at construction (a relay hands its sink's own method,
        looked up once per response: no forwarding call per read)."""
        if on_body is not None:
            self._on_body = on_body
        self.state = State.WAITING
        self._waiting = True
        self.head = None
        self._method = method
        self._headers = []
        self._head_bytes = 0
        self._events.clear()
        self._parser = httptools.HttpResponseParser(self)

    def detach(self) -> None:
        """The core is done (its connection reused with a new core, or closed): the parser lets go of it
        (wire/framing.py NO_CALLBACKS), so reference counting frees both, and what its callbacks refer to (the
        exchange that read the response). Nothing is parsed after this."""
        self._parser = httptools.HttpResponseParser(NO_CALLBACKS)
        self._waiting = False  # a read that still comes is not interpreted (see receive_data)
        # Nor does it refer to whoever read through it (their callbacks refer back: the load client's recorder).
        self._on_head = self._on_body = self._on_end = None
        self.__dict__.pop("on_body", None)  # direct_body's instance callable

    def receive_data(self, data: bytes) -> None:
        if not self._waiting:
            if self.state is State.IDLE and data:
                self._set(State.ERROR)
                raise ProtocolViolation("the server sent bytes while no request was outstanding")
            return  # after the response (or after an error): not ours to interpret
        if self.head is None:
            self._head_bytes += len(data)  # bytes read while the head is incomplete (interim heads included)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # a 101 is refused in on_headers_complete; this is llhttp stopping after it
        except httptools.HttpParserError as exc:
            raise self.parse_failed(exc) from None
        if self._upgraded:
            raise ProtocolViolation(UPGRADE_REFUSED)
        if self.head is None and self._head_bytes > self.max_head_bytes:
            self._set(State.ERROR)
            raise ResponseTooLarge(f"response head larger than {self.max_head_bytes} bytes")

    def body_feed(self) -> Callable[[bytes], None] | None:
        """The parser's own feed, for a reader whose per-read call is the cost (the load client): while the response's
        body streams (its head in, its end not yet) `body_feed()(read)` is `receive_data(read)`, less the checks
        that only the head or the time after the end need. Valid until the response ends (`on_end`) or the core
        is detached or cancelled: the caller drops it then and goes back to `receive_data`. An
        httptools.HttpParserError it raises goes through `parse_failed`, as receive_data's do. None when the body
        is not streaming now."""
        if not self._waiting or self.head is None or self._upgraded:
            return None
        return self._parser.feed_data

    def parse_failed(self, exc: ParseError) -> Exception:
        """What llhttp's error on a read means, to raise in its place (from None): the core is in ERROR then."""
        self._set(State.ERROR)
        if self._upgraded:  # llhttp pauses after a 101's head; on_headers_complete marked it
            return ProtocolViolation(UPGRADE_REFUSED)
        context = exc.__context__
        if isinstance(context, RemoteProtocolError):  # raised by one of our callbacks
            return context
        if isinstance(exc, httptools.HttpParserCallbackError) and isinstance(context, Exception):
            return context  # a callback's own bug (on_head, on_body, on_end): never the peer's
        where = "body" if self.head else "status line or headers"
        return ProtocolViolation(f"malformed HTTP response {where}: {exc}")

    def cancel(self) -> None:
        """Stop reading the outstanding response (its reader dropped the connection): later bytes, even the rest of
        the read being parsed now, reach no callable."""
        self._set(State.ERROR)

    def receive_eof(self) -> None:
        """The connection closed. Raises RemoteProtocolError if that cut the response short."""
        if not self._waiting:
            return
        if self.head is None:
            self._set(State.ERROR)
            raise RemoteProtocolError("connection closed before the response headers were complete")
        if self.head.framing is Framing.CLOSE:
            self._end()
            return
        self._set(State.ERROR)
        framing = "chunked body" if self.head.framing is Framing.CHUNKED else "Content-Length body"
        raise RemoteProtocolError(f"connection closed in the middle of the {framing}")

    def next_event(self) -> ResponseEvent | None:
        return self._events.popleft() if self._events else None

    @property
    def pending(self) -> bool:
        return bool(self._events)

    # httptools callbacks ------------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        headers, self._headers = self._headers, []
        if status == 101:  # we never ask to upgrade; the bytes that follow are not HTTP
            self._set(State.ERROR)
            self._upgraded = True
            return
        if 100 <= status < 200:
            return  # an interim response (100 Continue): the real head follows
        framing = received_framing(self._method, status, headers)
        # A HEAD response's connection is not reused: its Content-Length describes a body that is not sent, and
        # a server that sends one anyway would have it read as the next response.
        keep_alive = self._parser.should_keep_alive() and self._method != "HEAD"
        self.head = ResponseHead(status, self._parser.get_http_version(), tuple(headers), framing, keep_alive)
        if self._on_head is not None:
            self._on_head(self.head)
        else:
            self._events.append(self.head)
        if framing is Framing.NONE:
            # llhttp is not told the request's method, so it would wait for a HEAD response's body: end it here.
            self._end()

    def on_body(self, body: bytes) -> None:
        if self._waiting:
            if self._on_body is not None:
                self._on_body(body)
            else:
                self._events.append(Data(body))

    def on_message_complete(self) -> None:
        if self.head is not None and self._waiting:
            self._end()

    def _end(self) -> None:
        self._set(State.DONE)
        if self._on_end is not None:
            self._on_end()
        else:
            self._events.append(END_OF_MESSAGE)

    def _set(self, state: State) -> None:
        self.state = state
        self._waiting = state is State.WAITING


class ResponseParser:
    """The client core for readers that want a response's body per read, not events: `feed(read) -> body`."""

    def __init__(self, method: str = "GET") -> None:
        self._body: list[bytes] = []
        self._conn = ClientConnection(method, on_body=self._body.append)

    @property
    def head(self) -> ResponseHead | None:
        return self._conn.head

    @property
    def complete(self) -> bool:
        return self._conn.complete

    def feed(self, data: bytes) -> bytes:
        conn = self._conn
        conn.receive_data(data)
        while conn.pending:  # the head and the end are read from the connection's state
            conn.next_event()
        body = self._body
        if not body:
            return b""
        out = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        return out

    def feed_eof(self) -> None:
        """The connection closed. Raises RemoteProtocolError if that cut the response short."""
        self._conn.receive_eof()
