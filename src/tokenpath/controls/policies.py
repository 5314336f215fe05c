"""When a relay lets upstream bytes go downstream. Pure logic: bytes and timer ticks in, writes out.

- pass:   every read at once (must measure at the direct floor)
- buffer: nothing until the upstream closes, then all of it (the `await response.text()` shape)
- cork:   hold until `cork_bytes` are queued or `cork_ms` have passed since the first held byte
          (Linux MSG_MORE / TCP_CORK, the behaviour that makes HAProxy deliver frames in bursts)
- gzip-hold, gzip-flush: HTTP-aware, the response body gzipped for a client that asked for it, without and with
          a flush per upstream read (controls/compress.py)

Over HTTP/2 (the client's preface decides, controls/relay.py): pass and cork as they are, buffer per stream
(controls/h2hold.py), the gzip modes refuse the connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from tokenpath.controls.compress import CompressPolicy
from tokenpath.errors import InstrumentError

Mode = Literal["pass", "buffer", "cork", "gzip-hold", "gzip-flush"]
MODES: tuple[Mode, ...] = ("pass", "buffer", "cork", "gzip-hold", "gzip-flush")
# The modes that relay HTTP/2 (controls/h2hold.py says how); the gzip modes rewrite an HTTP/1.1 response.
H2_MODES: tuple[Mode, ...] = ("pass", "buffer", "cork")

# The cork control models Linux TCP_CORK / MSG_MORE: a partial segment is held until a full one (1,448 bytes of
# payload on a 1,500-byte MTU link with timestamps) is queued, or at most 200 ms.
CORK_BYTES = 1448
CORK_MS = 200.0

# A buffering relay holds a whole response in memory; past this it gives up rather than grow without bound.
MAX_BUFFER_BYTES = 64 << 20

# A write hands over the pieces released together, each as the upstream sent it: over TLS the relay sends them as
# separate records in one burst (what HAProxy 2.8+ does), which a client must still count as one arrival.
Write = Callable[[list[bytes]], None]
CallLater = Callable[[float, Callable[[], None]], "Cancellable"]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class BufferLimitExceeded(InstrumentError):
    """A hold policy was sent more than it may hold: the control cannot model that proxy any more."""


class Policy(Protocol):
    def observe_request(self, data: bytes) -> None: ...  # client bytes on their way upstream (forwarded as they are)
    def feed(self, data: bytes) -> None: ...
    def finish(self) -> None: ...  # upstream EOF: everything held goes out now
    def close(self) -> None: ...  # connection gone: drop timers


class _ByteLevel:
    """The byte-level policies never look at the request."""

    def observe_request(self, data: bytes) -> None:
        pass


class PassPolicy(_ByteLevel):
    def __init__(self, write: Write) -> None:
        self._write = write

    def feed(self, data: bytes) -> None:
        self._write([data])

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


class BufferPolicy(_ByteLevel):
    def __init__(self, write: Write, limit: int = MAX_BUFFER_BYTES) -> None:
        self._write = write
        self._held: list[bytes] = []
        self._size = 0
        self._limit = limit

    def feed(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            raise BufferLimitExceeded(f"response larger than the buffer limit of {self._limit} bytes")
        self._held.append(data)

    def finish(self) -> None:
        if self._held:
            self._write([b"".join(self._held)])
            self._held.clear()

    def close(self) -> None:
        self._held.clear()


class CorkPolicy(_ByteLevel):
    def __init__(self, write: Write, call_later: CallLater, cork_bytes: int = CORK_BYTES, cork_ms: float = CORK_MS):
        self._write = write
        self._call_later = call_later
        self._cork_bytes = cork_bytes
        self._cork_s = cork_ms / 1000
        self._held: list[bytes] = []
        self._size = 0
        self._timer: Cancellable | None = None

    def feed(self, data: bytes) -> None:
        if not self._held:
            self._timer = self._call_later(self._cork_s, self._flush)
        self._held.append(data)
        self._size += len(data)
        if self._size >= self._cork_bytes:
            self._flush()

    def finish(self) -> None:
        self._flush()

    def close(self) -> None:
        self._cancel()
        self._held.clear()
        self._size = 0

    def _flush(self) -> None:
        self._cancel()
        if self._held:
            held, self._held = self._held, []
            self._size = 0
            self._write(held)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def make_policy(
    mode: Mode, write: Write, call_later: CallLater, cork_bytes: int, cork_ms: float, done: Callable[[], None]
) -> Policy:
    """`done`: the policy has written a whole response that ends the connection (the compressing modes)."""
    if mode in ("gzip-hold", "gzip-flush"):
        return CompressPolicy(write, flush_each_read=mode == "gzip-flush", done=done)
    if mode == "pass":
        return PassPolicy(write)
    if mode == "buffer":
        return BufferPolicy(write)
    return CorkPolicy(write, call_later, cork_bytes, cork_ms)
