"""Hostile clients against the gateway's Realtime route (GET /v1/realtime, issue 38), on real processes (the stub's
Realtime session behind the gateway): a client that cuts its upgrade request at every byte offset, and a ping flood
through an open session. The gateway gives back every slot and descriptor, applies its ping limit as on the Responses
WebSocket route, and the other sessions go on."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.gateway.test_gateway_e2e import Services, hostport, pool, token
from tests.gateway.test_websocket_hostile_e2e import _active
from tests.gateway.wspeer import CLOSE, PING, PONG, TEXT, FrameReader, WsMember, answer_101, frame, offer, upgrade
from tests.wssession import recv_event

pytestmark = pytest.mark.e2e

REALTIME = "/v1/realtime?model=gpt-realtime"
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
    return recv_event(ws, timeout_s=20)  # a flood's session shares the gateway: more time than a calm one's


def _a_response(ws: ClientConnection) -> list[dict[str, Any]]:
    """A whole response on a Realtime session: its item, then response.create's events up to response.done."""
    ws.send(json.dumps(ITEM))
    assert _recv(ws)["type"] == "conversation.item.added"
    assert _recv(ws)["type"] == "conversation.item.done"
    ws.send(json.dumps({"type": "response.create"}))
    got = [_recv(ws)]
    while got[-1]["type"] != "response.done":
        got.append(_recv(ws))
    return got


@contextlib.contextmanager
def _session(url: str, headers: dict[str, str] | None = None) -> Iterator[ClientConnection]:
    with connect(url.replace("http://", "ws://") + REALTIME, additional_headers=headers, open_timeout=20) as ws:
        assert _recv(ws)["type"] == "session.created"
        yield ws


def _cut(address: tuple[str, int], data: bytes, reset: bool) -> None:
    """Connects, sends `data`, and leaves: a FIN, or a RST (SO_LINGER 0) with `reset`."""
    with socket.create_connection(address, timeout=10) as sock:
        if data:
            sock.sendall(data)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_a_client_that_cuts_its_realtime_upgrade_at_every_byte_frees_its_slot_each_time(svc: Services) -> None:
    """Every prefix of a Realtime upgrade request with its JWT (the request line, the headers, the token, the blank
    line; the whole request too, the gateway's own upgrade to the member then under way), each followed by a FIN and
    again by a RST: afterwards the gateway holds no session (its health's `active`) and no descriptor more than
    before (no member connection, no client socket), and a well-formed session streams a whole response. (The
    gateway already survived this when it was written: this holds it; the test below makes the cut land inside the
    member's upgrade every time.)"""
    stub = svc.stub("--tokens", "4", "--ttft-ms", "0", "--interval-ms", "5")
    gw = svc.gateway(pool(stub), auth=True)
    assert gw.url is not None
    assert gw.pid is not None
    address = hostport(gw.url)
    auth = {"Authorization": f"Bearer {token()}"}
    with _session(gw.url, auth) as ws:  # warmed up: the member's pool, the JWT key, the loggers
        assert _a_response(ws)[-1]["response"]["status"] == "completed"
    process = psutil.Process(gw.pid)
    with socket.create_connection(address, timeout=10) as watch:
        deadline = time.monotonic() + 30
        while _active(watch) != 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        fds_before = process.num_fds()
        raw = offer(REALTIME, f"Authorization: Bearer {token()}\r\n")
        for k in [*range(len(raw) + 1), *[len(raw)] * 20]:  # the whole request more: the cut lands in each phase
            _cut(address, raw[:k], reset=False)
            _cut(address, raw[:k], reset=True)
        deadline, active, fds = time.monotonic() + 60, -1, -1
        while time.monotonic() < deadline:
            active, fds = _active(watch), process.num_fds()
            if active == 0 and fds <= fds_before:
                break
            time.sleep(0.2)
        assert active == 0  # every session's slot given back
        assert fds <= fds_before, (fds, fds_before)  # no client socket, no member connection held
    with _session(gw.url, auth) as ws:
        got = _a_response(ws)
    assert [e["type"] for e in got].count("response.output_text.delta") == 4
    assert got[-1]["response"]["status"] == "completed"


