"""The gateway carries the Responses WebSocket mode (issue 38): a real gateway process in front of the stub or of a
scripted member (tests/gateway/wspeer.py), clients the project did not write (`websockets`, the openai SDK) and raw
ones. What is asserted: the JWT is checked on the upgrade (refused before any 101, in the format's shape), one
message in is one message out, a refused upgrade is an HTTP error and never a 101, closes cross both ways."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.e2e.h2raw import RawH2
from tests.gateway.test_gateway_e2e import Services, hostport, pool, read_response, token
from tests.gateway.test_tls_upstream_e2e import CA, server_context
from tests.gateway.wspeer import (
    CLOSE,
    CONTINUATION,
    CREATE,
    TEXT,
    FrameReader,
    WsMember,
    answer_101,
    close,
    frame,
    offer,
    read_head,
    session,
    text,
    upgrade,
)
from tests.wssession import events_until, openai_sdk, sdk_responses

pytestmark = pytest.mark.e2e


def ws_url(gw_url: str | None) -> str:
    assert gw_url is not None
    return gw_url.replace("http://", "ws://") + "/v1/responses"


def test_responses_stream_over_websocket_through_the_gateway_one_event_per_message(svc: Services) -> None:
    stub = svc.stub("--tokens", "5", "--ttft-ms", "0", "--interval-ms", "5")
    gw = svc.gateway(pool(stub))
    with connect(ws_url(gw.url), open_timeout=10, close_timeout=5) as ws:
        assert ws.response is not None
        assert ws.response.headers.get("X-Request-Id")  # the gateway's id, as on every answer
        for _ in range(2):  # two responses, one after the other, on one session
            ws.send(json.dumps(CREATE))
            got = events_until(ws, "response.completed", "error")
            assert got[0]["type"] == "response.created"
            assert [e["type"] for e in got].count("response.output_text.delta") == 5
            assert got[-1]["type"] == "response.completed"


def test_the_jwt_is_checked_on_the_upgrade_before_any_101(svc: Services) -> None:
    stub = svc.stub("--tokens", "2", "--ttft-ms", "0", "--interval-ms", "1")
    gw = svc.gateway(pool(stub), auth=True)
    port = hostport(gw.url)[1]
    status, raw, sock = upgrade(port)
    with sock:
        rest = raw
        while b"}}" not in rest and (chunk := sock.recv(65536)):
            rest += chunk
    assert status == 401
    assert b" 101 " not in raw
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert body["error"]["code"] == "invalid_api_key"  # the Responses API's error shape
    status, _, sock = upgrade(port, extra=f"Authorization: Bearer {token()}\r\n")
    sock.close()
    assert status == 101
    # a route without a WebSocket mode refuses the offer, as before (a 400 in its shape), JWT or not
    status, _, sock = upgrade(port, "/v1/chat/completions", extra=f"Authorization: Bearer {token()}\r\n")
    sock.close()
    assert status == 400


def test_the_openai_sdk_streams_a_response_over_websocket_through_the_gateway(svc: Services) -> None:
    """The issue's done-when: the official SDK's `client.responses.connect()`, a JWT, the gateway, the stub."""
    openai = openai_sdk(responses_websocket=True)
    stub = svc.stub("--tokens", "4", "--ttft-ms", "0", "--interval-ms", "5")
    gw = svc.gateway(pool(stub), auth=True)
    types, text_out = sdk_responses(openai, f"{gw.url}/v1", token())
    assert types[0] == "response.created"
    assert types.count("response.output_text.delta") == 4
    assert text_out.split() == ["alpha0", "bravo1", "charlie2", "delta3"]


def _refuse(status: int, message: str) -> WsMember:
    body = json.dumps({"error": {"message": message}}).encode()

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        conn.sendall(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return WsMember(script)


def test_a_member_that_refuses_the_upgrade_gives_an_http_error_never_a_101(svc: Services) -> None:
    refusing = _refuse(404, "no websocket mode here")
    failing = _refuse(503, "overloaded")
    stub = svc.stub("--tokens", "2", "--ttft-ms", "0", "--interval-ms", "1")
    try:
        gw = svc.gateway(pool(refusing.url))
        status, raw, sock = upgrade(hostport(gw.url)[1])
        with sock:
            while not raw.endswith(b"}}") and (chunk := sock.recv(65536)):
                raw += chunk
        assert status == 404
        assert b"no websocket mode here" in raw
        assert json.loads(raw.partition(b"\r\n\r\n")[2])["error"]["code"] == "websocket_refused"
        # a 5xx fails over, as before a stream's head: the next member's 101 is the client's
        both = svc.gateway(pool(failing.url, stub))
        status, _, sock = upgrade(hostport(both.url)[1])
        sock.close()
        assert status == 101
        assert len(failing.heads) == 1
        alone = svc.gateway(pool(failing.url))
        status, _, sock = upgrade(hostport(alone.url)[1])
        sock.close()
        assert status == 502
    finally:
        refusing.close()
        failing.close()


def test_the_member_gone_mid_stream_closes_the_client_1011_with_a_reason(svc: Services) -> None:
    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        answer_101(conn, head)
        reader.next()  # the response.create
        conn.sendall(text({"type": "response.created"}, mask=False))
        conn.shutdown(socket.SHUT_RDWR)  # gone, no close frame

    member = WsMember(script)
    try:
        gw = svc.gateway(pool(member.url))
        sock, reader = session(hostport(gw.url)[1])
        with sock:
            sock.sendall(text(CREATE))
            got = reader.until_close()
        assert [f.opcode for f in got] == [TEXT, CLOSE]
        assert json.loads(got[0].payload)["type"] == "response.created"
        assert got[-1].close_code == 1011
        assert "without a close frame" in got[-1].close_reason
    finally:
        member.close()


def _recording_member(sends: list[bytes] | None = None) -> WsMember:
    """Answers 101, sends `sends` in one write, then reads until the client's close and answers it."""

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        answer_101(conn, head)
        if sends:
            conn.sendall(b"".join(sends))
        for f in iter(reader.next, None):
            if f.opcode == CLOSE:
                conn.sendall(close(f.close_code, "bye too", mask=False))
                return

    return WsMember(script)


