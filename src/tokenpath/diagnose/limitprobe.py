"""One stream with a silence or a long total, through a path, on asyncio: many wait at once at no CPU cost (the
timeouts survey's probes). The stream's end is classified by the one shared rule (wire/ending.py): a path cut it
or it came through complete.

Plain HTTP to the path: HTTP/1.1, or HTTP/2 with prior knowledge (h2c) through the probe's HTTP/2 client core
(wire/h2client.py); in any API format (`Client.api`: the request on the format's route, its frames read by its own
rule, so a silence is held in that format's shape by the stub), the stub's pacing keys in the body's `tokenpath`
object.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tokenpath.errors import ConnectError, HTTP2Unavailable, PeerError, RemoteProtocolError, UsageError
from tokenpath.hostport import join_hostport
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.ending import BodyEnd, EndKind, LastWord, StreamEnd, body_end, classify_end
from tokenpath.wire.h2client import H2ClientConnection
from tokenpath.wire.h2events import DataReceived, HeadReceived, StreamEnded, StreamReset
from tokenpath.wire.httpversion import HttpVersion
from tokenpath.wire.reader import FrameReader, WireFrame, frame_reader
from tokenpath.wire.request import api_headers, build_request, endpoint_target, stream_body

READ_BYTES = 65536


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
    exchange = _exchange_h2 if client.http_version is HttpVersion.HTTP2 else _exchange
    try:
        return await asyncio.wait_for(exchange(target, ask, frame_reader(client.api)), guard_s)
    except TimeoutError:
        return Outcome(None)


async def _connect(target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.open_connection(target.host, target.port)
    except OSError as exc:
        raise ConnectError(f"{target.url}: cannot connect: {exc}") from None


async def _exchange(target: Target, ask: _Ask, frames: FrameReader) -> Outcome:
    """HTTP/1.1: one request on its own connection, read to the body's end."""
    request = build_request(
        "POST", join_hostport(target.host, target.port), ask.path, body=ask.body, headers=ask.headers
    )
    reader, writer = await _connect(target)
    parser = ResponseParser("POST")
    seen: list[WireFrame] = []
    last_byte_ns: int | None = None
    detail = ""
    try:
        writer.write(request)
        await writer.drain()
        sent_ns = time.monotonic_ns()
        how: BodyEnd
        while True:
            try:
                data = await reader.read(READ_BYTES)
            except (ConnectionResetError, BrokenPipeError):
                how = BodyEnd.RESET
                break
            now = time.monotonic_ns()
            if not data:
                try:
                    parser.feed_eof()
                except RemoteProtocolError:
                    how = BodyEnd.TRUNCATED
                    break
                how = _normal_end(parser)
                break
            last_byte_ns = now
            try:
                seen += frames.feed(parser.feed(data))
            except RemoteProtocolError as exc:  # a path's broken framing is its stream's end, not the survey's
                how = BodyEnd.TRUNCATED
                detail = f"the path broke the body's HTTP framing ({exc})"
                break
            head = parser.head
            if head is not None and head.status != 200:
                how = BodyEnd.STATUS
                detail = f"HTTP {head.status} instead of a stream"
                break
            if parser.complete:
                how = _normal_end(parser)
                break
        end_ns = time.monotonic_ns()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return _outcome(frames, seen, how, sent_ns, end_ns, last_byte_ns, detail)


def _outcome(
    frames: FrameReader,
    seen: list[WireFrame],
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
    end = classify_end(said, how, sent_ns=sent_ns, end_ns=end_ns, last_byte_ns=last_byte_ns, detail=detail)
    return Outcome(end)


async def _exchange_h2(target: Target, ask: _Ask, frames: FrameReader) -> Outcome:
    """HTTP/2 with prior knowledge (h2c): one stream on its own connection, through the probe's client core. A path
    that answers the preface in HTTP/1.1 (or closes on it) is HTTP2Unavailable: refused, never a silent 1.1."""
    conn = H2ClientConnection(authority=join_hostport(target.host, target.port))
    sid = conn.open_stream("POST", ask.path, ask.headers, ask.body)
    reader, writer = await _connect(target)
    seen: list[WireFrame] = []
    last_byte_ns: int | None = None
    detail = ""
    try:
        writer.write(conn.data_to_send())
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
                if conn.reads == 0:
                    raise HTTP2Unavailable(
                        f"{target.url}: the path closed the connection on the HTTP/2 preface (h2c prior knowledge): "
                        "it speaks HTTP/1.1 only? (drop --http2)"
                    )
                how = BodyEnd.TRUNCATED  # the connection closed under the stream: no END_STREAM
                break
            events = conn.receive(data, now)  # HTTP2Unavailable for an HTTP/1.1 answer to the preface
            out = conn.data_to_send()
            if out:
                writer.write(out)
            for event in events:
                if isinstance(event, HeadReceived) and event.stream_id == sid:
                    last_byte_ns = now
                    if event.head.status != 200:
                        how, detail = BodyEnd.STATUS, f"HTTP {event.head.status} instead of a stream"
                elif isinstance(event, DataReceived) and event.stream_id == sid:
                    last_byte_ns = now
                    seen += frames.feed(event.data)
                elif isinstance(event, StreamEnded) and event.stream_id == sid:
                    how = how or BodyEnd.END_STREAM
                elif isinstance(event, StreamReset) and event.stream_id == sid:
                    how = how or BodyEnd.RESET
        end_ns = time.monotonic_ns()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    assert how is not None  # the loop ends only once it is set
    return _outcome(frames, seen, how, sent_ns, end_ns, last_byte_ns, detail)


def _normal_end(parser: ResponseParser) -> BodyEnd:
    """How a body HTTP saw end normally ended (a close before any head: truncated)."""
    return body_end(parser.head.framing) if parser.head is not None else BodyEnd.TRUNCATED
