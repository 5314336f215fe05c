"""The gateway's WebSocket limits against hostile clients and members (issue 38), each with the [limits] key that
sets it, on a real gateway process: every test fails when its limit is ignored (the defaults would let the same bytes
through, or nothing would ever close)."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import zlib

import psutil
import pytest

from tests.gateway.test_gateway_e2e import Services, hostport, pool
from tests.gateway.wspeer import (
    CLOSE,
    CONTINUATION,
    CREATE,
    PING,
    PONG,
    TEXT,
    Frame,
    FrameReader,
    WsMember,
    answer_101,
    close,
    frame,
    offer,
    pong_member,
    read_head,
    session,
    text,
    upgrade,
)

pytestmark = pytest.mark.e2e


def _session(svc: Services, member: WsMember, limits: str) -> tuple[socket.socket, FrameReader]:
    gw = svc.gateway(f"[limits]\n{limits}\n" + pool(member.url))
    return session(hostport(gw.url)[1])


def _member_close(member: WsMember) -> Frame:
    assert member.done.wait(10)
    return next(f for f in member.frames if f.opcode == CLOSE)


def test_a_client_message_over_ws_max_message_bytes_closes_1009(svc: Services) -> None:
    member = pong_member()
    try:
        sock, reader = _session(svc, member, "ws_max_message_bytes = 1000")
        with sock:
            sock.sendall(text({"type": "response.create", "input": "x" * 600}))  # under: relayed
            sock.sendall(text({"type": "response.create", "input": "x" * 1500}))
            got = reader.until_close()
        assert got[-1].close_code == 1009
        assert _member_close(member).close_code == 1001  # the member hears the client is gone
        assert [f.opcode for f in member.frames if f.opcode == TEXT] == [TEXT]  # the first only
    finally:
        member.close()


def test_a_member_message_over_ws_max_upstream_message_bytes_closes_both_sides(svc: Services) -> None:
    member = pong_member(text({"type": "response.completed", "pad": "x" * 3000}, mask=False))
    try:
        sock, reader = _session(svc, member, "ws_max_upstream_message_bytes = 2000")
        with sock:
            got = reader.until_close()
        assert [f.opcode for f in got] == [CLOSE]  # nothing of the message: it was never whole within the limit
        assert got[0].close_code == 1011
        assert "upstream" in got[0].close_reason
        assert _member_close(member).close_code == 1009
    finally:
        member.close()


def test_a_message_in_more_than_ws_max_fragments_frames_closes_1008(svc: Services) -> None:
    member = pong_member()
    try:
        sock, reader = _session(svc, member, "ws_max_fragments = 4")
        pieces = [b'{"type"', b': "resp', b"onse.cr", b'eate", ', b'"a": 1', b"}"]
        with sock:
            data = frame(TEXT, pieces[0], fin=False)
            data += b"".join(frame(CONTINUATION, p, fin=False) for p in pieces[1:-1])
            sock.sendall(data + frame(CONTINUATION, pieces[-1]))
            got = reader.until_close()
        assert got[-1].close_code == 1008
        assert _member_close(member).close_code == 1001
        assert not [f for f in member.frames if f.opcode == TEXT]
    finally:
        member.close()


def test_an_unmasked_client_frame_closes_1002(svc: Services) -> None:
    member = pong_member()
    try:
        sock, reader = _session(svc, member, "")
        with sock:
            sock.sendall(text(CREATE, mask=False))
            got = reader.until_close()
        assert got[-1].close_code == 1002
        assert _member_close(member).close_code == 1001
        assert not [f for f in member.frames if f.opcode == TEXT]
    finally:
        member.close()


def test_a_ping_flood_past_ws_ping_burst_closes_1008_and_pongs_owed_are_capped(svc: Services) -> None:
    member = pong_member()
    try:
        sock, reader = _session(svc, member, "ws_ping_burst = 5\nws_pings_per_s = 0.1")
        with sock:
            sock.sendall(frame(PING, b"p") * 50)
            got = reader.until_close()
        pongs = [f for f in got if f.opcode == PONG]
        assert len(pongs) == 5
        assert got[-1].close_code == 1008
    finally:
        member.close()


def test_an_idle_client_is_pinged_and_closed_1001_without_a_pong(svc: Services) -> None:
    member = pong_member()
    try:
        sock, reader = _session(svc, member, "ws_ping_interval_s = 0.3\nws_pong_timeout_s = 0.5")
        with sock:
            sock.settimeout(20)
            got = reader.until_close(within_s=20)  # never answers the ping; without the limit, pinged forever
        assert [f.opcode for f in got] == [PING, CLOSE]
        assert got[-1].close_code == 1001
        assert "no pong" in got[-1].close_reason
        assert PING in [f.opcode for f in member.frames]  # the member was kept alive too
        assert _member_close(member).close_code == 1001
    finally:
        member.close()


def test_a_client_that_answers_pings_stays(svc: Services) -> None:
    member = pong_member()
    try:
        sock, reader = _session(svc, member, "ws_ping_interval_s = 0.3\nws_pong_timeout_s = 0.5")
        with sock:
            pings = 0
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                f = reader.next()
                assert f is not None
                assert f.opcode == PING, f
                pings += 1
                sock.sendall(frame(PONG, f.payload))
            assert pings >= 2
            sock.sendall(close(1000))
            assert reader.until_close()[-1].close_code == 1000
    finally:
        member.close()


def test_a_session_past_ws_session_s_is_closed_1001_both_ways(svc: Services) -> None:
    member = pong_member()
    try:
        gw = svc.gateway("[limits]\nws_session_s = 1\n" + pool(member.url))
        opened = time.monotonic()  # before the offer: the gateway's timer starts at its 101, never before this
        sock, reader = session(hostport(gw.url)[1])
        with sock:
            sock.settimeout(15)
            sock.sendall(text(CREATE))  # a live session: the limit is on its age, not its silence
            got = reader.until_close(within_s=15)
        lasted = time.monotonic() - opened
        assert [f.opcode for f in got] == [CLOSE]
        assert got[-1].close_code == 1001
        assert "ws_session_s" in got[-1].close_reason
        assert lasted >= 0.9  # never before the limit (a timer is late under load, never early)
        assert _member_close(member).close_code == 1001
        assert [f.opcode for f in member.frames if f.opcode == TEXT] == [TEXT]
    finally:
        member.close()


def test_permessage_deflate_is_never_agreed_so_a_compressed_frame_closes_1002(svc: Services) -> None:
    """No extension is negotiated either side: a deflate bomb cannot be sent, a compressed (RSV1) frame is a
    protocol error."""
    member = pong_member()
    try:
        gw = svc.gateway(pool(member.url))
        deflate = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
        status, raw, sock = upgrade(hostport(gw.url)[1], extra=deflate)
        assert status == 101
        assert b"sec-websocket-extensions" not in raw.lower()
        assert b"sec-websocket-extensions" not in member.heads[0].lower()
        with sock:
            deflate_raw = zlib.compressobj(wbits=-15)
            bomb = (deflate_raw.compress(b"0" * (64 << 20)) + deflate_raw.flush(zlib.Z_SYNC_FLUSH))[:-4]  # 64 MiB
            sock.sendall(frame(TEXT, bomb, rsv1=True))
            got = FrameReader(sock, raw.partition(b"\r\n\r\n")[2]).until_close()
        assert got[-1].close_code == 1002
        assert _member_close(member).close_code == 1001
        assert not [f for f in member.frames if f.opcode == TEXT]
    finally:
        member.close()


def test_a_slow_reader_pauses_the_member_instead_of_queueing_its_messages(svc: Services) -> None:
    """The client reads nothing: the gateway stops reading the member once the client's buffer is full (the write
    buffer limit), so the member's writes block; queued in the gateway, the member would send all 64 MiB."""
    sent = [0]
    message = frame(TEXT, json.dumps({"type": "x", "pad": "y" * (64 << 10)}).encode(), mask=False)
    total = 64 << 20

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        answer_101(conn, head)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        conn.settimeout(3)
        with contextlib.suppress(OSError):
            while sent[0] < total:
                conn.sendall(message)
                sent[0] += len(message)

    member = WsMember(script)
    try:
        gw = svc.gateway(pool(member.url))
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        sock.settimeout(10)
        sock.connect(hostport(gw.url))
        sock.sendall(offer())
        assert member.done.wait(30)  # its send timed out: blocked
        assert sent[0] < 40 << 20, sent[0]  # the kernel's buffers and the gateway's 64 KiB, not all 64 MiB
        sock.close()
    finally:
        member.close()