def test_a_client_close_reaches_the_member_with_its_code(svc: Services) -> None:
    member = _recording_member()
    try:
        gw = svc.gateway(pool(member.url))
        sock, reader = session(hostport(gw.url)[1])
        with sock:
            sock.sendall(close(4001, "done here"))
            got = reader.until_close()
        assert got[-1].close_code == 4001  # the close handshake's reply
        assert member.done.wait(10)
        closes = [f for f in member.frames if f.opcode == CLOSE]
        assert [(f.close_code, f.close_reason) for f in closes] == [(4001, "done here")]
    finally:
        member.close()


def test_one_message_in_is_one_message_out_and_a_fragmented_one_is_passed_on_whole(svc: Services) -> None:
    three = [text({"type": "response.output_text.delta", "delta": f"d{i}"}, mask=False) for i in range(3)]
    member = _recording_member(three)  # three messages in one write: the client must get three, not one
    try:
        gw = svc.gateway(pool(member.url))
        sock, reader = session(hostport(gw.url)[1])
        with sock:
            got = [reader.next() for _ in range(3)]
            assert all(f is not None and f.opcode == TEXT and f.fin for f in got)
            assert [json.loads(f.payload)["delta"] for f in got if f is not None] == ["d0", "d1", "d2"]
            message = json.dumps(CREATE).encode()
            parts = [message[:5], message[5:12], message[12:]]
            sock.sendall(
                frame(TEXT, parts[0], fin=False)
                + frame(CONTINUATION, parts[1], fin=False)
                + frame(CONTINUATION, parts[2])
            )
            sock.sendall(close(1000))
            reader.until_close()
        assert member.done.wait(10)
        data = [f for f in member.frames if f.opcode != CLOSE]
        assert [(f.opcode, f.fin, f.payload) for f in data] == [(TEXT, True, message)]  # whole: one frame
    finally:
        member.close()


def test_an_https_member_carries_the_websocket_mode(svc: Services, tmp_path: Path) -> None:
    ca = CA(tmp_path)
    echoed = threading.Event()

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        answer_101(conn, head)
        f = reader.next()
        assert f is not None
        conn.sendall(frame(TEXT, f.payload, mask=False))
        echoed.set()
        reader.until_close()

    member = WsMember(script, tls=server_context(ca))
    try:
        gw = svc.gateway(pool(member.url, extra=f'ca_file = "{ca.ca_file}"'))
        with connect(ws_url(gw.url), open_timeout=10, close_timeout=5) as ws:
            ws.send(json.dumps(CREATE))
            assert json.loads(ws.recv(timeout=10)) == CREATE
        # The member's thread sets it after its send returns: the echo can reach the client first (a loaded host).
        assert echoed.wait(10)
    finally:
        member.close()


