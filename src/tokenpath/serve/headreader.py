"""Request heads read on one thread for a thread-per-request server (serve/exposition.py): a client that sends its
head slowly costs a socket and a buffer here, never one of the server's few threads. Go's ReadHeaderTimeout, with
the waiting done by a selector instead of a thread per connection.

    HeadReader(on_head, timeout_s).add(sock, address)
        -> on_head(sock, address, data) on the reader's thread once `sock` has sent a whole head (request line,
           headers, the blank line); `data` is every byte read, the head and whatever followed it. It returns True
           when it took the socket, False when it cannot serve it yet (no thread free for it): the head is then
           kept, offered again after each retry() (oldest first; a head whole while others are kept queues
           behind them), and answered 503 (Retry-After: 1) and closed if none took it within `timeout_s`; a
           kept head whose client has left meanwhile (reset its connection, or closed it having sent nothing after
           the head) is closed, not offered: nginx ends a request so whose upstream it waits for (499,
           ngx_http_test_reading); a kept head that brought more (a body, a pipelined request) is offered. A head
           offered at once is offered whatever follows it (a client may half-close after its request).

A connection is closed instead when its whole head has not arrived `timeout_s` after add() (however it drips: the
deadline is the whole head's, not each read's), when it ends first, or when its head grows past max_head_bytes
(431). With max_waiting connections waiting, a new one closes the oldest connection of the address (the IP, not the
port) that holds the most waiting, the oldest of all such addresses' on a tie: a flood of silent sockets from one
address costs that address's own oldest, never a scrape from another address that holds fewer (however long it takes
to send its head), nor the scrape that just connected and sends its head at once.

A 431 is followed by a lingering close (nginx's lingering_close): the write side shut, what the client still sends
read and dropped, for at most LINGER_S and LINGER_BYTES. Closed at once, a socket with unread bytes answers them with
a reset, which can reach the client before it has read the 431 (a 200 KB head was answered so). At most max_waiting
linger, and past that the same rule closes one: the oldest of the address holding the most. So do at most
max_waiting whole heads kept for a thread (a client's next request, sent the moment it read the last byte of its
answer, can come before the thread that wrote it is given back); one closed so is answered 503 first.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tokenpath.wire.limits import MAX_HEAD_BYTES

log = logging.getLogger(__name__)

# Connections waiting for their head at once: a Prometheus or two scrape a metrics port, so 64 is room to spare for
# honest clients, at most 1 MiB of heads (MAX_HEAD_BYTES each), and 64 file descriptors. As many may linger after a
# 431 and as many whole heads be kept for a thread: 192 descriptors in all, at most.
MAX_WAITING = 64
READ_BYTES = 4096
_HEAD_ENDS = (b"\n\r\n", b"\n\n")  # the blank line, as http.client reads it (CRLF or bare LF)
LINGER_S = 2.0  # a refused client's rest of its head, read and dropped for this long at most ...
LINGER_BYTES = 1 << 20  # ... and this much: past either, the socket is closed however it ends
TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%b"
_BUSY_REASON = b"no thread was free for this request in time\n"
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%b" % (
    len(_BUSY_REASON),
    _BUSY_REASON,
)

OnHead = Callable[[socket.socket, Any, bytes], bool]


def _head_only(data: bytes) -> bool:
    """`data` is one request head and nothing after it."""
    ends = [found + len(end) for end in _HEAD_ENDS if (found := data.find(end)) >= 0]
    return bool(ends) and min(ends) == len(data)


def client_ip(address: Any) -> Any:
    """The client an address counts as for fairness: the IP of an (ip, port[, flow, scope]) tuple, not its port."""
    return address[0] if isinstance(address, tuple) and address else address


@dataclass(slots=True)
class _Entry:
    ip: Any  # client_ip(): what the eviction rule counts by
    deadline: float


@dataclass(slots=True)
class _Waiting(_Entry):
    address: Any = None
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class _Ready(_Entry):
    address: Any = None
    data: bytes = b""
    kept: bool = False  # offered once and not taken: it waits for a thread
    head_only: bool = False  # `data` ends at the head's blank line: a close after it leaves nothing to answer

    def left(self, sock: socket.socket) -> bool:
        """Its client is gone: the connection reset, or closed after a request of nothing but this head."""
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"" and self.head_only
        except BlockingIOError:
            return False  # still there, and quiet
        except OSError:
            return True  # reset


@dataclass(slots=True)
class _Lingering(_Entry):
    dropped: int = 0  # bytes read and dropped since the refusal


E = TypeVar("E", bound=_Entry)


class _Queue(Generic[E]):
    """Connections oldest first (so their deadlines are in order too), counted by IP, so that a full queue's victim
    is the oldest of the IP holding the most (ties: the oldest of those IPs'). add() and pop() are O(1); victim()
    walks from the oldest to the first of an IP holding the most, at most the queue's length (max_waiting), and in a
    one-address flood the first or second."""

    __slots__ = ("_held", "_holding", "_most", "entries")

    def __init__(self) -> None:
        self.entries: dict[socket.socket, E] = {}  # insertion order is age
        self._held: dict[Any, int] = {}  # connections per IP
        self._holding: Counter[int] = Counter()  # IPs per count of connections: the most stays O(1) to keep
        self._most = 0  # the most connections any one IP holds

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, sock: object) -> bool:
        return sock in self.entries

    def __iter__(self) -> Iterator[socket.socket]:
        return iter(self.entries)

    def add(self, sock: socket.socket, entry: E) -> None:
        self.entries[sock] = entry
        held = self._held.get(entry.ip, 0) + 1
        self._held[entry.ip] = held
        if held > 1:
            self._holding[held - 1] -= 1
        self._holding[held] += 1
        self._most = max(self._most, held)

    def pop(self, sock: socket.socket) -> E | None:
        entry = self.entries.pop(sock, None)
        if entry is None:
            return None
        held = self._held[entry.ip]
        self._holding[held] -= 1
        if held == 1:
            del self._held[entry.ip]
        else:
            self._held[entry.ip] = held - 1
            self._holding[held - 1] += 1
        if held == self._most and not self._holding[held]:
            self._most = held - 1  # this IP was the last holding the most: it holds one fewer now
        return entry

    def victim(self) -> socket.socket:
        """The connection to close to make room (the queue is not empty)."""
        most = (sock for sock, entry in self.entries.items() if self._held[entry.ip] == self._most)
        found = next(most, None)
        return found if found is not None else next(iter(self.entries))  # were _most off: not a dead reader thread


class HeadReader:
    def __init__(
        self,
        on_head: OnHead,
        timeout_s: float,
        max_waiting: int = MAX_WAITING,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        self._on_head = on_head
        self._timeout_s = timeout_s
        self._max_waiting = max_waiting
        self._max_head_bytes = max_head_bytes
        self._selector = selectors.DefaultSelector()
        self._wake_in, self._wake_out = socket.socketpair()  # add() and close() write a byte: select() returns
        for end in (self._wake_in, self._wake_out):
            end.setblocking(False)
        self._selector.register(self._wake_in, selectors.EVENT_READ)
        self._added: deque[tuple[socket.socket, Any, float]] = deque()  # from the accept thread
        self._waiting: _Queue[_Waiting] = _Queue()  # oldest first: the first deadline first
        self._lingering: _Queue[_Lingering] = _Queue()  # refused (431), oldest first, at most max_waiting
        self._ready: _Queue[_Ready] = _Queue()  # whole heads on_head could not take yet, oldest first
        self._retry = False  # set by retry() from any thread: offer the ready heads again
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="request-heads", daemon=True)
        self._thread.start()

    def add(self, sock: socket.socket, address: Any) -> None:
        """Wait for `sock`'s head (called from any thread; the deadline starts now)."""
        self._added.append((sock, address, time.monotonic() + self._timeout_s))
        self._wake()

    def retry(self) -> None:
        """Offer the heads on_head could not take to it again (called from any thread: one was given back)."""
        self._retry = True
        self._wake()

    def close(self) -> None:
        """Stop, closing every connection still waiting for its head or for on_head to take it."""
        self._closing = True
        self._wake()
        self._thread.join(5)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (it wakes anyway) or closed (stopped)
            self._wake_out.send(b"\0")

    def _run(self) -> None:
        try:
            while not self._closing:
                ready = self._selector.select(self._next_timeout())
                if self._retry:  # first: a thread given back goes to the oldest kept head, not one whole just now
                    self._retry = False  # before the offers: a retry() during them is another round
                    self._offer_ready()
                for key, _ in ready:
                    if key.data is None:  # the wake-up socket
                        self._drain_wake()
                    elif key.data in self._waiting or key.data in self._lingering:
                        self._read(key.data)
                    # else: closed earlier in this batch (a refusal evicted the oldest lingering socket)
                self._take_added()
                self._expire()
        finally:
            for sock in [*self._waiting, *self._lingering]:
                self._drop(sock)
            for sock in self._ready:
                sock.close()
            while self._added:
                self._added.popleft()[0].close()
            self._selector.close()
            self._wake_in.close()
            self._wake_out.close()

    def _next_timeout(self) -> float | None:
        firsts = (next(iter(queue.entries.values()), None) for queue in self._queues())
        deadlines = [first.deadline for first in firsts if first is not None]  # each queue's oldest is its first due
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _queues(self) -> tuple[_Queue[_Waiting], _Queue[_Lingering], _Queue[_Ready]]:
        return self._waiting, self._lingering, self._ready

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):  # BlockingIOError once it is empty
            while self._wake_in.recv(4096):
                pass

    def _take_added(self) -> None:
        while self._added:
            sock, address, deadline = self._added.popleft()
            if len(self._waiting) >= self._max_waiting:
                self._drop(self._waiting.victim())
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, sock)
            self._waiting.add(sock, _Waiting(client_ip(address), deadline, address))

    def _expire(self) -> None:
        now = time.monotonic()
        for queue in self._queues():
            while queue:
                sock, entry = next(iter(queue.entries.items()))
                if entry.deadline > now:
                    break
                self._close(queue, sock)

    def _read(self, sock: socket.socket) -> None:
        try:
            chunk = sock.recv(READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # it left before its head was whole (or, refused, it has stopped sending)
            self._drop(sock)
            return
        lingering = self._lingering.entries.get(sock)
        if lingering is not None:
            lingering.dropped += len(chunk)
            if lingering.dropped > LINGER_BYTES:
                self._drop(sock)
            return
        waiting = self._waiting.entries[sock]
        searched = max(0, len(waiting.data) - 2)
        waiting.data += chunk
        if not any(waiting.data.find(end, searched) >= 0 for end in _HEAD_ENDS):
            if len(waiting.data) > self._max_head_bytes:
                self._refuse_too_large(sock)
            return
        self._selector.unregister(sock)
        self._waiting.pop(sock)
        sock.setblocking(True)
        data = bytes(waiting.data)
        ready = _Ready(
            waiting.ip, time.monotonic() + self._timeout_s, waiting.address, data, head_only=_head_only(data)
        )
        # It queues behind any heads already kept, and they are offered first: offered alone, it could take a thread
        # given back while this read was under way, before the retry() that says so reached this loop.
        if len(self._ready) >= self._max_waiting:
            self._close_left()  # a client that left makes room before one still waiting is answered 503
        if len(self._ready) >= self._max_waiting:
            self._close(self._ready, self._ready.victim())
        self._ready.add(sock, ready)
        self._offer_ready()

    def _offer(self, sock: socket.socket, ready: _Ready) -> bool:
        """Whether on_head took `sock` (or failed on it, and it is closed): False keeps it for a retry."""
        try:
            return self._on_head(sock, ready.address, ready.data)
        except Exception:  # the server's bug, not this connection's: the others still get their heads read
            log.exception("serving a request head failed")
            sock.close()
            return True

    def _offer_ready(self) -> None:
        for sock, ready in list(self._ready.entries.items()):  # oldest first
            if self._closed_if_left(sock, ready):
                continue
            if self._offer(sock, ready):
                self._ready.pop(sock)
            else:
                ready.kept = True

    def _close_left(self) -> None:
        for sock, ready in list(self._ready.entries.items()):
            self._closed_if_left(sock, ready)

    def _closed_if_left(self, sock: socket.socket, ready: _Ready) -> bool:
        """A kept head whose client has gone is closed (nothing to answer: see the module's docstring)."""
        if not (ready.kept and ready.left(sock)):
            return False
        self._ready.pop(sock)
        sock.close()
        return True

    def _refuse_too_large(self, sock: socket.socket) -> None:
        reason = b"the request head is longer than %d bytes\n" % self._max_head_bytes
        try:  # best effort: the client may not read it
            sock.send(TOO_LARGE % (len(reason), reason))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(sock)
            return
        waiting = self._waiting.pop(sock)  # still registered: its reads now dropped (_read), until it ends or LINGER_S
        assert waiting is not None
        if len(self._lingering) >= self._max_waiting:
            self._drop(self._lingering.victim())
        self._lingering.add(sock, _Lingering(waiting.ip, time.monotonic() + LINGER_S))

    def _close(self, queue: _Queue[Any], sock: socket.socket) -> None:
        if queue is self._ready:  # not registered: its reads are the server's once a thread takes it
            self._ready.pop(sock)
            with contextlib.suppress(OSError):  # best effort, never blocking: a 503 says why, where EOF would not
                sock.send(BUSY, socket.MSG_DONTWAIT)
            sock.close()
        else:
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self._selector.unregister(sock)
        if self._waiting.pop(sock) is None and self._lingering.pop(sock) is None:
            raise KeyError(sock)  # neither waiting nor lingering: a bug, as unregister() would have said
        sock.close()
