"""wire/websocket.py's own pings (the gateway's idle check): ping() out, PongReceived back, nothing once closing."""

from __future__ import annotations

from tokenpath.wire.websocket import PongReceived, WebSocketEndpoint, WebSocketLimits


def test_a_ping_of_ours_is_one_ping_frame() -> None:
    server = WebSocketEndpoint.server(WebSocketLimits())
    assert server.ping(b"are you there") == bytes([0x89, 13]) + b"are you there"  # a server's: unmasked


def test_no_ping_once_closing() -> None:
    server = WebSocketEndpoint.server(WebSocketLimits())
    server.close(1000)
    assert server.ping(b"x") == b""


def test_a_pong_is_an_event() -> None:
    server = WebSocketEndpoint.server(WebSocketLimits())
    masked_pong = bytes([0x8A, 0x80 | 2]) + b"\x00\x00\x00\x00" + b"hi"  # a client's pong, masked with zeros
    assert server.receive(masked_pong, 0) == [PongReceived(b"hi")]
