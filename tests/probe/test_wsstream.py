"""probe --transport websocket against the stub in-process and against scripted peers: the upgrade's status and
time, TTFT to the first content message, messages per read, the stub's write join, the end (final event, or a
close that cuts), and a path that does not carry the upgrade reported as such."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from tests.wssession import accept_101, scripted, server_text
from tokenpath.errors import NetworkError, UsageError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import probe_results, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.table import probe_table
from tokenpath.probe.trace import PARTIAL_TRACE, TraceLimits
from tokenpath.probe.wsstream import event_type, sse_event
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind
from tokenpath.wire.httpversion import HttpVersion

StartStub = Callable[..., StubServer]


def _ws_cfg(url: str, **kw: object) -> ProbeConfig:
    return ProbeConfig(url=url, api=Api.RESPONSES, transport="websocket", first_byte_timeout_s=5, **kw)  # type: ignore[arg-type]


def test_a_stream_over_websocket_is_measured_and_joins_the_stub_s_writes(start_stub: StartStub) -> None:
    stub = start_stub(tokens=6, interval_ms=20, ttft_ms=40)
    trace = probe_stream(_ws_cfg(stub.url))
    log = stub.audit.get(trace.stream_id)
    assert log is not None
    metrics = run_metrics(trace, log.snapshot())
    ws = metrics.ws
    assert ws is not None
    assert ws.upgraded
    assert ws.upgrade_status == 101
    assert ws.final_event
    assert ws.close_code == 1000
    assert not ws.cut
    assert metrics.status == 101
    assert metrics.frames == ws.messages == len(log.actual_ns)  # one frame per message, one write per message
    assert metrics.ttft_ms is not None
    assert metrics.ttft_ms >= 39  # TTFT from the response.create, to the first output_text.delta
    assert metrics.added_ttft_ms is not None  # frame k is write k: the join holds over WebSocket too
    assert json.loads(json.dumps(metrics.to_json()))["websocket"]["messages"] == ws.messages
    table = probe_table(probe_results(stub.url, [metrics], Api.RESPONSES))
    assert f"run 1: WebSocket: 101 in {ws.upgrade_ms:.1f} ms, {ws.messages} messages" in str(table.caption)


def test_the_websocket_needs_a_format_with_a_websocket_mode_and_http_1_1() -> None:
    with pytest.raises(UsageError, match="no WebSocket mode"):
        probe_stream(ProbeConfig(url="http://127.0.0.1:9/", transport="websocket"))
    with pytest.raises(UsageError, match="HTTP/2"):
        ProbeConfig(url="http://127.0.0.1:9/", transport="websocket", http_version=HttpVersion.HTTP2)
    with pytest.raises(UsageError, match="transport"):
        ProbeConfig(url="http://127.0.0.1:9/", transport="carrier-pigeon")


def _wait_create(conn: socket.socket) -> None:
    conn.recv(65536)  # the response.create (masked): its content does not matter here


DELTA = {"type": "response.output_text.delta", "delta": "a", "item_id": "i", "output_index": 0, "content_index": 0}


def test_a_path_that_does_not_carry_the_upgrade_is_a_result_not_an_error() -> None:
    def refuse(conn: socket.socket, key: str) -> None:  # what nginx without the Upgrade headers leads to
        body = b'{"error":"GET is not allowed"}'
        conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    for url in scripted(refuse):
        metrics = run_metrics(probe_stream(_ws_cfg(url)))
    assert metrics.ws is not None
    assert not metrics.ws.upgraded
    assert metrics.ws.upgrade_status == 405
    assert "GET is not allowed" in metrics.ws.refused_body
    assert "not carried: HTTP 405" in metrics.ws.note
    assert metrics.frames == 0
    assert metrics.ttft_ms is None


def test_a_101_with_a_wrong_accept_is_a_failed_upgrade() -> None:
    def wrong(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101("not-the-key"))

    for url in scripted(wrong):
        ws = run_metrics(probe_stream(_ws_cfg(url))).ws
    assert ws is not None
    assert not ws.upgraded
    assert "upgrade failed" in ws.note


def test_messages_in_one_read_are_counted_as_coalesced() -> None:
    def burst(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        _wait_create(conn)
        conn.sendall(server_text(DELTA) * 3 + server_text({"type": "response.completed", "response": {}}))
        conn.recv(64)  # our close
        conn.sendall(bytes([0x88, 2, 0x03, 0xE8]))

    for url in scripted(burst):
        metrics = run_metrics(probe_stream(_ws_cfg(url)))
    ws = metrics.ws
    assert ws is not None
    assert ws.messages == 4
    assert ws.message_reads == 1
    assert ws.messages_per_read == 4
    assert metrics.bursts == {4: 1}
    assert ws.final_event
    assert ws.close_code == 1000


def test_a_close_before_the_final_event_is_a_cut_with_its_code() -> None:
    def cut(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        _wait_create(conn)
        conn.sendall(server_text(DELTA))
        conn.sendall(bytes([0x88, 2, 0x03, 0xF3]))  # 1011: the server failed

    for url in scripted(cut):
        ws = run_metrics(probe_stream(_ws_cfg(url))).ws
    assert ws is not None
    assert ws.cut
    assert ws.close_code == 1011
    assert ws.closed_by == "server"
    assert not ws.final_event


def test_a_socket_that_ends_mid_stream_is_a_cut_1006() -> None:
    def vanish(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        _wait_create(conn)
        conn.sendall(server_text(DELTA))

    for url in scripted(vanish):
        ws = run_metrics(probe_stream(_ws_cfg(url))).ws
    assert ws is not None
    assert ws.cut
    assert ws.close_code == 1006


def test_a_message_re_framed_is_the_sse_event_it_mirrors() -> None:
    def framed(text: str) -> bytes:
        return sse_event(text, event_type(text))

    assert framed('{"type":"response.created"}') == b'event: response.created\ndata: {"type":"response.created"}\n\n'
    assert framed("not json") == b"data: not json\n\n"
    assert framed('{"type":"a\\nb"}') == b'data: {"type":"a\\nb"}\n\n'  # a name that would break the event
    assert framed('{"type": 3}') == b'data: {"type": 3}\n\n'
    assert framed("a\nb") == b"data: a\ndata: b\n\n"


def test_a_message_past_the_trace_s_event_bound_is_closed_1009_and_reported_as_a_cut() -> None:
    def huge(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        _wait_create(conn)
        payload = json.dumps({**DELTA, "delta": "x" * 5000}).encode()
        conn.sendall(bytes([0x81, 126]) + len(payload).to_bytes(2, "big") + payload)
        conn.recv(64)  # the client's close

    for url in scripted(huge):
        ws = run_metrics(probe_stream(_ws_cfg(url), limits=TraceLimits(event_bytes=4096))).ws
    assert ws is not None
    assert ws.cut
    assert ws.close_code == 1009
    assert ws.closed_by == "client"


def test_a_path_that_closes_on_the_offer_is_a_failed_upgrade() -> None:
    def hang_up(conn: socket.socket, key: str) -> None:
        conn.shutdown(socket.SHUT_RDWR)

    for url in scripted(hang_up):
        ws = run_metrics(probe_stream(_ws_cfg(url))).ws
    assert ws is not None
    assert not ws.upgraded
    assert ws.upgrade_status == 0
    assert "closed without an answer" in ws.note


def test_a_refusal_whose_body_never_ends_is_reported_without_waiting_for_it() -> None:
    """A path that answers the GET with a stream of its own: its head is the answer; its body is read for a second
    (REFUSAL_BODY_S), never to the first-byte timeout."""
    release = threading.Event()

    def stream_instead(conn: socket.socket, key: str) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.sendall(b"9\r\ndata: x\n\n\r\n")
        release.wait(60)

    for url in scripted(stream_instead):
        started = time.monotonic()
        ws = run_metrics(probe_stream(replace(_ws_cfg(url), first_byte_timeout_s=60))).ws
        elapsed = time.monotonic() - started
        release.set()
    assert ws is not None
    assert ws.upgrade_status == 200
    assert "data: x" in ws.refused_body
    assert elapsed < 30  # about REFUSAL_BODY_S; the bound is the 60 s timeout it must not wait for


def test_every_websocket_trace_carries_its_end(start_stub: StartStub) -> None:
    """probe/table.py shows a trace without an end as cut: each way a WebSocket stream ends gives it one."""
    stub = start_stub(tokens=3, interval_ms=5)
    whole = probe_stream(_ws_cfg(stub.url)).end
    assert whole is not None
    assert whole.kind is EndKind.COMPLETE

    def closes(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        _wait_create(conn)
        conn.sendall(server_text(DELTA) + bytes([0x88, 2, 0x03, 0xF3]))  # 1011 before the final event

    def refuses(conn: socket.socket, key: str) -> None:
        conn.sendall(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n")

    def hangs_up(conn: socket.socket, key: str) -> None:
        conn.shutdown(socket.SHUT_RDWR)

    expected = {closes: (EndKind.CUT_SILENT, BodyEnd.END_STREAM), refuses: (EndKind.CUT_ERROR, BodyEnd.STATUS)}
    expected[hangs_up] = (EndKind.CUT_ERROR, BodyEnd.TRUNCATED)
    for answer, (kind, how) in expected.items():
        for url in scripted(answer):
            end = probe_stream(_ws_cfg(url)).end
        assert end is not None, answer.__name__
        assert (end.kind, end.how) == (kind, how), answer.__name__
        assert end.at_ns is not None


def test_a_reset_mid_stream_raises_with_its_end_and_the_messages_so_far() -> None:
    def resets(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        _wait_create(conn)
        conn.sendall(server_text(DELTA))
        time.sleep(0.2)  # the delta read on its own first
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST

    for url in scripted(resets):
        with pytest.raises(NetworkError, match="reset") as caught:
            probe_stream(_ws_cfg(url))
    end = STREAM_END.of(caught.value)
    assert end is not None
    assert (end.kind, end.how) == (EndKind.CUT_ERROR, BodyEnd.RESET)
    partial = PARTIAL_TRACE.of(caught.value)
    assert partial is not None
    assert partial.end == end
    assert partial.frame_count == 1


def test_the_client_s_pings_go_out_while_the_stream_is_silent_and_the_pongs_are_counted(start_stub: StartStub) -> None:
    """--ws-ping-s: a ping every 0.1 s while the stub pauses 0.6 s mid-stream; the stub answers each (a pong is a
    read the probe counts, never a frame), and the stream still ends complete."""
    stub = start_stub(tokens=4, interval_ms=10, ttft_ms=10)
    pause = (("tokenpath", {"pause_ms": 600, "pause_after": 2}),)
    metrics = run_metrics(probe_stream(_ws_cfg(stub.url, ws_ping_s=0.1, extra_body=pause)))
    ws = metrics.ws
    assert ws is not None
    assert ws.final_event
    assert ws.pings_sent >= 2  # the pause alone spans six intervals: a loaded host still sends two
    assert 1 <= ws.pongs <= ws.pings_sent
    assert metrics.frames == ws.messages  # no pong became a frame
    assert f"{ws.pings_sent} pings sent, {ws.pongs} pongs back" in ws.summary
    quiet = run_metrics(probe_stream(_ws_cfg(stub.url, extra_body=pause))).ws
    assert quiet is not None
    assert (quiet.pings_sent, quiet.pongs) == (0, 0)  # none unless asked
