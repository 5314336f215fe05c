"""The stub's Responses WebSocket mode on a real loopback socket, against the `websockets` client (a WebSocket stack
the project did not write) and hostile raw peers: the same events as the SSE stream, one per message, paced and
audited; the limits (message size, unmasked frames, ping floods) close the connection with their codes."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.gateway.wspeer import CLOSE, PING, PONG, TEXT, FrameReader, frame, offer, session
from tests.helpers import exchange, post
from tests.wssession import messages_until, openai_sdk, sdk_responses
from tokenpath.audit import stream_label
from tokenpath.stub import websocket as stub_websocket
from tokenpath.stub.server import StubServer
from tokenpath.wire.request import STREAM_HEADER
from tokenpath.wire.websocket import MAX_MESSAGE_BYTES, PING_BURST

StartStub = Callable[..., StubServer]
CREATE = {"type": "response.create", "model": "m", "input": "hi"}
LAST = ("response.completed", "response.incomplete", "error")  # a response's last event


def _ws(stub: StubServer, stream_id: str | None = None) -> ClientConnection:
    headers = {STREAM_HEADER: stream_id} if stream_id else None
    url = f"ws://127.0.0.1:{stub.port}/v1/responses"
    return connect(url, additional_headers=headers, max_size=None, open_timeout=5, close_timeout=2)


def _sse_events(stub: StubServer, stream_id: str) -> list[str]:
    body = {"model": "m", "input": "hi", "stream": True}
    raw = exchange(stub.port, post("/v1/responses", body, extra=f"{STREAM_HEADER}: {stream_id}\r\n"))
    head, _, chunked = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    text = _dechunk(chunked).decode()
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


def _dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out += rest[:size]
        body = rest[size + 2 :]
    return out


def test_the_events_are_the_sse_stream_s_one_per_message_paced_and_audited(start_stub: StartStub) -> None:
    stub = start_stub(tokens=5, interval_ms=20, ttft_ms=30)
    with _ws(stub, "ws-one") as ws:
        ws.send(json.dumps(CREATE))
        messages = messages_until(ws, *LAST)
    sse = _sse_events(stub, "sse-one")
    label_ws, label_sse = stream_label("ws-one"), stream_label("sse-one")
    assert [m.replace(label_ws, "L") for m in messages] == [e.replace(label_sse, "L") for e in sse]
    assert [json.loads(m)["type"] for m in messages][-1] == "response.completed"
    log = stub.audit.get("ws-one")
    assert log is not None
    assert log.state == "complete"
    assert len(log.actual_ns) == len(messages)  # one audited write per message
    first = log.first_content
    assert first is not None
    assert log.scheduled_ns[first] - log.started_ns >= 30_000_000  # the TTFT the pacing asked for
    gaps = [b - a for a, b in zip(log.scheduled_ns[first:], log.scheduled_ns[first + 1 :], strict=False)][:4]
    assert all(g >= 20_000_000 for g in gaps)  # the token interval, as the SSE path's schedule


def test_responses_follow_one_another_on_one_connection(start_stub: StartStub) -> None:
    stub = start_stub(tokens=3, interval_ms=30, ttft_ms=0)
    with _ws(stub, "ws-two") as ws:
        ws.send(json.dumps(CREATE))
        ws.send(json.dumps(CREATE))  # while the first streams: refused, as OpenAI refuses it
        first = messages_until(ws, *LAST)
        types = [json.loads(m)["type"] for m in first]
        assert "error" in types
        error = json.loads(first[types.index("error")])
        assert error["error"]["code"] == "response_in_progress"
        rest = messages_until(ws, *LAST) if types[-1] == "error" else []
        ws.send(json.dumps({**CREATE, "tokenpath": {"tokens": 2}}))
        second = messages_until(ws, *LAST)
    assert json.loads((rest or first)[-1])["type"] == "response.completed"
    deltas = [m for m in second if json.loads(m)["type"] == "response.output_text.delta"]
    assert len(deltas) == 2  # the second response's own pacing
    assert stub.audit.get("ws-two") is not None


@pytest.mark.parametrize(
    ("event", "text"),
    [
        ({"type": "response.cancel"}, "unknown client event"),
        ({"type": "response.create", "model": "m"}, "'input'"),
        ({**CREATE, "background": True}, "background"),
        ({**CREATE, "tokenpath": {"heartbeat_ms": 10}}, "pings"),
    ],
)
def test_a_bad_client_event_is_an_error_event_and_the_socket_stays(
    start_stub: StartStub, event: dict[str, Any], text: str
) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    with _ws(stub) as ws:
        ws.send(json.dumps(event))
        error = json.loads(ws.recv(timeout=5))
        assert error["type"] == "error"
        assert text in error["error"]["message"]
        ws.send(json.dumps(CREATE))
        assert json.loads(messages_until(ws, *LAST)[-1])["type"] == "response.completed"


def test_an_oversized_message_closes_1009(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    with _ws(stub) as ws:
        ws.send("x" * (MAX_MESSAGE_BYTES + 1))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009


def _close_code(reader: FrameReader) -> int:
    """The code of the server's close frame, read up to the socket's end."""
    return next(f for f in reader.frames() if f.opcode == CLOSE).close_code


def test_an_unmasked_client_frame_closes_1002(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    sock, reader = session(stub.port)
    with sock:
        sock.sendall(frame(TEXT, json.dumps(CREATE).encode()[:120], mask=False))
        assert _close_code(reader) == 1002


def test_pings_are_answered_and_a_flood_is_closed_1008(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    sock, reader = session(stub.port)
    with sock:
        sock.sendall(frame(PING, b"one"))
        pong = reader.next()
        assert pong is not None
        assert (pong.fin, pong.opcode, pong.payload) == (True, PONG, b"one")
        sock.sendall(frame(PING, b"x") * (PING_BURST * 5))  # faster than any refill
        frames = reader.frames()
    assert next(f for f in frames if f.opcode == CLOSE).close_code == 1008
    assert sum(f.opcode == PONG and f.payload == b"x" for f in frames) < PING_BURST + 5  # bounded: not one per ping


def test_an_offer_the_stub_cannot_take_is_an_http_answer(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    template = (
        "GET /v1/responses HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: {version}\r\n\r\n"
    )
    key = base64.b64encode(b"k" * 16).decode()
    old = exchange(stub.port, template.format(key=key, version="8").encode())
    assert old.startswith(b"HTTP/1.1 426")
    assert b"Sec-WebSocket-Version: 13" in old
    bad_key = exchange(stub.port, template.format(key="short", version="13").encode())
    assert bad_key.startswith(b"HTTP/1.1 400")
    for answer in (old, bad_key):  # answered in HTTP and closed (exchange reads to the close), said once
        assert answer.split(b"\r\n\r\n")[0].lower().count(b"connection: close") == 1, answer
    missing = template.replace("Sec-WebSocket-Key: {key}\r\n", "").format(version="13").encode()
    assert exchange(stub.port, missing).startswith(b"HTTP/1.1 400")
    chat_template = template.replace("/v1/responses", "/v1/chat/completions")
    chat = exchange(stub.port, chat_template.format(key=key, version="13").encode())
    assert chat.startswith(b"HTTP/1.1 405")  # a route without WebSocket mode: its POST-only answer, then closed


def test_the_openai_sdk_s_websocket_mode_streams_from_the_stub(start_stub: StartStub) -> None:
    """The official SDK's `client.responses.connect()` (openai >= 2.22): its parser takes every event the stub sends."""
    openai = openai_sdk(responses_websocket=True)
    stub = start_stub(tokens=4, interval_ms=5, ttft_ms=0)
    types, text = sdk_responses(openai, f"http://127.0.0.1:{stub.port}/v1", "x")
    assert types[0] == "response.created"
    assert types.count("response.output_text.delta") == 4
    assert text.split() == ["alpha0", "bravo1", "charlie2", "delta3"]


def test_a_message_sent_with_the_upgrade_request_is_not_lost(start_stub: StartStub) -> None:
    """A client that does not wait for the 101 (the bytes after the offer, held by the server core, reach the
    session): the response streams."""
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    with socket.create_connection(("127.0.0.1", stub.port), timeout=5) as sock:
        sock.sendall(offer() + frame(TEXT, json.dumps(CREATE).encode()))
        data = b""
        while b"response.completed" not in data:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    assert data.startswith(b"HTTP/1.1 101")
    assert data.count(b"response.output_text.delta") == 2


def test_a_silent_session_is_closed_1001(start_stub: StartStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stub_websocket, "IDLE_S", 0.3)
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    sock, reader = session(stub.port)
    with sock:
        sock.settimeout(10)
        assert _close_code(reader) == 1001
