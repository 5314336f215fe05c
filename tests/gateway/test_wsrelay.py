"""gateway/wsrelay.py without sockets: a session between a scripted client transport and a scripted member link, both
upgraded, bytes in and frames out (the e2e files run the same against real processes)."""

from __future__ import annotations

import asyncio
import re
from typing import Any, cast

from tests.gateway.wspeer import CLOSE, CONTINUATION, TEXT, Frame, FrameReader, close, frame
from tokenpath.gateway import wsrelay
from tokenpath.gateway.config import Limits
from tokenpath.gateway.link import UpstreamLink
from tokenpath.gateway.wsrelay import WsRelay, WsSettings, WsTally
from tokenpath.gateway.wsupstream import UpstreamWs
from tokenpath.wire.websocket import accept_token


class FakeTransport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def frames(self) -> list[Frame]:
        reader = FrameReader(cast(Any, None), bytes(self.out))
        out: list[Frame] = []
        while len(reader.buf) >= 2 and (f := reader.next()) is not None:
            out.append(f)
        self.out.clear()
        return out


class FakeLink:
    """What UpstreamWs uses of an UpstreamLink."""

    def __init__(self) -> None:
        self.transport = FakeTransport()

    @property
    def closing(self) -> bool:
        return self.transport.closed

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def abort(self) -> None:
        self.transport.closed = True

    def close(self) -> None:
        self.transport.closed = True

    def settle(self, failure: object) -> None:
        pass


def session(limits: Limits | None = None) -> tuple[WsRelay, FakeTransport, FakeLink, list[WsTally]]:
    settings = WsSettings.of(limits or Limits())
    link = FakeLink()
    upstream = UpstreamWs(cast(UpstreamLink, link), settings.upstream, lambda: 0)
    upstream.offer("member", "/v1/responses", [])
    key = re.search(rb"Sec-WebSocket-Key: (\S+)", bytes(link.transport.out), re.IGNORECASE)
    assert key is not None
    link.transport.out.clear()
    upstream.received(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
        + accept_token(key.group(1).decode()).encode()
        + b"\r\n\r\n"
    )
    assert upstream.answer.done()
    ended: list[WsTally] = []
    relay = WsRelay(upstream, settings, lambda: 0, ended.append)
    client = FakeTransport()
    relay.connection_made(cast(asyncio.Transport, client))
    return relay, client, link, ended


def run(test: Any) -> None:
    async def main() -> None:
        test()

    asyncio.run(main())


def test_one_message_in_is_one_frame_out_both_ways_and_fragments_go_on_whole() -> None:
    def body() -> None:
        relay, client, link, _ = session()
        link.transport.out.clear()
        relay.upstream.received(b"".join(frame(TEXT, b'{"n":%d}' % i, mask=False) for i in range(3)))
        expected = [(TEXT, True, b'{"n":%d}' % i) for i in range(3)]
        assert [(f.opcode, f.fin, f.payload) for f in client.frames()] == expected
        relay.data_received(frame(TEXT, b'{"a"', fin=False) + frame(CONTINUATION, b":1}"))
        assert [(f.opcode, f.fin, f.payload) for f in link.transport.frames()] == [(TEXT, True, b'{"a":1}')]

    run(body)


def test_the_member_gone_is_1011_to_the_client_and_the_session_ends_once() -> None:
    def body() -> None:
        relay, client, link, ended = session()
        relay.upstream.lost(None)
        got = client.frames()
        assert [f.opcode for f in got] == [CLOSE]
        assert got[0].close_code == 1011
        assert link.transport.closed
        relay.data_received(close(1011))  # the client's reply
        assert client.closed
        relay.connection_lost(None)
        assert len(ended) == 1
        assert (ended[0].upstream_close, ended[0].client_close, ended[0].closed_by) == (1006, 1011, "upstream")

    run(body)


