"""HTTP/1.x response framing on httptools (llhttp), sans-IO.

`ResponseParser.feed(bytes)` returns the de-chunked body bytes that the input carried; the head and completion
state are attributes. httptools has no end-of-input call, so `feed_eof()` decides here whether a body that ended
with the connection was complete (close-delimited) or truncated (chunked or Content-Length not reached).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httptools

from tokenpath.errors import ProtocolError


@dataclass(slots=True)
class ResponseHead:
    status: int
    http_version: str
    headers: list[tuple[str, str]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        """The first value of a header, case-insensitively."""
        lname = name.lower()
        for key, value in self.headers:
            if key.lower() == lname:
                return value
        return None

    @property
    def content_type(self) -> str:
        return (self.header("content-type") or "").split(";", 1)[0].strip().lower()

    @property
    def close_delimited(self) -> bool:
        chunked = "chunked" in (self.header("transfer-encoding") or "").lower()
        return not chunked and self.header("content-length") is None


class ResponseParser:
    """Parses one response. `head` is set once the headers are complete; `complete` once the body ended."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self.head: ResponseHead | None = None
        self.complete = False

    # httptools callbacks -------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._headers = []  # an interim response (100 Continue): the real head follows
            return
        self.head = ResponseHead(status, self._parser.get_http_version(), self._headers)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.head is not None:
            self.complete = True

    # public API ----------------------------------------------------------------------------------
    def feed(self, data: bytes) -> bytes:
        if self.complete:
            return b""  # bytes after the end of the response are not ours to interpret
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass
        except httptools.HttpParserError as exc:
            where = "body" if self.head else "status line or headers"
            raise ProtocolError(f"malformed HTTP response {where}: {exc}") from None
        if not self._body:
            return b""
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        return body

    def feed_eof(self) -> None:
        """The connection closed. Raises ProtocolError if that cut the response short."""
        if self.complete:
            return
        if self.head is None:
            raise ProtocolError("connection closed before the response headers were complete")
        if self.head.close_delimited:
            self.complete = True
            return
        framing = "chunked body" if self.head.header("content-length") is None else "Content-Length body"
        raise ProtocolError(f"connection closed in the middle of the {framing}")