def test_a_client_that_leaves_while_the_member_s_101_is_pending_leaves_no_member_connection(svc: Services) -> None:
    """The cut that lands inside the gateway's own upgrade: a member that answers its 101 only after 0.3 s, and
    clients that send a whole Realtime upgrade and leave (a FIN, a RST) once the member has the gateway's offer. The
    gateway drops each attempt it started for them: the member sees every one of its connections end, and the
    gateway holds no slot and no descriptor more. Without the attempt's abort (wsupgrade's `finally`) the member's
    connections stay open behind the clients that left."""
    lock, open_now, offered = threading.Lock(), [0], threading.Semaphore(0)

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        with lock:
            open_now[0] += 1
        try:
            offered.release()
            time.sleep(0.3)
            answer_101(conn, head)
            conn.settimeout(60)
            while conn.recv(65536):  # until the gateway ends the connection
                pass
        finally:
            with lock:
                open_now[0] -= 1

    member = WsMember(script)
    try:
        gw = svc.gateway(pool(member.url))
        assert gw.url is not None
        assert gw.pid is not None
        address = hostport(gw.url)
        process = psutil.Process(gw.pid)
        with socket.create_connection(address, timeout=10) as watch:
            assert _active(watch) == 0
            fds_before = process.num_fds()
            for k in range(6):
                with socket.create_connection(address, timeout=10) as sock:
                    sock.sendall(offer(REALTIME))
                    assert offered.acquire(timeout=10)  # the gateway's upgrade is at the member, its 101 pending
                    if k % 2:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and open_now[0] > 0:
                time.sleep(0.1)
            assert open_now[0] == 0  # each of the member's connections was ended by the gateway
            assert len(member.heads) == 6
            assert _active(watch) == 0
            assert process.num_fds() <= fds_before
    finally:
        member.close()


def test_a_ping_flood_through_a_realtime_session_closes_it_1008_and_another_session_streams_on(
    svc: Services,
) -> None:
    """The Responses route's ping limit (ws_ping_burst, then ws_pings_per_s) holds on the Realtime route: a client
    flooding pings through its open session gets the burst's pongs and a 1008, while a second client's response,
    streaming at that moment, arrives whole and in order. Without the limit every ping is answered and nothing
    closes."""
    stub = svc.stub("--tokens", "40", "--ttft-ms", "0", "--interval-ms", "20")
    gw = svc.gateway("[limits]\nws_ping_burst = 5\nws_pings_per_s = 0.1\n" + pool(stub))
    assert gw.url is not None
    with _session(gw.url) as calm:
        calm.send(json.dumps(ITEM))
        assert _recv(calm)["type"] == "conversation.item.added"
        assert _recv(calm)["type"] == "conversation.item.done"
        calm.send(json.dumps({"type": "response.create"}))
        status, raw, sock = upgrade(hostport(gw.url)[1], REALTIME)
        assert status == 101
        with sock:
            reader = FrameReader(sock, raw.partition(b"\r\n\r\n")[2])
            first = reader.next()
            assert first is not None
            assert first.opcode == TEXT
            assert json.loads(first.payload)["type"] == "session.created"
            sock.sendall(frame(PING, b"p") * 50)
            got = reader.until_close(within_s=20)
        pongs = [f for f in got if f.opcode == PONG]
        assert len(pongs) == 5
        assert got[-1].opcode == CLOSE
        assert got[-1].close_code == 1008
        events = [_recv(calm)]
        while events[-1]["type"] != "response.done":
            events.append(_recv(calm))
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) == 40
    assert [d.strip() for d in deltas][:2] == ["alpha0", "bravo1"]
    assert events[-1]["response"]["status"] == "completed"
