"""Event loop choice: uvloop by default (faster I/O), the stdlib loop when asked or when uvloop is missing."""

from __future__ import annotations

import asyncio

from tokenpath.errors import UsageError


def new_event_loop(name: str = "uvloop") -> asyncio.AbstractEventLoop:
    if name == "asyncio":
        return asyncio.new_event_loop()
    if name != "uvloop":
        raise UsageError(f"`loop` {name!r}: expected uvloop or asyncio")
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop
