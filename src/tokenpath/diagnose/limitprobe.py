"""One stream with a silence or a long total, through a path, on asyncio: many wait at once at no CPU cost (the
timeouts survey's probes). The stream's end is classified by the one shared rule (wire/ending.py): a path cut it
or it came through complete.

Plain HTTP to the path: HTTP/1.1, or HTTP/2 with prior knowledge (h2c) through the probe's HTTP/2 client core
(wire/h2client.py); in any API format (`Client.api`: the request on the format's route, its frames read by its own
rule, so a silence is held in that format's shape by the stub), the stub's pacing keys in the body's `tokenpath`
object. One async read loop for both versions (_exchange) over a per-version source (_H1Reads, _H2Reads: the
sans-IO core's sense of the bytes). The probe's ReadSource seam (probe/client.py) is blocking, with its deadlines and
its trace recorder; here asyncio's reads and one guard per stream, so the seam is this module's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from tokenpath.errors import (
    ConnectError,
    HTTP2Unavailable,
    PeerError,
    RemoteProtocolError,
    StreamFormatError,
    UsageError,
)
from tokenpath.hostport import join_hostport
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.ending import BodyEnd, EndKind, LastWord, StreamEnd, body_end, classify_end, error_detail
from tokenpath.wire.h2client import H2ClientConnection
from tokenpath.wire.h2events import DataReceived, HeadReceived, StreamEnded, StreamReset
from tokenpath.wire.httpversion import HttpVersion
from tokenpath.wire.reader import FrameReader, WireFrame, frame_reader
from tokenpath.wire.request import api_headers, build_request, endpoint_target, stream_body

READ_BYTES = 65536
# The last frames a try keeps: what its end is read from (the format's final event, or its error, and a few after).
# Every frame of every try was kept: a path that floods frames took nine tries at once to 2 GB and a MemoryError.
KEPT_FRAMES = 64


@dataclass(frozen=True, slots=True)
class Target:
    """A path's base URL, e.g. http://127.0.0.1:8080/v1 (plain HTTP)."""

    url: str
    host: str
    port: int
    base: str

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise UsageError(
                f"{url!r}: the timeouts survey takes http://HOST:PORT[/BASE] (plain HTTP/1.1, or h2c with --http2; "
                "no TLS yet)"
            )
        return cls(url, parts.hostname, parts.port or 80, parts.path + (f"?{parts.query}" if parts.query else ""))


@dataclass(frozen=True, slots=True)
class Client:
    """How the survey's client asks: the API format (its route, headers, body and frames) and the HTTP version."""

    api: Api = Api.OPENAI
    http_version: HttpVersion = HttpVersion.HTTP11
    model: str = "tokenpath-stub"

    def __post_init__(self) -> None:
        if self.http_version not in (HttpVersion.HTTP11, HttpVersion.HTTP2):
            raise UsageError(f"the timeouts survey speaks HTTP/1.1 or HTTP/2 (h2c), not {self.http_version.label}")


DEFAULT_CLIENT = Client()


@dataclass(frozen=True, slots=True)
class Outcome:
    end: StreamEnd | None  # None: the client's own guard ran out first (the path held the stream: not survived)

    @property
    def survived(self) -> bool:
        return self.end is not None and self.end.kind is EndKind.COMPLETE


@dataclass(frozen=True, slots=True)
class _Ask:
    """One request, as both HTTP versions send it."""

    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


def _ask(target: Target, pacing: Mapping[str, Any], client: Client) -> _Ask:
    api = client.api
    stream_id = f"timeouts-{uuid.uuid4().hex[:12]}"
    payload = stream_body(api, model=client.model, prompt="timeouts", max_tokens=None, stream_id=stream_id)
    payload["tokenpath"] = dict(pacing)
    fields = (
        ("Content-Type", "application/json"),
        ("Accept", SPECS[api].content_type),
        *api_headers(api, stream_id, None),
    )
    body = json.dumps(payload, separators=(",", ":")).encode()
    return _Ask(endpoint_target(target.base, api, client.model), fields, body)


