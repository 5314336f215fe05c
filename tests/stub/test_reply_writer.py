"""ReplyWriter's rules (stub/replywriter.py) on a response that records what it is handed: a writer made while its
client's buffer is already full waits for on_resume before its first piece, and it hands the response's callbacks
back (detach) when the answer ends or its client is dropped, so the response and the writer are not a cycle and
nothing the reset sets off reaches the writer. Found by review: no test failed with either rule removed."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Iterator

import pytest

from tokenpath.stub.loopshare import LoopShare
from tokenpath.stub.replywriter import ReplyWriter

Callbacks = tuple[Callable[[], None] | None, ...]


class Recorded:
    """A Response as ReplyWriter uses it: what it is handed, and its callbacks when the connection is aborted (which
    sets off on_abort, as a real connection's loss does)."""

    def __init__(self, paused: bool = False) -> None:
        self.writing_paused = paused
        self.client_gone = False
        self.on_pause: Callable[[], None] | None = None
        self.on_resume: Callable[[], None] | None = None
        self.on_abort: Callable[[], None] | None = None
        self.written: list[bytes] = []
        self.at_abort: Callbacks | None = None

    @property
    def callbacks(self) -> Callbacks:
        return self.on_pause, self.on_resume, self.on_abort

    def start(self, status: int, headers: list[tuple[str, str]], length: int | None) -> bytes:
        return b"head|"

    def frame(self, piece: bytes) -> bytes:
        return piece

    def end_bytes(self) -> bytes:
        return b"|end"

    def write(self, data: bytes, last: bool = False) -> None:
        self.written.append(data)

    def abort_connection(self) -> None:
        self.at_abort = self.callbacks
        self.client_gone = True
        if self.on_abort is not None:
            self.on_abort()


def _writer(response: Recorded, stall_s: float = 60.0) -> ReplyWriter:
    return ReplyWriter(response, LoopShare(), stall_s)  # type: ignore[arg-type]


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Only reference counting frees objects: a cycle stays."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_writer_made_while_the_client_s_buffer_is_full_waits_for_resume() -> None:
    """A carrier pauses only the producer current when its buffer fills: a response that starts behind a full
    buffer (a pipelined one) never hears on_pause, so the writer asks writing_paused when it is made."""

    async def scene() -> tuple[list[bytes], list[bytes], bool]:
        response = Recorded(paused=True)
        writer = _writer(response)
        writer.start(200, [], None)
        write = asyncio.ensure_future(writer.write(b"piece"))
        for _ in range(10):  # any number of loop passes: nothing is written until resumed
            await asyncio.sleep(0)
        before = list(response.written)
        assert response.on_resume is not None
        response.on_resume()
        return before, response.written, await write

    before, after, taken = asyncio.run(scene())
    assert before == []
    assert after == [b"head|piece"]
    assert taken


def test_the_end_hands_the_callbacks_back_and_the_writer_is_freed_by_reference_counting(no_collector: None) -> None:
    async def scene() -> tuple[Recorded, weakref.ref[ReplyWriter]]:
        response = Recorded()
        writer = _writer(response)
        writer.start(200, [], 5)
        assert all(response.callbacks)
        assert await writer.end(b"piece")
        return response, weakref.ref(writer)

    response, ref = asyncio.run(scene())
    assert response.written == [b"head|piece|end"]
    assert response.callbacks == (None, None, None)
    assert ref() is None, "the response's callbacks still hold the writer: a cycle only the collector frees"


def test_a_dropped_client_s_reset_does_not_reach_the_writer() -> None:
    """The stall detaches first, then aborts the connection: the abort's on_abort finds no writer to wake."""

    async def scene() -> tuple[bool, Recorded]:
        response = Recorded(paused=True)
        writer = _writer(response)
        writer.start(200, [], None)
        write = asyncio.ensure_future(writer.write(b"piece"))
        await asyncio.sleep(0)  # the writer waits for room
        writer._stalled()  # the stall's deadline, the client having taken nothing
        return await write, response

    taken, response = asyncio.run(scene())
    assert not taken
    assert response.at_abort == (None, None, None)
    assert response.callbacks == (None, None, None)
    assert response.written == []
