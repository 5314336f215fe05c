"""probe/aio.py stream_with's bound: a response that never ends fails with TimeoutError once `timeout_s` is up (one
timer per stream, run_stream), the connection closed; one that ends first returns its trace and leaves no timer to
fire later."""

from __future__ import annotations

import asyncio
import time

from tokenpath.load.lean import LeanRecorder
from tokenpath.probe.aio import stream_with
from tokenpath.serve.loops import new_event_loop

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
WHOLE = HEAD + b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"


def _run(answer: bytes, timeout_s: float, loop_name: str = "uvloop") -> tuple[object, float, bool]:
    """What stream_with returned or raised against a server that answers `answer` and keeps the connection open,
    how long it took, and whether the server saw the connection closed afterwards."""
    loop = new_event_loop(loop_name)
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await reader.read()  # until the client closes
        except ConnectionError:
            pass
        finally:
            closed.set()
            writer.close()

    async def main() -> tuple[object, float, bool]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        start = time.monotonic()
        try:
            got: object = await asyncio.wait_for(
                stream_with("127.0.0.1", port, request, "s", LeanRecorder, timeout_s=timeout_s), 10
            )
        except TimeoutError as exc:
            got = exc
        took = time.monotonic() - start
        if loop_name == "asyncio":  # the stdlib loop shows its timers: the stream's own is gone with the stream
            timers = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
            assert not [h for h in timers if "_time_out" in repr(h)], timers
        await asyncio.wait_for(closed.wait(), 10)
        await asyncio.sleep(min(timeout_s, 0.3))  # a timer left behind would fire now (the short bound's)
        server.close()
        await server.wait_closed()
        return got, took, closed.is_set()

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_response_that_never_ends_times_out_and_its_connection_is_closed() -> None:
    got, took, closed = _run(HEAD + b"9\r\ndata: 1\n\n\r\n", timeout_s=0.3)
    assert isinstance(got, TimeoutError)
    assert 0.25 <= took < 5  # the stream's own bound, not the test's outer one (10 s)
    assert closed


def test_a_response_that_ends_first_is_its_trace_and_leaves_no_timer() -> None:
    """A timer left until the deadline would hold the stream's result (its body) that long: a load client at 300
    streams a second with a 600 s bound would hold minutes of bodies."""
    for loop_name in ("uvloop", "asyncio"):
        got, _, closed = _run(WHOLE, timeout_s=30, loop_name=loop_name)
        assert not isinstance(got, BaseException), got
        assert getattr(got, "body", None) == b"data: 1\n\n"
        assert closed
