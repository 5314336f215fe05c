"""The server core's side of a WebSocket offer (wire/server.py with ServerLimits.upgrades) and the endpoint's limits
that the stub's tests do not reach (wire/websocket.py): sans-IO, no sockets."""

from __future__ import annotations

import os

import pytest

from tokenpath.errors import RemoteProtocolError
from tokenpath.wire.limits import MAX_HEAD_BYTES, ServerLimits
from tokenpath.wire.server import ServerConnection
from tokenpath.wire.websocket import Closed, MessageReceived, WebSocketEndpoint, WebSocketLimits

OFFER = (
    b"GET /v1/responses HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: a2V5a2V5a2V5a2V5a2V5aw==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
TAKES = ServerLimits(max_body_bytes=1 << 20, upgrades=frozenset({"websocket"}))


def test_an_accepted_offer_reaches_the_handler_and_what_follows_is_held() -> None:
    conn = ServerConnection(TAKES)
    conn.receive_data(OFFER + b"\x81\x85first")
    conn.receive_data(b"second")
    request = conn.next_request()
    assert request is not None
    assert request.header("upgrade") == "websocket"  # kept for the handler (an h2c offer's is dropped)
    assert not request.keep_alive  # answered in HTTP instead: the connection closes after it
    assert conn.next_request() is None  # what follows is never parsed as a next request
    assert conn.take_after_upgrade() == b"\x81\x85firstsecond"


def test_an_offer_is_refused_where_the_limits_do_not_take_it() -> None:
    conn = ServerConnection(ServerLimits(max_body_bytes=1 << 20))
    with pytest.raises(RemoteProtocolError, match="not supported"):
        conn.receive_data(OFFER)


def test_bytes_past_a_head_s_worth_before_the_answer_are_refused() -> None:
    conn = ServerConnection(TAKES)
    conn.receive_data(OFFER)
    with pytest.raises(RemoteProtocolError, match="before the upgrade was answered"):
        conn.receive_data(b"x" * (MAX_HEAD_BYTES + 1))


def test_an_offer_with_a_body_is_refused() -> None:
    conn = ServerConnection(TAKES)
    with pytest.raises(RemoteProtocolError, match="cannot carry a body"):
        conn.receive_data(OFFER.replace(b"\r\n\r\n", b"\r\nContent-Length: 5\r\n\r\n") + b"hello")


def _masked(first: int, payload: bytes) -> bytes:
    key = os.urandom(4)
    return bytes([first, 0x80 | len(payload)]) + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def test_a_message_in_too_many_frames_is_closed_1008() -> None:
    ws = WebSocketEndpoint.server(WebSocketLimits(max_fragments=8))
    frames = _masked(0x01, b"a") + b"".join(_masked(0x00, b"a") for _ in range(20))  # text, then continuations
    events = ws.receive(frames, 0)
    assert not any(isinstance(e, MessageReceived) for e in events)
    assert events[-1] == Closed(1008, "a message in over 8 frames", by_peer=False)
    ok = WebSocketEndpoint.server(WebSocketLimits(max_fragments=8))
    whole = _masked(0x01, b"a") + b"".join(_masked(0x00, b"a") for _ in range(6)) + _masked(0x80, b"z")
    assert ok.receive(whole, 0) == [MessageReceived("aaaaaaaz", 8, 8)]


def test_a_binary_message_is_closed_1003() -> None:
    ws = WebSocketEndpoint.server(WebSocketLimits())
    events = ws.receive(_masked(0x82, b"\x00\x01"), 0)
    assert isinstance(events[-1], Closed)
    assert events[-1].code == 1003
    close = ws.data_to_send()
    assert close[0] == 0x88  # our close frame, unmasked (a server's)
    assert close[2:4] == (1003).to_bytes(2, "big")