def test_a_member_that_stops_reading_pauses_the_client_instead_of_queueing_its_messages(svc: Services) -> None:
    """The member reads nothing after its 101 while the client floods messages: the gateway stops reading the client
    once the member's socket buffer is full (the write buffer limit), so the client's writes block and the
    gateway's memory stays flat; queued in the gateway, the client would send all 64 MiB and the gateway hold them."""
    release = threading.Event()

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        answer_101(conn, head)
        release.wait(60)  # reads nothing until the test is over

    member = WsMember(script)
    message = frame(TEXT, json.dumps({"type": "response.create", "input": "y" * (64 << 10)}).encode())
    total, sent = 64 << 20, 0
    try:
        gw = svc.gateway(pool(member.url))
        assert gw.pid is not None
        rss_before = psutil.Process(gw.pid).memory_info().rss
        sock, _ = session(hostport(gw.url)[1])
        with sock, contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
            sock.settimeout(3)
            while sent < total:
                sock.sendall(message)
                sent += len(message)
        grown = psutil.Process(gw.pid).memory_info().rss - rss_before
        assert sent < 40 << 20, sent  # the kernel's buffers and the gateway's 64 KiB, not all 64 MiB
        assert grown < 32 << 20, grown
    finally:
        release.set()
        member.close()


