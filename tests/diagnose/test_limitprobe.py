"""diagnose/limitprobe.py against scripted peers: a stream is survived only when the format's final event came; a
close without it (a close-delimited body, as nginx's idle timer leaves it) is a silent cut, never complete; a chunked
body cut short, an error status and a reset are cut_error; a peer that holds is not survived; a path without a stub
behind it is named, not read as "no limit"; a refused connection is a ConnectError naming the target; a body whose
HTTP framing breaks (a garbage chunk size) is that stream's cut_error, never an exception that ends a survey."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Awaitable, Callable

import pytest

from tokenpath.diagnose.limitprobe import Outcome, Target, run_stream
from tokenpath.diagnose.limits import Measure, check_paced
from tokenpath.errors import ConnectError, HTTPStatusError, UsageError
from tokenpath.proxies.base import free_port
from tokenpath.wire.ending import BodyEnd, EndKind

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
SSE_HEAD_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
SSE_HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def through(script: Script, guard_s: float = 5.0) -> Outcome:
    async def main() -> Outcome:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"\r\n\r\n")
                await script(reader, writer)
            finally:  # a held stream's handler is cancelled when the test's loop ends: close it all the same
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await run_stream(Target.parse(f"http://127.0.0.1:{port}/v1"), {"ttft_ms": 0}, guard_s)

    return asyncio.run(main())


async def closes_after_a_frame(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD_CLOSE + CHUNK)
    await writer.drain()
    writer.close()


async def ends_with_done(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD_CHUNKED + chunk(CHUNK) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()
    writer.close()


async def chunked_cut_short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD_CHUNKED + chunk(CHUNK))
    await writer.drain()
    writer.close()


async def answers_504(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 7\r\nConnection: close\r\n\r\ntimeout")
    await writer.drain()
    writer.close()


async def resets(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD_CHUNKED + chunk(CHUNK))
    await writer.drain()
    writer.transport.abort()  # RST where the kernel can


async def breaks_the_chunking(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD_CHUNKED + chunk(CHUNK) + b"zz\r\n<html>timeout</html>")  # not a chunk size
    await writer.drain()
    await asyncio.sleep(3)


async def holds(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD_CHUNKED)
    await writer.drain()
    await asyncio.sleep(3)


def test_a_close_without_the_final_event_is_a_silent_cut_never_complete() -> None:
    outcome = through(closes_after_a_frame)
    assert outcome.end is not None
    assert outcome.end.kind is EndKind.CUT_SILENT
    assert outcome.end.how is BodyEnd.CLOSE
    assert not outcome.survived


def test_the_final_event_is_survived() -> None:
    outcome = through(ends_with_done)
    assert outcome.survived
    assert outcome.end is not None
    assert outcome.end.how is BodyEnd.CHUNKED


@pytest.mark.parametrize(
    ("script", "how"),
    [
        (chunked_cut_short, {BodyEnd.TRUNCATED}),
        (answers_504, {BodyEnd.STATUS}),
        (resets, {BodyEnd.RESET, BodyEnd.TRUNCATED}),
        (breaks_the_chunking, {BodyEnd.TRUNCATED}),  # one path's broken framing never ends a survey of many
    ],
)
def test_errors_are_cut_error(script: Script, how: set[BodyEnd]) -> None:
    outcome = through(script)
    assert outcome.end is not None
    assert outcome.end.kind is EndKind.CUT_ERROR
    assert outcome.end.how in how


def test_a_peer_that_holds_is_not_survived() -> None:
    outcome = through(holds, guard_s=0.5)
    assert outcome.end is None
    assert not outcome.survived


def test_a_whole_stream_far_shorter_than_asked_means_no_stub_paces_it() -> None:
    outcome = through(ends_with_done)
    target = Target.parse("http://127.0.0.1:1")
    with pytest.raises(UsageError, match="no tokenpath stub"):
        check_paced(target, 30.0, outcome)
    check_paced(target, 0.0001, outcome)  # as long as asked: fine
    assert Measure.TOTAL.words == "total length"


def test_an_error_status_long_before_the_silence_ends_is_named_not_read_as_a_limit() -> None:
    outcome = through(answers_504)
    assert outcome.end is not None
    assert "HTTP 504" in outcome.end.detail
    with pytest.raises(HTTPStatusError, match="HTTP 504 instead of a stream"):
        check_paced(Target.parse("http://127.0.0.1:1"), 30.0, outcome, min_s=1.0)
    # Envoy's route timeout answers 504 at its limit, however long the silence asked: a limit, not an error.
    check_paced(Target.parse("http://127.0.0.1:1"), 30.0, outcome, min_s=0.0001)


def test_a_refused_connection_names_the_target() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConnectError, match="cannot connect"):
        asyncio.run(run_stream(Target.parse(url), {}, 5.0))


async def floods_then_ends(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSE_HEAD_CHUNKED)
    piece = chunk(CHUNK * 1000)
    for _ in range(200):  # 200,000 frames
        writer.write(piece)
        await writer.drain()
    writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


def test_a_try_keeps_only_the_frames_its_end_is_read_from() -> None:
    """Every frame of every try was kept: a path flooding frames took a survey's nine tries at once to 2 GB and a
    MemoryError. 200,000 frames pass through, at most KEPT_FRAMES kept, and the final event after them still ends
    the stream as survived."""
    tracemalloc.start()
    try:
        outcome = through(floods_then_ends, guard_s=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.survived
    assert peak < 16 << 20  # kept: ~1 MB; every frame kept: 62 MB
