"""One long control-plane answer (every audit log at once: up to hundreds of MB) written a piece at a time, and only
while the client takes them: the pieces are never queued in memory for a client that does not read.

The same flow control as a paced stream's (stub/app.py PacedStream): the carrier's on_pause (a full socket buffer on
HTTP/1.1, a full stream window or socket on HTTP/2) holds the next piece until on_resume; a client that takes nothing
for `stall_s` is dropped with its connection (abort_connection), what was queued for it with it. Between pieces the
loop gets its turns (stub/loopshare.py).
"""

from __future__ import annotations

import asyncio

from tokenpath.serve.http import Response
from tokenpath.stub.loopshare import LoopShare


class ReplyWriter:
    """`start`, then `await write(piece)` while it returns True, then `end(last_piece)`. False: the client left or
    was dropped (its response is over: write no more). The response's callbacks are the writer's until `end` or
    `detach`."""

    def __init__(self, response: Response, share: LoopShare, stall_s: float) -> None:
        self._response = response
        self._share = share
        self._stall_s = stall_s
        self._head = b""
        self._wake: asyncio.Future[None] | None = None
        self._paused = response.writing_paused  # a carrier pauses only what is current when its buffer fills: ask
        self.dropped = False  # the client took nothing for stall_s
        response.on_pause = self._pause
        response.on_resume = self._resume
        response.on_abort = self._wake_up

    def start(self, status: int, headers: list[tuple[str, str]], length: int | None) -> None:
        """The head, sent with the first piece (length None: a streamed body, chunked on HTTP/1.1)."""
        self._head = self._response.start(status, headers, length)

    async def write(self, piece: bytes) -> bool:
        if not await self._room():
            return False
        out = self._head + self._response.frame(piece)
        self._head = b""
        self._response.write(out)
        await self._share.turn()
        return not self._response.client_gone

    async def end(self, piece: bytes = b"") -> bool:
        """The last piece, with whatever ends the body; the response is over."""
        if not await self._room():
            return False
        out = self._head + self._response.frame(piece) + self._response.end_bytes()
        self.detach()
        self._response.write(out, last=True)
        return True

    def detach(self) -> None:
        """The response's callbacks no longer the writer's (the cycle cut: freed by reference counting)."""
        self._response.on_pause = self._response.on_resume = self._response.on_abort = None

    async def _room(self) -> bool:
        """Waits while the client's buffer is full; False when it left, or took nothing for stall_s (dropped)."""
        if self._paused and not self._response.client_gone:
            loop = asyncio.get_running_loop()
            self._wake = loop.create_future()
            timer = loop.call_later(self._stall_s, self._stalled)
            try:
                await self._wake
            finally:
                timer.cancel()
                self._wake = None
        return not (self.dropped or self._response.client_gone)

    def _pause(self) -> None:
        self._paused = True

    def _resume(self) -> None:
        self._paused = False
        self._wake_up()

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _stalled(self) -> None:
        if self._wake is None or self._wake.done():
            # Resumed in the same loop pass as the stall's deadline (the socket's event runs before due timers, and
            # the waiting coroutine, which cancels this timer, only after both): the client did take the bytes.
            return
        self.dropped = True
        self._wake_up()
        self.detach()  # first: nothing the reset sets off reaches the writer
        self._response.abort_connection()