def test_a_client_close_goes_to_the_member_and_its_reply_ends_the_session() -> None:
    def body() -> None:
        relay, client, link, ended = session()
        link.transport.out.clear()
        relay.data_received(close(4001, "done"))
        assert [f.close_code for f in client.frames()] == [4001]  # the handshake's reply
        assert [(f.close_code, f.close_reason) for f in link.transport.frames()] == [(4001, "done")]
        assert not ended
        relay.upstream.received(close(4001, mask=False))
        relay.connection_lost(None)
        assert len(ended) == 1
        assert ended[0].closed_by == "client"

    run(body)


def test_each_side_s_full_buffer_stops_reading_the_other() -> None:
    def body() -> None:
        relay, client, link, _ = session()
        seen = []
        relay.pause_writing()  # the client's buffer is over the write buffer limit
        seen.append(link.transport.reading)
        relay.resume_writing()
        seen.append(link.transport.reading)
        relay.upstream.writing_paused()  # the member's
        seen.append(client.reading)
        relay.upstream.writing_resumed()
        seen.append(client.reading)
        assert seen == [False, True, False, True]

    run(body)


def test_a_session_past_ws_session_s_is_closed_1001_both_ways_and_none_is_by_default() -> None:
    async def main() -> None:
        relay, client, link, _ = session(Limits(ws_session_s=0.05))
        unlimited, unlimited_client, _, _ = session()
        link.transport.out.clear()
        await asyncio.sleep(0.5)
        got = client.frames()
        assert [(f.opcode, f.close_code) for f in got] == [(CLOSE, 1001)]
        assert "ws_session_s" in got[0].close_reason
        assert [f.close_code for f in link.transport.frames()] == [1001]
        assert relay.tally.closed_by == "gateway"
        assert unlimited_client.frames() == []  # off by default: still open
        assert unlimited.client_open

    asyncio.run(main())


def _live_timers() -> list[asyncio.TimerHandle]:
    """The timers the running loop still holds and will fire (a cancelled one stays in the heap until it is due)."""
    loop = asyncio.get_running_loop()
    return [h for h in cast(Any, loop)._scheduled if not h.cancelled()]


def test_a_clean_close_leaves_no_timer_on_the_loop() -> None:
    """Both sides' close handshakes done and both sockets ended by their peers: the drop-after-close timers (one a
    side) are cancelled, so a session that ended cleanly holds nothing on the loop for CLOSE_WAIT_S more."""

    def body() -> None:
        before = len(_live_timers())
        relay, client, link, ended = session()
        relay.data_received(close(1000))
        relay.upstream.received(close(1000, mask=False))  # the member's reply
        assert client.closed
        assert link.transport.closed
        assert len(_live_timers()) == before + 2  # each side dropped CLOSE_WAIT_S from now if it never ends
        relay.upstream.lost(None)
        relay.connection_lost(None)
        assert len(ended) == 1
        assert len(_live_timers()) == before

    run(body)


def test_a_member_gone_without_a_close_leaves_no_timer_either() -> None:
    """The member's connection ends first (no close frame): its drop is never scheduled (nothing left to drop), and
    the client's is cancelled by its end."""

    def body() -> None:
        before = len(_live_timers())
        relay, client, _, ended = session()
        relay.upstream.lost(None)  # 1011 to the client
        relay.data_received(close(1011))  # its reply
        assert client.closed
        relay.connection_lost(None)
        assert len(ended) == 1
        assert len(_live_timers()) == before

    run(body)


def test_a_side_that_never_ends_after_the_close_is_dropped(monkeypatch: Any) -> None:
    """The other half of the above: sockets that never end after the close are aborted CLOSE_WAIT_S later."""
    monkeypatch.setattr(wsrelay, "CLOSE_WAIT_S", 0.01)
    aborted: list[str] = []

    async def main() -> None:
        relay, client, link, _ = session()
        client.abort = lambda: aborted.append("client")  # type: ignore[method-assign]
        link.abort = lambda: aborted.append("member")  # type: ignore[method-assign]
        relay.data_received(close(1000))
        relay.upstream.received(close(1000, mask=False))
        await asyncio.sleep(0.5)  # far past the wait; neither socket ever ended

    asyncio.run(main())
    assert sorted(aborted) == ["client", "member"]
