"""Backpressure between two asyncio transports, one rule for every shell: while the consumer's write buffer is
above its high mark (asyncio calls `pause_writing`), stop reading from the producer; read again on
`resume_writing`. A closed or closing producer is left alone, and pausing twice is one pause."""

from __future__ import annotations

import asyncio


class ReadGate:
    """Pauses and resumes reading on one transport (the producer's)."""

    __slots__ = ("_transport", "paused")

    def __init__(self, transport: asyncio.BaseTransport | None = None) -> None:
        self._transport = transport
        self.paused = False

    def attach(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self.paused:  # the consumer filled up before the producer was connected
            self._apply()

    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            self._apply()

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self._apply()

    def _apply(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self.paused:
            transport.pause_reading()  # type: ignore[attr-defined]
        else:
            transport.resume_reading()  # type: ignore[attr-defined]
