"""The gateway carries the Realtime API (issue 38 item 1): GET /v1/realtime?model=... with Upgrade: websocket, a JWT
checked on the upgrade, the session's events relayed message by message (session.created first, several responses,
the error events of hostile client events), and the official openai SDK's `client.realtime.connect()` through it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.gateway.test_gateway_e2e import Services, hostport, pool, token
from tests.gateway.wspeer import upgrade
from tests.wssession import REALTIME_ITEM, events_until, openai_sdk, recv_event, sdk_realtime

pytestmark = pytest.mark.e2e


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(tmp_path)
    yield services
    services.stop()


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
        created = recv_event(ws)
        assert created["type"] == "session.created"
        assert created["session"]["model"] == "gpt-realtime"  # the query reached the member
        ws.send(json.dumps(REALTIME_ITEM))
        assert recv_event(ws)["type"] == "conversation.item.added"
        assert recv_event(ws)["type"] == "conversation.item.done"
        for _ in range(2):  # several responses on one session
            ws.send(json.dumps({"type": "response.create"}))
            got = events_until(ws, "response.done")
            assert [e["type"] for e in got].count("response.output_text.delta") == 4
            assert got[-1]["response"]["status"] == "completed"
        ws.send("not json")  # a hostile event crosses the gateway and is answered as the API answers it
        error = recv_event(ws)
        assert error["type"] == "error"
        assert error["error"]["code"] == "invalid_json"


def test_the_openai_sdk_s_realtime_connect_through_the_gateway(svc: Services) -> None:
    openai = openai_sdk()
    stub = svc.stub("--tokens", "4", "--ttft-ms", "0", "--interval-ms", "5")
    gw = svc.gateway(pool(stub), auth=True)
    types, text = sdk_realtime(openai, f"{gw.url}/v1", token())
    assert types[0] == "session.created"
    assert types.count("response.output_text.delta") == 4
    assert text.split() == ["alpha0", "bravo1", "charlie2", "delta3"]
