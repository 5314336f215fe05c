from __future__ import annotations

from collections.abc import Callable

import pytest

from tokenpath.controls.policies import BufferLimitExceeded, BufferPolicy, CorkPolicy, HeldBytes, PassPolicy


class FakeTimers:
    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None], FakeTimers.Handle]] = []

    class Handle:
        def __init__(self) -> None:
            self.cancelled = False

        def cancel(self) -> None:
            self.cancelled = True

    def call_later(self, delay: float, fn: Callable[[], None]) -> FakeTimers.Handle:
        handle = FakeTimers.Handle()
        self.pending.append((delay, fn, handle))
        return handle

    def fire_all(self) -> None:
        pending, self.pending = self.pending, []
        for _, fn, handle in pending:
            if not handle.cancelled:
                fn()


def test_pass_writes_every_read_at_once() -> None:
    out: list[list[bytes]] = []
    policy = PassPolicy(out.append)
    policy.feed(b"a")
    policy.feed(b"b")
    assert out == [[b"a"], [b"b"]]


def test_buffer_writes_everything_once_at_eof() -> None:
    out: list[list[bytes]] = []
    policy = BufferPolicy(out.append)
    for part in (b"a", b"b", b"c"):
        policy.feed(part)
    assert out == []
    policy.finish()
    assert out == [[b"abc"]]


def test_buffer_has_a_limit() -> None:
    policy = BufferPolicy(lambda b: None, limit=4)
    policy.feed(b"abcd")
    with pytest.raises(BufferLimitExceeded):
        policy.feed(b"e")


def test_cork_flushes_on_size() -> None:
    out: list[list[bytes]] = []
    timers = FakeTimers()
    policy = CorkPolicy(out.append, timers.call_later, cork_bytes=10, cork_ms=200)
    policy.feed(b"12345")
    assert out == []
    policy.feed(b"67890x")
    assert out == [[b"12345", b"67890x"]]  # released together, each piece as it came
    assert timers.pending[0][2].cancelled


def test_cork_flushes_on_timer_started_by_the_first_held_byte() -> None:
    out: list[list[bytes]] = []
    timers = FakeTimers()
    policy = CorkPolicy(out.append, timers.call_later, cork_bytes=1000, cork_ms=200)
    policy.feed(b"a")
    policy.feed(b"b")
    assert [d for d, _, _ in timers.pending] == [0.2]  # one timer, from the first byte, not re-armed
    timers.fire_all()
    assert out == [[b"a", b"b"]]
    policy.feed(b"c")
    assert len(timers.pending) == 1
    policy.finish()
    assert out == [[b"a", b"b"], [b"c"]]


# buffer over HTTP/1.1 keep-alive: each response leaves whole when its last byte came, not at the upstream's EOF ----
GET = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


def test_buffer_releases_each_keep_alive_response_at_its_end() -> None:
    out: list[list[bytes]] = []
    policy = BufferPolicy(out.append)
    policy.observe_request(GET)
    for part in (CHUNKED[:30], CHUNKED[30:50], CHUNKED[50:-1]):
        policy.feed(part)
        assert out == []
    policy.feed(CHUNKED[-1:])  # the upstream's last byte of it: no EOF, the connection stays open
    assert out == [[CHUNKED]]
    policy.observe_request(GET)  # the client's next request on the same connection
    policy.feed(LENGTH[:-2])
    assert out == [[CHUNKED]]
    policy.feed(LENGTH[-2:])
    assert out == [[CHUNKED], [LENGTH]]
    policy.finish()
    assert out == [[CHUNKED], [LENGTH]]


def test_buffer_releases_pipelined_responses_one_by_one() -> None:
    out: list[list[bytes]] = []
    policy = BufferPolicy(out.append)
    policy.observe_request(GET + b"HEAD /b HTTP/1.1\r\nHost: x\r\n\r\n" + GET)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"  # a HEAD response: no body whatever its length says
    policy.feed(CHUNKED + head + LENGTH[:10])  # two ends in one read, then the start of the third response
    assert out == [[CHUNKED], [head]]
    policy.feed(LENGTH[10:])
    assert out == [[CHUNKED], [head], [LENGTH]]


def test_buffer_byte_by_byte_keeps_every_byte() -> None:
    out: list[list[bytes]] = []
    policy = BufferPolicy(out.append)
    policy.observe_request(GET + GET)
    for i in range(len(CHUNKED + LENGTH)):
        policy.feed((CHUNKED + LENGTH)[i : i + 1])
    assert out == [[CHUNKED], [LENGTH]]


def test_buffer_holds_a_close_delimited_body_until_eof() -> None:
    out: list[list[bytes]] = []
    policy = BufferPolicy(out.append)
    policy.observe_request(GET)
    policy.feed(b"HTTP/1.1 200 OK\r\n\r\nab")
    policy.feed(b"cd")
    assert out == []
    policy.finish()
    assert out == [[b"HTTP/1.1 200 OK\r\n\r\nabcd"]]


def test_buffer_limit_holds_per_response() -> None:
    policy = BufferPolicy(lambda b: None, limit=len(CHUNKED))
    policy.observe_request(GET + GET)
    policy.feed(CHUNKED)  # exactly the limit: released
    policy.feed(LENGTH[:-1])
    policy.feed(LENGTH[-1:])
    policy.observe_request(GET)
    with pytest.raises(BufferLimitExceeded):
        policy.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n" + b"x" * len(CHUNKED))


def test_buffer_holds_an_upgraded_connection_until_eof_and_keeps_the_client_bytes_flowing() -> None:
    """A WebSocket upgrade through the buffer relay: llhttp stops at the upgrade (HttpParserUpgrade, which is no
    HttpParserError: it raised out of observe_request and took the connection down), the client's frames after it
    are not requests, and the 101 and everything after it are held until the upstream closes."""
    out: list[list[bytes]] = []
    policy = BufferPolicy(out.append)
    upgrade = b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    policy.observe_request(upgrade)
    policy.observe_request(b"\x81\x85abcd\x00\x00\x00\x00\x00")  # a masked client frame: not HTTP
    switched = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    policy.feed(switched)
    policy.feed(b"\x81\x02hi")
    assert out == []
    policy.finish()
    assert out == [[switched + b"\x81\x02hi"]]


def test_every_buffering_connection_together_is_held_to_one_limit_and_gives_back_what_it_released() -> None:
    """A limit per response alone let 100 connections hold 6.4 GB: the one whose read would take the relay past
    its total gives up; the others go on, and a released or closed connection's bytes are free again."""
    held = HeldBytes(limit=10)
    out: list[list[bytes]] = []
    first, second = BufferPolicy(out.append, held=held), BufferPolicy(out.append, held=held)
    first.feed(b"abcdef")  # no request known: held whole until the upstream ends
    with pytest.raises(BufferLimitExceeded, match=r"would hold over 10 bytes together \(6 held now\)"):
        second.feed(b"ghijk")
    second.feed(b"ghij")  # within what is left
    assert held.held == 10
    first.finish()  # written: its bytes are given back
    assert out == [[b"abcdef"]]
    assert held.held == 4
    second.feed(b"klmnop")
    second.close()  # a connection gone with its response held
    assert held.held == 0
    second.close()  # twice: nothing twice
    assert held.held == 0


def test_a_response_past_its_own_limit_takes_nothing_of_the_total() -> None:
    held = HeldBytes(limit=100)
    policy = BufferPolicy(lambda b: None, limit=4, held=held)
    with pytest.raises(BufferLimitExceeded, match="buffer limit of 4"):
        policy.feed(b"abcde")
    assert held.held == 0