def test_http2_extended_connect_is_refused_and_says_where_websocket_is(svc: Services) -> None:
    """RFC 8441 is out of scope: the listener never offers SETTINGS_ENABLE_CONNECT_PROTOCOL, and a client that tries
    an extended CONNECT anyway gets a 405 that names the HTTP/1.1 upgrade, not a reset or a silence."""
    stub = svc.stub("--tokens", "2", "--ttft-ms", "0", "--interval-ms", "1")
    gw = svc.gateway(pool(stub))
    host, port = hostport(gw.url)
    h2 = RawH2(host, port)
    try:
        assert not h2.conn.remote_settings.enable_connect_protocol
        sid = h2.conn.get_next_available_stream_id()
        headers = [
            (b":method", b"CONNECT"),
            (b":protocol", b"websocket"),
            (b":scheme", b"http"),
            (b":path", b"/v1/responses"),
            (b":authority", h2.authority),
            (b"sec-websocket-version", b"13"),
        ]
        h2.conn.send_headers(sid, headers)
        h2.flush()
        assert h2.wait(lambda: sid in h2.ended)
        assert h2.heads[sid][b":status"] == b"405"
        assert b"HTTP/1.1 only" in bytes(h2.data.get(sid, b""))
    finally:
        h2.close()


def test_a_member_s_101_with_a_wrong_accept_is_a_502_not_a_101(svc: Services) -> None:
    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: bm90IHRoZSByaWdodCBvbmU=\r\n\r\n"
        )
        reader.frames()

    member = WsMember(script)
    try:
        gw = svc.gateway(pool(member.url))
        status, _, sock = upgrade(hostport(gw.url)[1])
        sock.close()
        assert status == 502
    finally:
        member.close()


def test_sigterm_closes_an_open_session_1001_at_the_drain_deadline(svc: Services) -> None:
    stub = svc.stub("--tokens", "2", "--ttft-ms", "0", "--interval-ms", "1")
    gw = svc.gateway("[limits]\ndrain_s = 1\n" + pool(stub))
    sock, reader = session(hostport(gw.url)[1])
    assert gw.pid is not None
    with sock:
        os.kill(gw.pid, signal.SIGTERM)  # the gateway this test started
        got = reader.until_close()
    assert got[-1].opcode == CLOSE
    assert (got[-1].close_code, got[-1].close_reason) == (1001, "the gateway is shutting down")


def _echo_member() -> WsMember:
    """Answers 101, echoes each text message, answers the close."""

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        answer_101(conn, head)
        for f in iter(reader.next, None):
            if f.opcode == TEXT:
                conn.sendall(frame(TEXT, f.payload, mask=False))
            elif f.opcode == CLOSE:
                conn.sendall(close(f.close_code, mask=False))
                return

    return WsMember(script)


HEALTH = b"GET /_tokenpath/health HTTP/1.1\r\nHost: t\r\n\r\n"


def _status(sock: socket.socket, data: bytes) -> int:
    sock.sendall(data)
    parser, _ = read_response(sock)
    assert parser.head is not None
    return parser.head.status


def test_a_drain_holds_open_sessions_until_drain_s_refuses_new_upgrades_then_closes_1001(svc: Services) -> None:
    """SIGTERM: the open session still relays both ways through the drain, an upgrade offered meanwhile (on a kept
    connection: the listener is closed) is a 503, never a 101, and at drain_s the session is closed 1001 both ways."""
    member = _echo_member()
    try:
        gw = svc.gateway("[limits]\ndrain_s = 4\n" + pool(member.url))
        assert gw.pid is not None
        address = hostport(gw.url)
        with (
            socket.create_connection(address, timeout=20) as watch,
            socket.create_connection(address, timeout=20) as kept,
        ):
            assert _status(watch, HEALTH) == 200
            assert _status(kept, HEALTH) == 200
            sock, reader = session(address[1])
            with sock:
                sock.settimeout(20)
                os.kill(gw.pid, signal.SIGTERM)  # the gateway this test started
                signalled = time.monotonic()
                while _status(watch, HEALTH) != 503:  # draining from here
                    time.sleep(0.05)
                kept.sendall(offer())
                assert read_head(kept)[0].split(b" ", 2)[1] == b"503"  # not a 101
                sock.sendall(text(CREATE))
                echoed = reader.next()
                assert echoed is not None
                assert echoed.opcode == TEXT, echoed  # held: still relayed, not closed
                assert json.loads(echoed.payload) == CREATE
                got = reader.until_close(within_s=20)
            drained = time.monotonic() - signalled
        assert [f.opcode for f in got] == [CLOSE]
        assert (got[-1].close_code, got[-1].close_reason) == (1001, "the gateway is shutting down")
        assert drained >= 3.5  # not before drain_s (a timer is late under load, never early)
        assert member.done.wait(10)
        assert [f.close_code for f in member.frames if f.opcode == CLOSE] == [1001]
    finally:
        member.close()
