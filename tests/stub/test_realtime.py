"""The stub's Realtime session (GET /v1/realtime?model=..., WebSocket only) against the `websockets` client and the
official openai SDK's `client.realtime.connect()`: session.created first, the paced and audited response per
response.create, several responses per session, and hostile client events answered with `error` events."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.helpers import exchange, post
from tests.wssession import REALTIME_ITEM, events_until, openai_sdk, recv_event, sdk_realtime
from tokenpath.stub.realtime import ACTIVE_RESPONSE
from tokenpath.stub.server import StubServer
from tokenpath.wire.request import STREAM_HEADER

StartStub = Callable[..., StubServer]
CREATE: dict[str, Any] = {"type": "response.create"}


def _ws(stub: StubServer, stream_id: str | None = None) -> ClientConnection:
    headers = {STREAM_HEADER: stream_id} if stream_id else None
    url = f"ws://127.0.0.1:{stub.port}/v1/realtime?model=gpt-realtime"
    return connect(url, additional_headers=headers, max_size=None, open_timeout=5, close_timeout=2)


def test_a_text_session_streams_paced_and_audited_to_response_done(start_stub: StartStub) -> None:
    stub = start_stub(tokens=5, interval_ms=20, ttft_ms=30)
    with _ws(stub, "rt-one") as ws:
        created = recv_event(ws)
        assert created["type"] == "session.created"
        assert created["session"]["model"] == "gpt-realtime"
        ws.send(json.dumps(REALTIME_ITEM))
        assert [recv_event(ws)["type"] for _ in range(2)] == ["conversation.item.added", "conversation.item.done"]
        ws.send(json.dumps(CREATE))
        events = events_until(ws, "response.done")
    types = [e["type"] for e in events]
    assert types[:3] == ["response.created", "response.output_item.added", "response.content_part.added"]
    assert types[3:8] == ["response.output_text.delta"] * 5
    assert types[-1] == "response.done"
    assert events[-1]["response"]["status"] == "completed"
    assert len({e["event_id"] for e in events}) == len(events)  # every server event has its own id
    assert "".join(e["delta"] for e in events[3:8]).split() == ["alpha0", "bravo1", "charlie2", "delta3", "echo4"]
    log = stub.audit.get("rt-one")
    assert log is not None
    assert log.state == "complete"
    assert len(log.actual_ns) == len(events)  # one audited write per message (session events are not the stream's)
    assert log.first_content == 3  # the first response.output_text.delta
    assert log.scheduled_ns[3] - log.started_ns >= 30_000_000  # the TTFT the pacing asked for
    assert all(b - a >= 20_000_000 for a, b in zip(log.scheduled_ns[3:7], log.scheduled_ns[4:8], strict=True))


def test_several_responses_and_a_create_while_one_runs(start_stub: StartStub) -> None:
    stub = start_stub(tokens=3, interval_ms=30, ttft_ms=0)
    with _ws(stub, "rt-two") as ws:
        recv_event(ws)
        ws.send(json.dumps(REALTIME_ITEM))
        ws.send(json.dumps({**CREATE, "event_id": "client_1"}))
        ws.send(json.dumps({**CREATE, "event_id": "client_2"}))  # while the first streams: as the API answers it
        first = events_until(ws, "response.done")
        errors = [e for e in first if e["type"] == "error"]
        assert len(errors) == 1
        assert errors[0]["error"]["code"] == ACTIVE_RESPONSE
        assert errors[0]["error"]["event_id"] == "client_2"
        assert first[-1]["response"]["status"] == "completed"  # the running response went on
        ws.send(json.dumps({**CREATE, "response": {"tokenpath": {"tokens": 2}}}))
        second = events_until(ws, "response.done")
        ws.send(json.dumps({**CREATE, "response": {"max_output_tokens": 1}}))
        third = events_until(ws, "response.done")
    assert [e["type"] for e in second].count("response.output_text.delta") == 2  # its own pacing
    assert third[-1]["response"]["status"] == "incomplete"
    assert third[-1]["response"]["status_details"]["reason"] == "max_output_tokens"


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("not json {", "invalid_json"),
        (json.dumps([1, 2]), "invalid_value"),
        (json.dumps({"type": "response.cancel.everything"}), "invalid_value"),
        (json.dumps({"type": "conversation.item.create", "item": "text"}), "invalid_value"),
        (json.dumps({"type": "response.create", "response": "now"}), "invalid_value"),
        (json.dumps({"type": "response.create", "response": {"max_output_tokens": -1}}), "invalid_value"),
        (json.dumps({"type": "response.create", "response": {"tokenpath": {"heartbeat_ms": 5}}}), "invalid_value"),
    ],
)
def test_a_hostile_client_event_is_an_error_event_and_the_session_stays(
    start_stub: StartStub, message: str, code: str
) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    with _ws(stub) as ws:
        recv_event(ws)
        ws.send(message)
        error = recv_event(ws)
        assert error["type"] == "error"
        assert error["error"]["code"] == code
        assert error["error"]["type"] == "invalid_request_error"
        ws.send(json.dumps(CREATE))
        assert events_until(ws, "response.done")[-1]["response"]["status"] == "completed"


def test_a_binary_message_closes_1003(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    with _ws(stub) as ws:
        recv_event(ws)
        ws.send(b"\x00\x01binary")
        with pytest.raises(ConnectionClosed) as closed:
            recv_event(ws)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1003
    with _ws(stub) as ws:  # the stub goes on
        assert recv_event(ws)["type"] == "session.created"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_the_route_is_websocket_only(start_stub: StartStub, method: str) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0)
    if method == "POST":
        raw = exchange(stub.port, post("/v1/realtime", {"model": "m", "input": "hi", "stream": True}))
    else:
        raw = exchange(stub.port, b"GET /v1/realtime?model=m HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 426")
    assert b"upgrade: websocket" in head.lower()
    assert b"WebSocket only" in body


def test_the_openai_sdk_s_realtime_connect_streams_from_the_stub(start_stub: StartStub) -> None:
    """The official SDK's `client.realtime.connect()`: a text item, response.create, deltas to response.done."""
    openai = openai_sdk()
    stub = start_stub(tokens=4, interval_ms=5, ttft_ms=0)
    types, text = sdk_realtime(openai, f"http://127.0.0.1:{stub.port}/v1", "x")
    assert types[0] == "session.created"
    assert types.count("response.output_text.delta") == 4
    assert text.split() == ["alpha0", "bravo1", "charlie2", "delta3"]


def test_a_client_gone_mid_response_ends_its_audit_and_the_stub_goes_on(start_stub: StartStub) -> None:
    stub = start_stub(tokens=50, interval_ms=20, ttft_ms=0)
    with _ws(stub, "rt-gone") as ws:
        recv_event(ws)
        ws.send(json.dumps(CREATE))  # no conversation item: an empty conversation still gets a response
        while recv_event(ws)["type"] != "response.output_text.delta":
            pass
        ws.socket.shutdown(socket.SHUT_RDWR)  # no close frame: the peer vanished mid-response
    log = stub.audit.get("rt-gone")
    assert log is not None
    for _ in range(100):
        if log.state != "running":
            break
        time.sleep(0.05)
    assert log.state == "client_gone"
    with _ws(stub) as again:
        assert recv_event(again)["type"] == "session.created"
        again.send(json.dumps(CREATE))
        assert events_until(again, "response.done")[-1]["response"]["status"] == "completed"
