"""When a relay lets upstream bytes go downstream. Pure logic: bytes and timer ticks in, writes out.

- pass:   every read at once (must measure at the direct floor)
- buffer: each whole response, in one write when its last byte came (the `await response.text()` shape): the
          client's request methods and the upstream's HTTP/1.1 responses are read (wire/client.py) only to find
          where each response ends, and its bytes go out exactly as they came; so a kept-alive connection and
          pipelined requests get every response. A close-delimited body, or bytes that are not HTTP we can read,
          are held until the upstream closes, then all of it
- cork:   hold until `cork_bytes` are queued or `cork_ms` have passed since the first held byte
          (Linux MSG_MORE / TCP_CORK, the behaviour that makes HAProxy deliver frames in bursts)
- gzip-hold, gzip-flush: HTTP-aware, the response body gzipped for a client that asked for it, without and with
          a flush per upstream read (controls/compress.py)

Over HTTP/2 (the client's preface decides, controls/relay.py): pass and cork as they are, buffer per stream
(controls/h2hold.py), the gzip modes refuse the connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Literal, Protocol

from tokenpath.controls.compress import CompressPolicy
from tokenpath.errors import InstrumentError, RemoteProtocolError
from tokenpath.wire.client import ClientConnection
from tokenpath.wire.requestmethods import RequestMethods

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
# ... and all its connections together at most this: the limit per response alone let 100 connections hold 6.4 GB.
MAX_HELD_BYTES = 512 << 20

# A write hands over the pieces released together, each as the upstream sent it: over TLS the relay sends them as
# separate records in one burst (what HAProxy 2.8+ does), which a client must still count as one arrival.
Write = Callable[[list[bytes]], None]
CallLater = Callable[[float, Callable[[], None]], "Cancellable"]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class BufferLimitExceeded(InstrumentError):
    """A hold policy was sent more than it may hold: the control cannot model that proxy any more."""


class HeldBytes:
    """What every buffering policy of this relay process holds, together, against `limit`: the connection whose
    read would take it past the limit gives up (BufferLimitExceeded, the connection closed), as one past its own
    response limit does, and the others go on. Each policy gives back what it held when it releases or closes."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int = MAX_HELD_BYTES) -> None:
        self.held = 0
        self.limit = limit

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise BufferLimitExceeded(
                f"the relay's connections would hold over {self.limit} bytes together ({self.held} held now)"
            )
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


HELD = HeldBytes()  # the process's: every policy's unless given its own (tests)


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


class BufferPolicy:
    """Holds each HTTP/1.1 response whole and writes it in one piece when its last byte came (see the module's
    docstring). Waiting for the upstream's EOF instead would never answer a kept-alive client: the upstream keeps
    the connection open for the client's next request (controls/h2hold.py does the same per stream over HTTP/2)."""

    def __init__(self, write: Write, limit: int = MAX_BUFFER_BYTES, held: HeldBytes = HELD) -> None:
        self._write = write
        self._held: list[bytes] = []  # the bytes of the response being read (of everything, once `_raw`)
        self._size = 0
        self._limit = limit
        self._all_held = held
        self._requests = RequestMethods()
        self._response: ClientConnection | None = None  # the response being read
        self._method = "GET"  # the method of the request it answers
        self._ended = False  # its end was parsed
        self._raw = False  # no more responses we can read: everything is held until the upstream closes

    def observe_request(self, data: bytes) -> None:
        self._requests.feed(data)

    def feed(self, data: bytes) -> None:
        while data:
            if self._raw or (self._response is None and not self._next_response()):
                self._hold(data)
                return
            end = self._parse(data)
            if end is None:
                self._hold(data)
                return
            self._hold(data[:end])
            self._release()
            data = data[end:]

    def finish(self) -> None:
        self._release()

    def close(self) -> None:
        self._held.clear()
        self._all_held.give(self._size)
        self._size = 0
        self._response = None

    def _hold(self, data: bytes) -> None:
        if self._size + len(data) > self._limit:
            raise BufferLimitExceeded(f"response larger than the buffer limit of {self._limit} bytes")
        self._all_held.take(len(data))
        self._size += len(data)
        self._held.append(data)

    def _release(self) -> None:
        if self._held:
            self._write([b"".join(self._held)])
            self._held.clear()
        self._all_held.give(self._size)
        self._size = 0
        self._response = None

    def _next_response(self) -> bool:
        """Read the next response, that of the oldest request not answered yet; False (and `_raw`) if none is known."""
        if not self._requests.methods:
            self._raw = True  # bytes with no request known to answer: not HTTP we can read
            return False
        self._method = self._requests.methods.popleft()
        self._response = self._reader()
        return True

    def _reader(self) -> ClientConnection:
        self._ended = False
        return ClientConnection(self._method, on_head=_ignore, on_body=_ignore, on_end=self._on_end)

    def _on_end(self) -> None:
        self._ended = True

    def _parse(self, data: bytes) -> int | None:
        """Where in `data` the response being read ends (the offset just past its last byte), or None if it goes on.
        The read is parsed less its last byte, then that byte: a response that ends with a read (no pipelining)
        is found at once; one that ends inside it is located by parsing it again from its start."""
        assert self._response is not None
        try:
            if len(data) > 1:
                self._response.receive_data(data[:-1])
                if self._ended:
                    return self._locate(data)
            self._response.receive_data(data[-1:])
        except RemoteProtocolError:  # bytes after the end that are not a response are the next response's problem
            if self._ended:
                return self._locate(data)
            self._raw = True  # not a response we can read (a 101 included): hold all until the upstream closes
            return None
        return len(data) if self._ended else None

    def _locate(self, data: bytes) -> int:
        """The smallest k such that the response's held bytes and data[:k] are the whole response (it ends within
        `data`): a bisection, each step a fresh parse of the response from its start."""
        prefix = b"".join(self._held)
        lo, hi = 1, len(data)  # the end is in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            probe = self._reader()
            with contextlib.suppress(RemoteProtocolError):
                probe.receive_data(prefix + data[:mid])
            if self._ended:
                hi = mid
            else:
                lo = mid + 1
        self._ended = True
        return hi


def _ignore(_: object) -> None:
    pass


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
