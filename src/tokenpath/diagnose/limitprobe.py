"""One stream with a silence or a long total, through a path, on asyncio: many wait at once at no CPU cost (the
timeouts survey's probes). The stream's end is classified by the one shared rule (wire/ending.py): a path cut it
or it came through complete.

Plain HTTP/1.1 to the path, the OpenAI format, the stub's pacing keys in the body's `tokenpath` object.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tokenpath.errors import ConnectError, RemoteProtocolError, UsageError
from tokenpath.wire.apis import Api
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.ending import BodyEnd, EndKind, LastWord, StreamEnd, body_end, classify_end
from tokenpath.wire.reader import WireFrame, frame_reader
from tokenpath.wire.request import api_headers, build_json_request, endpoint_target, stream_body

API = Api.OPENAI
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
            raise UsageError(f"{url!r}: the timeouts survey takes http://HOST:PORT[/BASE] (plain HTTP/1.1)")
        return cls(url, parts.hostname, parts.port or 80, parts.path + (f"?{parts.query}" if parts.query else ""))


@dataclass(frozen=True, slots=True)
class Outcome:
    end: StreamEnd | None  # None: the client's own guard ran out first (the path held the stream: not survived)

    @property
    def survived(self) -> bool:
        return self.end is not None and self.end.kind is EndKind.COMPLETE


async def run_stream(
    target: Target, pacing: Mapping[str, Any], guard_s: float, model: str = "tokenpath-stub"
) -> Outcome:
    """One stream with `pacing` (the stub's per-request keys), read to its end or for `guard_s` at most."""
    stream_id = f"timeouts-{uuid.uuid4().hex[:12]}"
    payload = {**stream_body(API, model=model, prompt="timeouts", max_tokens=None, stream_id=stream_id)}
    payload["tokenpath"] = dict(pacing)
    request = build_json_request(
        f"{target.host}:{target.port}",
        endpoint_target(target.base, API, model),
        payload,
        headers=api_headers(API, stream_id, None),
    )
    try:
        return await asyncio.wait_for(_exchange(target, request), guard_s)
    except TimeoutError:
        return Outcome(None)


async def _exchange(target: Target, request: bytes) -> Outcome:
    try:
        reader, writer = await asyncio.open_connection(target.host, target.port)
    except OSError as exc:
        raise ConnectError(f"{target.url}: cannot connect: {exc}") from None
    parser = ResponseParser("POST")
    frames = frame_reader(API)
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
    said = frames.last_word(seen) if seen else LastWord.NOTHING
    end = classify_end(said, how, sent_ns=sent_ns, end_ns=end_ns, last_byte_ns=last_byte_ns, detail=detail)
    return Outcome(end)


def _normal_end(parser: ResponseParser) -> BodyEnd:
    """How a body HTTP saw end normally ended (a close before any head: truncated)."""
    return body_end(parser.head.framing) if parser.head is not None else BodyEnd.TRUNCATED
