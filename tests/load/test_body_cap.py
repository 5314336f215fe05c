"""A target that answers 200 and never ends its body: each stream holds its body for the integrity check, so it is
ended as ResponseTooLarge once the body passes the stub's own ceiling for one stream (stub/config.py
MAX_STREAM_BYTES), not kept until the stream's timeout (1.48 GB in 30 s before)."""

from __future__ import annotations

import asyncio

import pytest

from tokenpath.errors import ResponseTooLarge
from tokenpath.load.lean import MAX_BODY_BYTES, H2LeanRecorder, LeanRecorder
from tokenpath.load.worker import Workload, _probe_config, one_stream
from tokenpath.serve.loops import new_event_loop
from tokenpath.stub.config import MAX_STREAM_BYTES
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import Framing

CLOSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
FRAME = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
PIECE = FRAME * ((1 << 20) // len(FRAME))  # ~1 MiB of frames a read


def test_the_cap_is_the_stubs_own_ceiling() -> None:
    assert MAX_BODY_BYTES == MAX_STREAM_BYTES


def test_an_endless_body_ends_as_response_too_large_past_the_cap() -> None:
    lean = LeanRecorder("tp-big", 0)
    lean.on_read(1, CLOSE_HEAD + FRAME)  # the first content frame found: the reads after it are only marked
    fed = len(FRAME)
    t = 1
    while fed <= MAX_BODY_BYTES:  # every read below the cap is taken
        t, fed = t + 1, fed + len(PIECE)
        if fed <= MAX_BODY_BYTES:
            lean.on_read(t, PIECE)
    with pytest.raises(ResponseTooLarge, match="response too large"):
        lean.on_read(t, PIECE)  # the read that passes it
    assert MAX_BODY_BYTES < fed <= MAX_BODY_BYTES + len(PIECE)  # at the read that passed it, not later


def test_an_endless_http2_body_ends_at_the_same_cap() -> None:
    h2 = H2LeanRecorder("tp-big2", 0)
    h2.on_head(ResponseHead(200, "2", (("content-type", "text/event-stream"),), Framing.LENGTH, True))
    fed, t = 0, 0
    while fed <= MAX_BODY_BYTES:
        t, fed = t + 1, fed + len(PIECE)
        if fed <= MAX_BODY_BYTES:
            h2.on_data(t, PIECE)
    with pytest.raises(ResponseTooLarge):
        h2.on_data(t, PIECE)
    assert MAX_BODY_BYTES < fed <= MAX_BODY_BYTES + len(PIECE)


def test_a_load_stream_against_an_endless_target_is_an_error_not_a_growing_body() -> None:
    async def endless(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(CLOSE_HEAD)
        try:
            while True:
                writer.write(PIECE)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def scenario() -> str | None:
        server = await asyncio.start_server(endless, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        work = Workload(f"http://127.0.0.1:{port}", "tokenpath-stub", "hi", 8, 1, 0.0, 1.0)
        try:
            result = await one_stream(_probe_config(work), "127.0.0.1", port, work)
        finally:
            server.close()
        return result.error

    loop = new_event_loop("uvloop")
    try:
        error = loop.run_until_complete(asyncio.wait_for(scenario(), 20))
    finally:
        loop.close()
    assert error is not None
    assert error.startswith("response too large"), error
