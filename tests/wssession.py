"""WebSocket sessions in the tests, from either end: scripted servers on loopback that answer one upgrade by hand
(the probe's and the load client's tests: a peer that refuses, coalesces, closes mid-stream), and a session read
with clients the project did not write (`websockets`, the openai SDK) against the stub or through the gateway."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from websockets.sync.client import ClientConnection

from tests.helpers import accept_each

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# The Realtime API's user item (conversation.item.create), text only.
REALTIME_ITEM: dict[str, Any] = {
    "type": "conversation.item.create",
    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
}

# --- scripted servers --------------------------------------------------------------------------------------------


def read_offer(conn: socket.socket) -> bytes | None:
    """An upgrade offer's head (and whatever came with it), or None: the client left before its end."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data


def offer_key(offer: bytes) -> str:
    """The offer's Sec-WebSocket-Key."""
    return next(
        line.split(b":", 1)[1].strip().decode()
        for line in offer.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )


def scripted(answer: Callable[[socket.socket, str], None]) -> Iterator[str]:
    """A loopback server that reads each connection's upgrade offer and hands the socket and its
    Sec-WebSocket-Key to `answer`; yields its URL once (`for url in scripted(...)`), closed after."""
    listener = socket.create_server(("127.0.0.1", 0))

    def handle(conn: socket.socket) -> None:
        with conn:
            offer = read_offer(conn)
            if offer is None:
                return
            with contextlib.suppress(OSError):
                answer(conn, offer_key(offer))

    accept_each(listener, handle)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def accept_101(key: str) -> bytes:
    """The 101 that accepts an offer with this Sec-WebSocket-Key."""
    token = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {token}\r\n\r\n"
    ).encode()


def server_text(obj: dict[str, object]) -> bytes:
    """One short text message as a server sends it (unmasked, one frame)."""
    payload = json.dumps(obj).encode()
    assert len(payload) < 126
    return bytes([0x81, len(payload)]) + payload


# --- clients we did not write --------------------------------------------------------------------------------------


def recv_event(ws: ClientConnection, timeout_s: float = 10) -> dict[str, Any]:
    """The next message, parsed alone: one text message is one whole event, never split nor joined."""
    message = ws.recv(timeout=timeout_s)
    assert isinstance(message, str)
    event = json.loads(message)
    assert isinstance(event, dict)
    return event


def messages_until(ws: ClientConnection, *last: str) -> list[str]:
    """The messages, as sent, up to the first whose type is one of `last` (the response's end), that one included."""
    out: list[str] = []
    while True:
        message = ws.recv(timeout=10)
        assert isinstance(message, str)
        out.append(message)
        if json.loads(message)["type"] in last:
            return out


def events_until(ws: ClientConnection, *last: str) -> list[dict[str, Any]]:
    """messages_until's messages, each parsed alone."""
    return [json.loads(message) for message in messages_until(ws, *last)]


def sdk_deltas(conn: Iterable[Any], last: str) -> tuple[list[str], str]:
    """An openai SDK connection's events up to `last`: their types, and the text of their output_text deltas."""
    types, text = [], ""
    for event in conn:
        types.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type == last:
            break
    return types, text


def openai_sdk(responses_websocket: bool = False) -> Any:
    """The official openai SDK, or the test skipped: not installed, or (`responses_websocket`) too old for the
    Responses WebSocket mode (`client.responses.connect()`, openai >= 2.22). Asked before any process starts."""
    openai = pytest.importorskip("openai")
    if responses_websocket and not hasattr(openai.OpenAI(api_key="x").responses, "connect"):
        pytest.skip(f"openai {openai.__version__} has no Responses WebSocket mode")
    return openai


def sdk_realtime(openai: Any, base_url: str, api_key: str) -> tuple[list[str], str]:
    """`client.realtime.connect()`: a text item, response.create, its events to response.done (sdk_deltas)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=10)
    with client.realtime.connect(model="gpt-realtime") as conn:
        conn.conversation.item.create(item=REALTIME_ITEM["item"])
        conn.response.create()
        return sdk_deltas(conn, "response.done")


def sdk_responses(openai: Any, base_url: str, api_key: str) -> tuple[list[str], str]:
    """`client.responses.connect()`: one response.create, its events to response.completed (sdk_deltas)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=10)
    with client.responses.connect() as conn:
        conn.response.create(model="m", input="hi")
        return sdk_deltas(conn, "response.completed")