def _flooding_member(blocked: threading.Event) -> WsMember:
    """Answers 101, writes 64 KiB messages until its writes block (`blocked`), then answers the close."""
    message = frame(TEXT, json.dumps({"type": "x", "pad": "y" * (64 << 10)}).encode(), mask=False)

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        answer_101(conn, head)
        conn.settimeout(3)
        with contextlib.suppress(OSError):
            for _ in range(512):  # 32 MiB: far past every buffer, so the gateway stops reading here
                conn.sendall(message)
        blocked.set()
        conn.settimeout(20)
        for f in iter(reader.next, None):
            if f.opcode == CLOSE:
                conn.sendall(close(f.close_code, mask=False))
                return

    return WsMember(script)


def _not_reading(address: tuple[str, int]) -> socket.socket:
    """A client that upgrades and then reads nothing (its receive buffer small, so it fills at once)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    sock.connect(address)
    sock.sendall(offer())
    return sock


def _active(watch: socket.socket) -> int:
    """The gateway's open streams and sessions, from its health check on a kept connection."""
    watch.sendall(b"GET /_tokenpath/health HTTP/1.1\r\nHost: t\r\n\r\n")
    head, rest = read_head(watch)
    length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    assert length is not None
    while len(rest) < int(length.group(1)):
        rest += watch.recv(65536)
    return int(json.loads(rest)["active"])


def test_a_client_that_never_reads_is_dropped_after_the_close_wait_not_held(svc: Services) -> None:
    """The client reads nothing (its socket full of the member's messages) when the gateway closes it (here its
    ws_session_s): the close frame cannot reach it, and after the close wait the gateway drops the connection and
    ends the session, rather than wait forever for a buffer that never empties."""
    member = _flooding_member(threading.Event())
    try:
        gw = svc.gateway("[limits]\nws_session_s = 1\n" + pool(member.url))
        address = hostport(gw.url)
        with _not_reading(address), socket.create_connection(address, timeout=10) as watch:
            deadline, active = time.monotonic() + 30, -1
            while time.monotonic() < deadline and active != 0:
                time.sleep(0.2)
                active = _active(watch)
        assert active == 0  # the session ended: its slot and its sockets given back
        assert member.done.wait(10)
        assert [f.close_code for f in member.frames if f.opcode == CLOSE] == [1001]
    finally:
        member.close()


def test_a_client_that_closes_and_never_reads_the_reply_loses_its_socket(svc: Services) -> None:
    """The client sends its close and reads nothing: the gateway's close reply sits behind a full socket buffer, and
    after the close wait the gateway drops that socket rather than keep it (and its descriptor) open forever."""
    blocked = threading.Event()
    member = _flooding_member(blocked)
    try:
        gw = svc.gateway(pool(member.url))
        assert gw.pid is not None
        with _not_reading(hostport(gw.url)) as sock:
            assert blocked.wait(30)  # every buffer on the way to the client is full
            port = sock.getsockname()[1]
            sock.sendall(close(1000))
            assert member.done.wait(10)  # the member heard the close and answered: the session is over
            deadline, held = time.monotonic() + 30, True
            while time.monotonic() < deadline and held:
                time.sleep(0.2)
                connections = psutil.Process(gw.pid).net_connections()
                held = any(c.raddr and c.raddr[1] == port for c in connections)
            assert not held
    finally:
        member.close()


def test_a_member_that_closes_and_never_reads_the_reply_loses_its_socket(svc: Services) -> None:
    """The member's mirror of the above: it sends its close with the client's messages piled up unread in front of
    it, and reads nothing more; after the close wait the gateway drops that connection rather than keep it open."""
    flooded, release = threading.Event(), threading.Event()

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        answer_101(conn, head)
        flooded.wait(30)
        conn.sendall(close(1000, mask=False))
        release.wait(60)  # reads nothing until the test is over

    member = WsMember(script)
    message = frame(TEXT, json.dumps({"type": "response.create", "input": "y" * (64 << 10)}).encode())
    try:
        gw = svc.gateway(pool(member.url))
        assert gw.pid is not None
        sock, _ = session(hostport(gw.url)[1])
        with sock:
            sock.settimeout(3)
            with contextlib.suppress(OSError):
                for _ in range(512):  # until the gateway stops reading it: every buffer to the member is full
                    sock.sendall(message)
            flooded.set()
            port = hostport(member.url)[1]
            deadline, held = time.monotonic() + 30, True
            while time.monotonic() < deadline and held:
                time.sleep(0.2)
                connections = psutil.Process(gw.pid).net_connections()
                held = any(c.raddr and c.raddr[1] == port for c in connections)
            assert not held
    finally:
        release.set()
        member.close()
