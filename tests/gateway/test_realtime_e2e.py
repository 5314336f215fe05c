"""The gateway carries the Realtime API (issue 38 item 1): GET /v1/realtime?model=... with Upgrade: websocket, a JWT
checked on the upgrade, the session's events relayed message by message (session.created first, several responses,
the error events of hostile client events), and the official openai SDK's `client.realtime.connect()` through it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from tests.gateway.test_gateway_e2e import Services, hostport, pool, token
from tests.gateway.wspeer import upgrade

pytestmark = pytest.mark.e2e

ITEM = {
    "type": "conversation.item.create",
    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
}


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(tmp_path)
    yield services
    services.stop()


def _recv(ws: ClientConnection) -> dict[str, Any]:
    message = ws.recv(timeout=10)
    assert isinstance(message, str)  # one text message is one whole event, never split nor joined
    event = json.loads(message)
    assert isinstance(event, dict)
    return event


def _until_done(ws: ClientConnection) -> list[dict[str, Any]]:
    out = [_recv(ws)]
    while out[-1]["type"] != "response.done":
        out.append(_recv(ws))
    return out


def test_a_realtime_session_through_the_gateway_jwt_on_the_upgrade(svc: Services) -> None:
    stub = svc.stub("--tokens", "4", "--ttft-ms", "0", "--interval-ms", "5")
    gw = svc.gateway(pool(stub), auth=True)
    assert gw.url is not None
    port = hostport(gw.url)[1]
    status, raw, sock = upgrade(port, "/v1/realtime?model=gpt-realtime")
    sock.close()
    assert status == 401  # refused before any 101
    assert b" 101 " not in raw
    url = gw.url.replace("http://", "ws://") + "/v1/realtime?model=gpt-realtime"
    auth = {"Authorization": f"Bearer {token()}"}
    with connect(url, additional_headers=auth, open_timeout=10, close_timeout=5) as ws:
        created = _recv(ws)
        assert created["type"] == "session.created"
        assert created["session"]["model"] == "gpt-realtime"  # the query reached the member
        ws.send(json.dumps(ITEM))
        assert _recv(ws)["type"] == "conversation.item.added"
        assert _recv(ws)["type"] == "conversation.item.done"
        for _ in range(2):  # several responses on one session
            ws.send(json.dumps({"type": "response.create"}))
            got = _until_done(ws)
            assert [e["type"] for e in got].count("response.output_text.delta") == 4
            assert got[-1]["response"]["status"] == "completed"
        ws.send("not json")  # a hostile event crosses the gateway and is answered as the API answers it
        error = _recv(ws)
        assert error["type"] == "error"
        assert error["error"]["code"] == "invalid_json"


def test_the_openai_sdk_s_realtime_connect_through_the_gateway(svc: Services) -> None:
    openai = pytest.importorskip("openai")
    stub = svc.stub("--tokens", "4", "--ttft-ms", "0", "--interval-ms", "5")
    gw = svc.gateway(pool(stub), auth=True)
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=token(), timeout=10)
    with client.realtime.connect(model="gpt-realtime") as conn:
        conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        )
        conn.response.create()
        types, text = [], ""
        for event in conn:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
            if event.type == "response.done":
                break
    assert types[0] == "session.created"
    assert types.count("response.output_text.delta") == 4
    assert text.split() == ["alpha0", "bravo1", "charlie2", "delta3"]
