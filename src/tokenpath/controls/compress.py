"""The compressing controls: an HTTP-aware policy that gzips the upstream's response body for a client that asked
for it. Pure logic like policies.py (client bytes, upstream bytes and EOF in; writes and a `done` call out).

- gzip-hold:  compress without a per-event flush, as a compressing proxy without flush does (nginx `gzip on`,
              Starlette's GZipMiddleware, Node's `compression` without `res.flush()`): a piece leaves only when
              zlib emits one (a full deflate block, ~16K symbols) and the rest at the end of the response
- gzip-flush: Z_SYNC_FLUSH after every upstream read: each read leaves at once as its own decodable piece

Only the response is touched, and only when compressing applies: the client's request (sniffed with the server
core, wire/server.py, and forwarded byte for byte) has an Accept-Encoding that accepts gzip, and the upstream's
response (read with the client core, wire/client.py) has a body and no Content-Encoding of its own. The head then
gets `Content-Encoding: gzip` and `Vary: Accept-Encoding`, loses Content-Length, and the body goes out chunked
(close-delimited to an HTTP/1.0 client; wire/framing.py decides). Otherwise, including a client that did not ask
for gzip, every byte goes through unchanged, as the `pass` control sends it.

A compressed response ends its connection (`Connection: close`): one exchange per connection keeps the control
simple, and a measuring client opens one connection per stream anyway.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from enum import Enum

from tokenpath.errors import RemoteProtocolError
from tokenpath.wire.client import ClientConnection, ResponseHead
from tokenpath.wire.contentcoding import accepts_coding, parse_codings
from tokenpath.wire.framing import Framing, end_of_body, frame_body, framing_headers, response_head, sent_framing
from tokenpath.wire.limits import MAX_HEAD_BYTES, ServerLimits
from tokenpath.wire.server import Request, ServerConnection

log = logging.getLogger(__name__)

Write = Callable[[list[bytes]], None]

# zlib's default trade-off, what nginx (gzip_comp_level 1) to Node (6) pick between; the timing does not depend
# on it, only the bytes.
GZIP_LEVEL = 6
# Only the request's head is read (its body is forwarded, never kept): the sniffer's body limit is never reached
# by what it is fed, and a head past the server core's own limit turns the control into `pass`.
_SNIFF_LIMITS = ServerLimits(max_body_bytes=1 << 62, max_head_bytes=MAX_HEAD_BYTES)
# Hop-by-hop and length headers the re-framed response cannot keep (RFC 9110 §7.6.1, RFC 9112 §6).
_DROPPED = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"})


class _State(Enum):
    WAITING = "waiting"  # the response head has not been read
    PASS = "pass"  # every byte goes through unchanged
    COMPRESS = "compress"
    DONE = "done"


class CompressPolicy:
    """`flush_each_read`: gzip-flush (True) or gzip-hold (False). `done` is called once a compressed response has
    been written whole, so the relay can close the connection (the upstream may keep it open)."""

    def __init__(self, write: Write, flush_each_read: bool, done: Callable[[], None], level: int = GZIP_LEVEL):
        self._write = write
        self._flush_each_read = flush_each_read
        self._done = done
        self._level = level
        self._sniffer: ServerConnection | None = ServerConnection(_SNIFF_LIMITS)
        self._request: Request | None = None
        self._state = _State.WAITING
        self._held: list[bytes] = []  # upstream bytes before the head is complete (bounded by the client core)
        self._response: ClientConnection | None = None
        self._gzip: zlib._Compress | None = None
        self._framing = Framing.CHUNKED
        self._out: list[bytes] = []  # compressed bytes made during one upstream read

    @property
    def compressing(self) -> bool:
        return self._state is _State.COMPRESS

    def observe_request(self, data: bytes) -> None:
        """Client bytes on their way upstream: only the first request's head is read."""
        if self._sniffer is None:
            return
        try:
            self._sniffer.receive_data(data)
        except RemoteProtocolError:
            self._sniffer = None  # not HTTP we can read: the response will go through unchanged
            return
        head = self._sniffer.next_head()
        if head is not None:
            self._request = head
            self._sniffer = None
        elif self._sniffer.failed:
            self._sniffer = None

    def feed(self, data: bytes) -> None:
        """Upstream bytes."""
        if self._state is _State.PASS:
            self._write([data])
            return
        if self._state is _State.DONE:
            return  # after a compressed response: nothing more goes to this client
        if self._response is None:
            if self._request is None or not accepts_coding(self._request.header("accept-encoding"), "gzip"):
                self._pass([data])
                return
            self._response = ClientConnection(
                self._request.method, on_head=self._on_head, on_body=self._on_body, on_end=self._on_end
            )
        if self._state is _State.WAITING:
            self._held.append(data)
        try:
            self._response.receive_data(data)
        except RemoteProtocolError as exc:
            self._broken(exc)
            return
        self._send_read()

    def finish(self) -> None:
        """Upstream EOF: ends a close-delimited body; anything held goes out as it came."""
        if self._state is _State.WAITING:
            self._pass([])
        elif self._state is _State.COMPRESS and self._response is not None:
            try:
                self._response.receive_eof()
            except RemoteProtocolError as exc:
                self._broken(exc)
                return
            self._send_read()

    def close(self) -> None:
        self._held.clear()
        self._out.clear()
        self._gzip = None

    # the client core's callbacks -------------------------------------------------------------------------------
    def _on_head(self, head: ResponseHead) -> None:
        if head.framing is Framing.NONE or parse_codings_safe(head.header("content-encoding")):
            self._pass([])
            return
        assert self._request is not None
        self._state = _State.COMPRESS
        self._held.clear()
        self._framing = sent_framing(self._request.method, head.status, self._request.http_version, None)
        headers = [(k, v) for k, v in head.headers if k.lower() not in _DROPPED and k.lower() != "vary"]
        vary = head.header("vary")
        headers += [("Content-Encoding", "gzip"), ("Vary", f"{vary}, Accept-Encoding" if vary else "Accept-Encoding")]
        headers += framing_headers(self._framing, None)
        self._out.append(response_head(head.status, headers, keep_alive=False))
        self._gzip = zlib.compressobj(self._level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)

    def _on_body(self, data: bytes) -> None:
        if self._gzip is not None:
            self._add(self._gzip.compress(data))

    def _on_end(self) -> None:
        if self._gzip is not None:
            self._add(self._gzip.flush())
            self._gzip = None
            self._out.append(end_of_body(self._framing))
            self._state = _State.DONE

    # -----------------------------------------------------------------------------------------------------------
    def _add(self, compressed: bytes) -> None:
        if compressed:
            self._out.append(frame_body(self._framing, compressed))

    def _send_read(self) -> None:
        """What this upstream read made leaves as one write (gzip-flush: after a sync flush)."""
        if self._flush_each_read and self._gzip is not None:
            self._add(self._gzip.flush(zlib.Z_SYNC_FLUSH))
        if self._out:
            out, self._out = self._out, []
            self._write([b"".join(out)])
        if self._state is _State.DONE:
            self._done()

    def _pass(self, data: list[bytes]) -> None:
        """From here on every byte goes through unchanged, starting with those held while the head was read."""
        self._state = _State.PASS
        held, self._held = [*self._held, *data], []
        self._response = None
        pieces = [p for p in held if p]
        if pieces:
            self._write(pieces)

    def _broken(self, exc: RemoteProtocolError) -> None:
        if self._state is _State.WAITING:
            self._pass([])  # not an HTTP response we can read: the client gets it as it is
            return
        # Mid-body: the client's response is cut short (no last chunk), as the upstream cut it.
        log.warning("relay: upstream response broken mid-body: %s", exc)
        self._state = _State.DONE
        self._gzip = None
        self._out.clear()
        self._done()


def parse_codings_safe(header: str | None) -> list[str]:
    """The codings a response already has (an unknown one counts too: never compress it again)."""
    if not header:
        return []
    try:
        return parse_codings(header)
    except Exception:
        return [header]