async def run_stream(
    target: Target, pacing: Mapping[str, Any], guard_s: float, client: Client = DEFAULT_CLIENT
) -> Outcome:
    """One stream with `pacing` (the stub's per-request keys), read to its end or for `guard_s` at most."""
    ask = _ask(target, pacing, client)
    source = _H2Reads(target, ask) if client.http_version is HttpVersion.HTTP2 else _H1Reads(target, ask)
    try:
        return await asyncio.wait_for(_exchange(target, source, frame_reader(client.api)), guard_s)
    except TimeoutError:
        return Outcome(None)


async def _connect(target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.open_connection(target.host, target.port)
    except OSError as exc:
        raise ConnectError(f"{target.url}: cannot connect: {exc}") from None


@dataclass(frozen=True, slots=True)
class _Read:
    """What one read brought the stream: its body bytes (the frames' to parse), whether any of its bytes came
    (head or body: the last byte's time), and its end if the read ended it (with why, for the message)."""

    body: bytes = b""
    stream_bytes: bool = False
    end: BodyEnd | None = None
    detail: str = ""


class _StreamSource(Protocol):
    """The read loop's per-version seam: HTTP/1.1 (_H1Reads) or h2c (_H2Reads) makes its sense of the bytes the one
    loop (_exchange) reads; the loop holds the socket, the times and the frames, the same for both."""

    def data_to_send(self) -> bytes:
        """Bytes to write now (the request first; HTTP/2's acknowledgements and window updates after a read)."""
        ...

    def feed(self, data: bytes, t_ns: int) -> _Read:
        """One read's bytes, arrived at `t_ns`. A RemoteProtocolError: the path broke the HTTP framing."""
        ...

    def closed(self) -> BodyEnd:
        """The path closed the connection: how that ended the body."""
        ...


class _H1Reads:
    """HTTP/1.1: one request on its own connection, read to the body's end."""

    def __init__(self, target: Target, ask: _Ask) -> None:
        host = join_hostport(target.host, target.port)
        self._request = build_request("POST", host, ask.path, body=ask.body, headers=ask.headers)
        self._parser = ResponseParser("POST")

    def data_to_send(self) -> bytes:
        request, self._request = self._request, b""
        return request

    def feed(self, data: bytes, t_ns: int) -> _Read:
        body = self._parser.feed(data)
        head = self._parser.head
        if head is not None and head.status != 200:
            return _Read(body, True, BodyEnd.STATUS, f"HTTP {head.status} instead of a stream")
        return _Read(body, True, self._normal_end() if self._parser.complete else None)

    def closed(self) -> BodyEnd:
        try:
            self._parser.feed_eof()
        except RemoteProtocolError:
            return BodyEnd.TRUNCATED
        return self._normal_end()

    def _normal_end(self) -> BodyEnd:
        """How a body HTTP saw end normally ended (a close before any head: truncated)."""
        head = self._parser.head
        return body_end(head.framing) if head is not None else BodyEnd.TRUNCATED


class _H2Reads:
    """HTTP/2 with prior knowledge (h2c): one stream on its own connection, through the probe's client core. A path
    that answers the preface in HTTP/1.1 (or closes on it) is HTTP2Unavailable: refused, never a silent 1.1."""

    def __init__(self, target: Target, ask: _Ask) -> None:
        self._url = target.url
        self._conn = H2ClientConnection(authority=join_hostport(target.host, target.port))
        self._sid = self._conn.open_stream("POST", ask.path, ask.headers, ask.body)

    def data_to_send(self) -> bytes:
        return self._conn.data_to_send()

    def feed(self, data: bytes, t_ns: int) -> _Read:
        events = self._conn.receive(data, t_ns)  # HTTP2Unavailable for an HTTP/1.1 answer to the preface
        body = bytearray()
        stream_bytes = False
        end: BodyEnd | None = None
        detail = ""
        for event in events:  # other streams' and the connection's events: none of this stream's bytes
            if isinstance(event, HeadReceived) and event.stream_id == self._sid:
                stream_bytes = True
                if event.head.status != 200:
                    end, detail = BodyEnd.STATUS, f"HTTP {event.head.status} instead of a stream"
            elif isinstance(event, DataReceived) and event.stream_id == self._sid:
                stream_bytes = True
                body += event.data
            elif isinstance(event, StreamEnded) and event.stream_id == self._sid:
                end = end or BodyEnd.END_STREAM
            elif isinstance(event, StreamReset) and event.stream_id == self._sid:
                end = end or BodyEnd.RESET
        return _Read(bytes(body), stream_bytes, end, detail)

    def closed(self) -> BodyEnd:
        if self._conn.reads == 0:
            raise HTTP2Unavailable(
                f"{self._url}: the path closed the connection on the HTTP/2 preface (h2c prior knowledge): "
                "it speaks HTTP/1.1 only? (drop --http2)"
            )
        return BodyEnd.TRUNCATED  # the connection closed under the stream: no END_STREAM


async def _exchange(target: Target, source: _StreamSource, frames: FrameReader) -> Outcome:
    """The one read loop, either HTTP version: write what the source has to send, read until it says the body
    ended (or the path closed or reset the connection), each read's body bytes through the format's frames."""
    reader, writer = await _connect(target)
    seen: deque[WireFrame] = deque(maxlen=KEPT_FRAMES)  # what the end is read from; a flood's frames are not kept
    last_byte_ns: int | None = None
    detail = ""
    try:
        writer.write(source.data_to_send())
        await writer.drain()
        sent_ns = time.monotonic_ns()
        how: BodyEnd | None = None
        while how is None:
            try:
                data = await reader.read(READ_BYTES)
            except (ConnectionResetError, BrokenPipeError):
                how = BodyEnd.RESET
                break
            now = time.monotonic_ns()
            if not data:
                how = source.closed()
                break
            try:
                read = source.feed(data, now)
                seen += frames.feed(read.body)
            except StreamFormatError as exc:  # a path's broken frames are its stream's end, not the survey's
                how, detail = BodyEnd.TRUNCATED, f"the path broke the stream's frames ({exc})"
                break
            except RemoteProtocolError as exc:  # so is a broken HTTP framing (h2o's garbage chunk size)
                how, detail = BodyEnd.TRUNCATED, f"the path broke the body's HTTP framing ({exc})"
                break
            if read.stream_bytes:
                last_byte_ns = now
            how, detail = read.end, read.detail
            out = source.data_to_send()
            if out:
                writer.write(out)
        end_ns = time.monotonic_ns()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    assert how is not None  # the loop ends only once it is set
    return _outcome(frames, seen, how, sent_ns, end_ns, last_byte_ns, detail)


def _outcome(
    frames: FrameReader,
    seen: deque[WireFrame],
    how: BodyEnd,
    sent_ns: int,
    end_ns: int,
    last_byte_ns: int | None,
    detail: str = "",
) -> Outcome:
    if how.normal:
        with contextlib.suppress(PeerError):  # a frame cut short by the end: the last word is the frames before it
            seen += frames.close()  # a last NDJSON line without its line end is whole at the body's end
    said = frames.last_word(seen) if seen else LastWord.NOTHING
    if said is LastWord.ERROR and not detail:  # whose error it was is in its words (wire/ending.py origin_end)
        detail = error_detail(next((f.data for f in reversed(seen) if frames.ends(f) and f.data), b""), how)
    end = classify_end(said, how, sent_ns=sent_ns, end_ns=end_ns, last_byte_ns=last_byte_ns, detail=detail)
    return Outcome(end)
