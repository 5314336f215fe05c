"""The server side of an HTTP/1.1 connection, sans-IO (h11's shape; httptools/llhttp inside).

    conn.receive_data(read)            # raises RemoteProtocolError(status_hint=400/405/413/431/429)
    head = conn.next_head()            # the next request to answer, as soon as its head is in (body maybe not)
    request = conn.next_request()      # the next complete request, once the previous response is done
    conn.send(ResponseStart(...))      # -> head bytes; the framing is decided here (wire.framing)
    conn.send(Data(b"..."))            # -> framed body bytes
    conn.send(END_OF_MESSAGE)          # -> last chunk; the connection's keep-alive is now decided

Writers that keep their body pre-framed (the stub's cached frames, already chunked when `framing` says so) write
those bytes themselves and only `send` the start and end: one frame stays one write. Limits (head size, body
size, pipelining) live in wire.limits and are enforced here once for every server in the package.

`next_head()` lets a server decide on a request before its body is read (authenticate, refuse, send 100 Continue):
a body nobody will use is then never buffered. After a protocol error the requests already complete stay queued,
so a server answers them in order before it writes the error; nothing after the error is parsed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import InitVar, dataclass, field, replace

import httptools

from tokenpath.errors import LocalProtocolError, RemoteProtocolError
from tokenpath.wire.client import END_OF_MESSAGE, Data, EndOfMessage
from tokenpath.wire.framing import (
    NO_CALLBACKS,
    Framing,
    end_of_body,
    find_header,
    frame_body,
    framing_headers,
    response_head,
    sent_framing,
)
from tokenpath.wire.limits import ServerLimits

__all__ = ["END_OF_MESSAGE", "Data", "EndOfMessage", "Request", "ResponseStart", "ServerConnection"]


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    path: str
    query: str
    http_version: str
    keep_alive: bool
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    peer: str = ""  # the client's address (empty on a Unix socket)
    seq: int = 0  # 1, 2, ... per connection: tells a head-only view and the complete request apart from others
    # The header names lowercased, in the headers' order: made once, by the parser that reads them (handed in as
    # `lowered`), so a lookup is a search of these (in C) rather than a lower() of every name for every lookup (an SDK
    # sends ~17 headers). Only the parser hands them in: any other construction, `dataclasses.replace` included (it
    # does not pass an InitVar on), makes them from the headers, so they cannot belong to other headers.
    names: tuple[str, ...] = field(init=False, compare=False, repr=False)
    lowered: InitVar[tuple[str, ...] | None] = None

    def __post_init__(self, lowered: tuple[str, ...] | None) -> None:
        object.__setattr__(self, "names", tuple(k.lower() for k, _ in self.headers) if lowered is None else lowered)

    @property
    def expects_continue(self) -> bool:
        """The client waits for `100 Continue` before it sends the body (HTTP/1.1 only)."""
        expect = self.header("expect")
        return self.http_version == "1.1" and expect is not None and expect.lower() == "100-continue"

    def header(self, name: str) -> str | None:
        """The first value of a header, case-insensitively (HTTP field names are)."""
        lname = name.lower()
        names = self.names
        return self.headers[names.index(lname)][1] if lname in names else None

    def without_body(self) -> Request:
        """The same request, its body let go of. `dataclasses.replace(self, body=b"")` spelled out: replace walks
        the fields and their init flags on every call, twice per proxied request (tests/wire/test_conformance.py holds
        the two equal, so a field added here and not there fails)."""
        return Request(
            self.method, self.target, self.path, self.query, self.http_version, self.keep_alive, self.headers, b"",
            self.peer, self.seq, self.names,  # the same headers: their names as they are
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ResponseStart:
    status: int
    headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()
    content_length: int | None = None  # None: the body is streamed (chunked, or close-delimited for HTTP/1.0)
    has_body: bool = True  # False: HEAD-style, the headers describe a body that is not sent (no framing added)
    http10_chunked: bool = False  # a streamed body chunked to an HTTP/1.0 client too (wire.framing.sent_framing)


class ServerConnection:
    def __init__(self, limits: ServerLimits, peer: str = "") -> None:
        self.limits = limits
        self.peer = peer
        self.keep_alive = True  # false once a response (or the client) ended the connection's reuse
        self.framing: Framing | None = None  # of the response being written; None between responses
        self._pending: deque[Request] = deque()
        self._current: Request | None = None
        self._incoming: Request | None = None  # the head of the request whose body is being received
        self._parser = httptools.HttpRequestParser(self)
        self._failed = False
        self._skipped_framing: bytes | None = None  # the framing of an upgrade offer's body llhttp skipped
        self._replaying = False  # feeding the fresh parser the head that resumes that body (callbacks ignored)
        self._offered: str | None = None  # the protocol the request being parsed offers (one of limits.upgrades)
        self.upgrading = False  # an offer of limits.upgrades was parsed: what follows it is not HTTP
        self._after_upgrade = bytearray()  # bytes that followed that offer, for whoever takes the connection over
        self._seq = 0
        self._failed_path: str | None = None
        self._pending_body_bytes = 0
        self._headers: list[tuple[str, str]] = []
        self._names: list[str] = []  # the header names lowercased (see Request.names)
        self._reset_message()

    # input -------------------------------------------------------------------------------------------
    def detach(self) -> None:
        """The connection is over: the parser lets go of this core (wire/framing.py NO_CALLBACKS), so reference
        counting frees both. Nothing is parsed after this."""
        self._parser = httptools.HttpRequestParser(NO_CALLBACKS)

    def receive_data(self, data: bytes) -> None:
        if self._failed:
            return
        if self.upgrading:
            self._hold_after_upgrade(data)
            return
        if not self._headers_done:
            self._head_bytes += len(data)
        upgraded_at = -1
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            upgraded_at = int(exc.args[0]) if exc.args else len(data)
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # a limit one of our callbacks raised, or llhttp's own complaint
            self._fail(
                cause
                if isinstance(cause, RemoteProtocolError)
                else RemoteProtocolError(f"malformed HTTP request: {exc}", 400)
            )
        if upgraded_at >= 0 and self._upgrade_taken():
            self._hold_after_upgrade(data[upgraded_at:])
            return
        if upgraded_at >= 0:
            # llhttp stops after the head of a request that asked to upgrade (httptools tells it to skip the
            # body). Other upgrades were refused in on_headers_complete; an h2c offer is ignored (RFC 9113 3.1
            # lets a server answer in HTTP/1.1), so parsing goes on with a fresh parser from where llhttp stopped:
            # first through the skipped body, framed by the request's own headers, never as a next request.
            # (Outside the except clause: a limit raised in there would be chained to the upgrade, not reported.)
            self._parser = httptools.HttpRequestParser(self)
            if self._skipped_framing is not None:
                self._resume_body(self._skipped_framing)
            if upgraded_at < len(data):
                self.receive_data(data[upgraded_at:])
            return
        if not self._headers_done and self._head_bytes > self.limits.max_head_bytes:
            self._fail(RemoteProtocolError(f"request head larger than {self.limits.max_head_bytes} bytes", 431))

    def _upgrade_taken(self) -> bool:
        return self.upgrading  # (a call: read after feed_data, whose callbacks may have set it)

    def take_after_upgrade(self) -> bytes:
        """The bytes that followed an accepted upgrade offer (the handler switched protocols): its protocol's."""
        data = bytes(self._after_upgrade)
        self._after_upgrade.clear()
        return data

    def _hold_after_upgrade(self, data: bytes) -> None:
        self._after_upgrade += data
        if len(self._after_upgrade) > self.limits.max_head_bytes:
            # A client that sends more than a head's worth before the answer to its offer is not waiting for it.
            self._fail(RemoteProtocolError("too many bytes sent before the upgrade was answered", 400))

    def next_head(self) -> Request | None:
        """The next request to answer, once its head is complete: the whole request if it is queued, else a view
        of the one being received (body empty; `seq` tells them apart). None while a response is being written."""
        if self._current is not None:
            return None
        if self._pending:
            return self._pending[0]
        return self._incoming

    @property
    def buffered_bytes(self) -> int:
        """Request body bytes held for requests not yet answered: what a server bounds to bound its memory."""
        return self._pending_body_bytes + self._body_size

    def body_not_started(self, head: Request) -> bool:
        """`head` is the request being received and none of its body has arrived (so `100 Continue` is due)."""
        incoming = self._incoming
        return incoming is not None and incoming.seq == head.seq and self._body_size == 0

    @property
    def failed(self) -> bool:
        return self._failed

    @property
    def failed_path(self) -> str | None:
        """The path of the request a protocol error was raised in, when its request line was read (for the shape of
        its error answer)."""
        return self._failed_path

    def body_bytes(self, seq: int) -> int:
        """Body bytes held for request `seq` so far: what was read of it, or all of it once it is complete."""
        incoming = self._incoming
        if incoming is not None and incoming.seq == seq:
            return self._body_size
        for request in self._pending:
            if request.seq == seq:
                return len(request.body)
        return 0

    def next_request(self) -> Request | None:
        """The next request to answer, or None while a response is being written or none is complete."""
        if self._current is not None or not self._pending:
            return None
        request = self._pending.popleft()
        self._pending_body_bytes -= len(request.body)
        # What send() needs of the request being answered, without its body: the handler decides how long that is
        # held (the gateway drops it once the client has its response head, however long the response runs).
        self._current = request.without_body() if request.body else request
        return request

    # output ------------------------------------------------------------------------------------------
    def send(self, event: ResponseStart | Data | EndOfMessage) -> bytes:
        request = self._current
        if request is None:
            raise LocalProtocolError("send() with no request to answer")
        if type(event) is Data:
            if self.framing is None:
                raise LocalProtocolError("body bytes before the response head")
            return frame_body(self.framing, event.data)
        if type(event) is EndOfMessage:
            if self.framing is None:
                raise LocalProtocolError("end of a response that was never started")
            tail = end_of_body(self.framing)
            self.framing = None
            self._current = None
            return tail
        assert isinstance(event, ResponseStart)
        if self.framing is not None:
            raise LocalProtocolError("a second response head for one request")
        method = request.method if event.has_body else "HEAD"
        framing = sent_framing(
            method, event.status, request.http_version, event.content_length, http10_chunked=event.http10_chunked
        )
        self.framing = framing
        self.keep_alive = self.keep_alive and request.keep_alive and framing is not Framing.CLOSE
        headers = [*event.headers, *framing_headers(framing, event.content_length)]
        return response_head(event.status, headers, keep_alive=self.keep_alive)

    def rejection_head(
        self,
        status: int,
        typed_by: tuple[tuple[str, str], ...],
        body_length: int,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> bytes:
        """The head of the answer to a request that could not be accepted (`typed_by`: its Content-Type and the
        headers its error shape adds); the connection closes after it."""
        self.keep_alive = False
        headers = [*typed_by, ("Content-Length", str(body_length)), *extra]
        return response_head(status, headers, keep_alive=False)

    # httptools callbacks -----------------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        if self._replaying:
            return
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._replaying:
            return
        # _count_head inlined: once per header line, ~17 of them from an SDK
        self._head_size += len(name) + len(value) + 4
        if self._head_size > self.limits.max_head_bytes:
            raise RemoteProtocolError(f"request head larger than {self.limits.max_head_bytes} bytes", 431)
        if self._headers_done:
            return  # a chunked body's trailer fields: never merged into the request's headers
        text = name.decode("latin-1")
        self._headers.append((text, value.decode("latin-1")))
        self._names.append(text.lower())

    def on_headers_complete(self) -> None:
        if self._replaying:
            return
        self._headers_done = True
        method = self._parser.get_method().decode("latin-1")
        version = self._parser.get_http_version()
        if version != "1.1" and version != "1.0":  # llhttp takes `GET /path` with no version as HTTP/0.9
            raise RemoteProtocolError(f"HTTP/{version} is not served: HTTP/1.0 and 1.1 only", 505)
        if method == "CONNECT":
            raise RemoteProtocolError("CONNECT is not supported: this is not a forward proxy", 405)
        names = self._names
        hosts = names.count("host")
        if hosts > 1 or (version == "1.1" and not hosts):
            # RFC 9112 3.2: a server must answer 400 to an HTTP/1.1 request without exactly one Host
            raise RemoteProtocolError(f"{'more than one' if hosts else 'no'} Host header", 400)
        if version in ("1.0", "0.9") and "transfer-encoding" in names:
            # RFC 9112 6.1: the framing of an HTTP/1.0 message with Transfer-Encoding is faulty (nginx: 400)
            raise RemoteProtocolError("Transfer-Encoding in an HTTP/1.0 request", 400)
        if "upgrade" in names:
            kept, self._offered = _upgrade_offer(self._headers, self.limits.upgrades)
            if kept is not self._headers:  # an h2c offer's headers dropped: their names go too
                self._headers = kept
                names = self._names = [k.lower() for k, _ in kept]
            if self._offered is not None and _body_framing(self._headers, True) is not None:
                raise RemoteProtocolError(f"an offer to upgrade to {self._offered} cannot carry a body", 400)
        length = self._headers[names.index("content-length")][1] if "content-length" in names else None
        if length is not None and length.isdigit() and int(length) > self.limits.max_body_bytes:
            raise RemoteProtocolError(f"request body larger than {self.limits.max_body_bytes} bytes", 413)
        if self._parser.should_upgrade():
            # llhttp will skip this body and stop (HttpParserUpgrade): remember its framing to resume it
            self._skipped_framing = _body_framing(self._headers, self._parser.should_keep_alive())
        self._seq += 1
        self._incoming = self._head_view(method, version)

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self.limits.max_body_bytes:
            raise RemoteProtocolError(f"request body larger than {self.limits.max_body_bytes} bytes", 413)
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._skipped_framing is not None:
            return  # llhttp skipped the body of an upgrade offer: the message goes on (see receive_data)
        head = self._incoming
        assert head is not None
        # The head's fields as its view has them (the URL, headers and names parsed once), and the body.
        request = Request(
            head.method, head.target, head.path, head.query, head.http_version, self._parser.should_keep_alive(),
            head.headers, b"".join(self._body), self.peer, head.seq, head.names,
        )  # fmt: skip
        if self._offered is not None:
            # Taken over by the offered protocol, or answered in HTTP and closed: what follows it is not HTTP.
            request = replace(request, keep_alive=False)
            self.upgrading = True
        self._reset_message()
        if len(self._pending) >= self.limits.max_pipelined:
            raise RemoteProtocolError(f"more than {self.limits.max_pipelined} pipelined requests", 429)
        self._pending.append(request)
        self._pending_body_bytes += len(request.body)

    # internals ---------------------------------------------------------------------------------------
    def _head_view(self, method: str, version: str) -> Request:
        """The request as its head says it, its body empty: what next_head() shows while the body arrives, and what
        the complete request is made from."""
        parsed = httptools.parse_url(bytes(self._url))
        return Request(
            method=method,
            target=self._url.decode("latin-1"),
            path=parsed.path.decode("latin-1") if parsed.path else "/",
            query=parsed.query.decode("latin-1") if parsed.query else "",
            http_version=version,
            keep_alive=self._parser.should_keep_alive(),
            headers=tuple(self._headers),
            peer=self.peer,
            seq=self._seq,
            lowered=tuple(self._names),
        )

    def _resume_body(self, framing: bytes) -> None:
        """Put the fresh parser where llhttp stopped: inside the body of the current request. A head that says
        only how the body is framed (replayed silently) makes llhttp parse the bytes that follow as that body,
        chunked or by length, with all its own checks, and complete the current request after it."""
        self._skipped_framing = None
        self._replaying = True
        try:
            self._parser.feed_data(b"POST / HTTP/1.1\r\nHost: -\r\n" + framing + b"\r\n")
        except httptools.HttpParserError as exc:  # a Transfer-Encoding llhttp cannot frame a request body by
            self._fail(RemoteProtocolError(f"malformed HTTP request: {exc}", 400))
        finally:
            self._replaying = False

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.limits.max_head_bytes:
            raise RemoteProtocolError(f"request head larger than {self.limits.max_head_bytes} bytes", 431)

    def _fail(self, exc: RemoteProtocolError) -> None:
        """Nothing more is parsed on this connection: its framing can no longer be trusted. Requests already
        complete stay queued: they were well-formed and are answered before the error."""
        self._failed = True
        self.keep_alive = False
        self._incoming = None
        self._failed_path = _path_of(bytes(self._url))
        raise exc

    def _reset_message(self) -> None:
        self._incoming = None
        self._url = bytearray()
        self._headers = []
        self._names = []
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_bytes = 0  # bytes received while the head was incomplete (catches one endless line)
        self._head_size = 0  # bytes of request line and headers as parsed
        self._headers_done = False
        self._offered = None


def _path_of(url: bytes) -> str | None:
    try:
        path = httptools.parse_url(url).path if url else None
    except httptools.HttpParserInvalidURLError:
        return None
    return path.decode("latin-1") if path else None


def _body_framing(headers: list[tuple[str, str]], keep_alive: bool) -> bytes | None:
    """The header lines that frame a request's body as its own headers do (None: it has no body)."""
    close = b"" if keep_alive else b"Connection: close\r\n"
    codings = [v for k, v in headers if k.lower() == "transfer-encoding"]
    if codings:  # llhttp refused one with Content-Length too; a last coding that is not chunked it refuses next
        return b"Transfer-Encoding: " + ", ".join(codings).encode("latin-1") + b"\r\n" + close
    length = find_header(headers, "content-length") or "0"
    if not length.isdigit() or int(length) == 0:
        return None
    return b"Content-Length: " + length.encode("latin-1") + b"\r\n" + close


def _upgrade_offer(headers: list[tuple[str, str]], allowed: frozenset[str]) -> tuple[list[tuple[str, str]], str | None]:
    """An offer of one of the `allowed` protocols is kept (the handler answers it: its name is returned); an h2c
    upgrade offer (`curl --http2 http://...`) is dropped, with the Connection tokens that name its headers, so the
    request is answered in HTTP/1.1; any other protocol upgrade is refused."""
    upgrade = [v for k, v in headers if k.lower() == "upgrade"]
    if not upgrade:
        return headers, None
    offered = {p.strip().split("/", 1)[0].lower() for v in upgrade for p in v.split(",") if p.strip()}
    if len(offered) == 1 and offered <= allowed:
        return headers, next(iter(offered))
    return _without_upgrade_offer(headers, upgrade, offered), None


def _without_upgrade_offer(
    headers: list[tuple[str, str]], upgrade: list[str], offered: set[str]
) -> list[tuple[str, str]]:
    if offered != {"h2c"}:
        raise RemoteProtocolError(f"protocol upgrade to {', '.join(upgrade)} is not supported", 400)
    drop = {"upgrade", "http2-settings"}
    kept = []
    for name, value in headers:
        lname = name.lower()
        if lname in drop:
            continue
        if lname == "connection":
            tokens = [t.strip() for t in value.split(",") if t.strip().lower() not in drop and t.strip()]
            if not tokens:
                continue
            value = ", ".join(tokens)
        kept.append((name, value))
    return kept
