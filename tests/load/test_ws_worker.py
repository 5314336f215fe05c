"""The load worker over WebSocket (Workload.transport websocket, load/wsconn.py): each stream upgrades, sends its
response.create and is recorded from its messages; against the in-process stub (its Responses WebSocket mode) and
scripted peers that refuse the upgrade, coalesce messages, or close before the final event."""

from __future__ import annotations

import asyncio
import functools
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.helpers import BackgroundLoop, CountingJson
from tests.serve.h2harness import FakeTransport
from tests.wssession import accept_101, scripted, server_text
from tokenpath.clock import monotonic_ns
from tokenpath.errors import UsageError
from tokenpath.load.runner import Cell, LoadConfig, LoadRunner, _level_row, _websocket_figures, _websocket_stream
from tokenpath.load.worker import (
    SAME_FAILURE_MIN,
    StreamResult,
    WorkerReport,
    Workload,
    _probe_config,
    closed_loop,
    one_stream,
)
from tokenpath.load.wsconn import (
    MAX_TYPES_KNOWN,
    NOT_CARRIED,
    FinalTypes,
    WsLeanRecorder,
    WsLoadStream,
    WsStreamFigures,
    ws_request,
)
from tokenpath.probe import wsstream
from tokenpath.probe.aio import _StreamProtocol
from tokenpath.probe.trace import TraceRecorder
from tokenpath.probe.wsstream import event_type, sse_event
from tokenpath.report import load_table
from tokenpath.results.model import LoadResults, LoadRow, MedianAndTail, Provenance, load_row
from tokenpath.serve.loops import new_event_loop
from tokenpath.stub.config import StubConfig
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.ending import EndKind
from tokenpath.wire.httpversion import HttpVersion

TOKENS = 6


def work(url: str, **kw: Any) -> Workload:
    base: dict[str, Any] = {"max_streams": 3, "warmup_s": 0.0, "duration_s": 0.6, "api": Api.RESPONSES}
    return Workload(url, "tokenpath-stub", "p", TOKENS, **{**base, "transport": "websocket", **kw})


def run(coro_fn: Callable[[], Any]) -> Any:
    loop = new_event_loop("uvloop")
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


@pytest.fixture
def stub() -> Iterator[StubServer]:
    bg = BackgroundLoop()
    server = StubServer(StubConfig(port=0, api="all", tokens=TOKENS, interval_ms=5, ttft_ms=20))
    bg.run(server.start())
    yield server
    bg.run(server.close())
    bg.close()


def test_streams_over_websocket_upgrade_and_are_recorded_from_their_messages(stub: StubServer) -> None:
    report: WorkerReport = run(lambda: closed_loop(work(stub.url)))
    assert report.results
    assert [r.error for r in report.results if r.error] == []
    for r in report.results:
        assert r.ws is not None
        assert r.ws.upgraded
        assert r.ws.upgrade_status == 101
        assert r.ws.upgrade_ns > 0
        assert r.ws.final_event
        assert r.ws.close_code is None
        assert r.ws.messages >= TOKENS  # every delta a message of its own, plus the format's control events
        assert 0 < r.ws.message_reads <= r.ws.messages
        assert r.end is EndKind.COMPLETE
        assert r.first_token == 0  # the join: the first content message carries the stub's token 0
        assert r.first_content_t_ns is not None
        assert r.frames == TOKENS  # every token's message arrived, as its own frame
        assert r.lost == 0
        assert r.out_of_order == 0
        log = stub.audit.get(r.stream_id)
        assert log is not None  # the stream id rode on the upgrade: the stub's audit knows the stream


def test_without_the_option_the_same_worker_streams_over_sse(stub: StubServer) -> None:
    report: WorkerReport = run(lambda: closed_loop(replace(work(stub.url), transport="sse")))
    assert report.results
    assert all(r.error is None and r.ws is None for r in report.results)


DELTA = {"type": "response.output_text.delta", "delta": " 0", "item_id": "i", "output_index": 0, "content_index": 0}


def stream(url: str) -> StreamResult:
    """One stream of the worker's, as a virtual user runs it."""
    w = work(url)
    cfg = _probe_config(w)
    result: StreamResult = run(lambda: one_stream(cfg, cfg.target.host, cfg.target.port, w))
    return result


def test_a_path_that_refuses_the_upgrade_is_not_upgraded_never_a_fast_stream() -> None:
    def refuse(conn: socket.socket, key: str) -> None:  # nginx without the Upgrade headers, to a POST-only route
        body = b'{"error":"GET is not allowed"}'
        conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    for url in scripted(refuse):
        r = stream(url)
    assert r.ws is not None
    assert not r.ws.upgraded
    assert r.ws.upgrade_status == 405
    assert r.error is not None
    assert r.error.startswith("WebSocket upgrade not carried: HTTP 405 instead of 101")
    assert "GET is not allowed" in r.error
    assert r.first_content_t_ns is None
    assert r.end is EndKind.CUT_ERROR  # an error status: no stream at all


def test_a_path_that_hangs_up_on_the_offer_is_not_upgraded() -> None:
    def hang_up(conn: socket.socket, key: str) -> None:
        conn.shutdown(socket.SHUT_RDWR)

    for url in scripted(hang_up):
        r = stream(url)
    assert r.ws is not None
    assert not r.ws.upgraded
    assert r.ws.upgrade_status == 0
    assert r.error is not None
    assert "not carried: no valid answer" in r.error


def _burst(conn: socket.socket, key: str) -> None:
    """Three deltas and the final event in one write."""
    conn.sendall(accept_101(key))
    conn.recv(65536)  # the response.create
    conn.sendall(server_text(DELTA) * 3 + server_text({"type": "response.completed", "response": {}}))
    conn.recv(64)  # our close


def test_messages_in_one_read_are_counted_as_coalesced_never_merged() -> None:
    for url in scripted(_burst):
        r = stream(url)
    assert r.ws is not None
    assert r.ws.upgraded
    assert r.ws.messages == 4
    assert r.ws.message_reads == 1
    assert r.ws.final_event
    assert r.end is EndKind.COMPLETE


@pytest.mark.parametrize(
    ("close", "code", "kind"),
    [
        (bytes([0x88, 2, 0x03, 0xF3]), 1011, EndKind.CUT_ERROR),  # the server failed
        (bytes([0x88, 2, 0x03, 0xE8]), 1000, EndKind.CUT_SILENT),  # a clean close, yet no final event
        (b"", 1006, EndKind.CUT_ERROR),  # the socket ends without a close frame
    ],
)
def test_a_close_before_the_final_event_is_a_cut_with_its_code(close: bytes, code: int, kind: EndKind) -> None:
    def cut(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        conn.recv(65536)
        conn.sendall(server_text(DELTA) + close)

    for url in scripted(cut):
        r = stream(url)
    assert r.ws is not None
    assert r.ws.upgraded
    assert not r.ws.final_event
    assert r.ws.close_code == code
    assert r.end is kind
    assert r.error is not None  # a cut is never in the figures


def test_each_message_is_parsed_once_by_the_probe_s_event_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load path re-frames a message with probe/wsstream.py's event_type and sse_event, and parses it once: its
    type serves the event name, the session check and whether it ends the stream."""
    parses = CountingJson()
    monkeypatch.setattr(wsstream, "json", parses)

    for url in scripted(_burst):
        r = stream(url)
    assert r.ws is not None
    assert r.ws.messages == 4
    assert parses.loads_calls == 4


def test_a_level_carries_the_upgrade_figures_to_the_table_and_json() -> None:
    cell = Cell("nginx", 3)
    for ws in (
        WsStreamFigures(True, 101, 2_000_000, messages=10, message_reads=5, final_event=True),
        WsStreamFigures(True, 101, 4_000_000, messages=10, message_reads=10, close_code=1011),
        WsStreamFigures(False, 400, 1_000_000),
        WsStreamFigures(False, 400, 1_000_000),
    ):
        _websocket_stream(cell, ws)
    figures = _websocket_figures(cell)
    assert figures.upgraded == 2
    assert figures.not_upgraded == {"400": 2}
    assert figures.upgrade_ms_p50 == pytest.approx(2.0)
    assert figures.upgrade_ms_p99 == pytest.approx(4.0)
    assert figures.messages_per_read == pytest.approx(20 / 15)
    assert figures.closes_before_final == {"1011": 1}
    row = LoadRow(level=3, target="nginx", transport="websocket", websocket=figures)
    doc = LoadResults(provenance=Provenance.now("load"), config={}, levels=(row,))
    back = load_row(json.loads(json.dumps(doc.to_json()["levels"][0])))
    assert back.websocket == figures
    assert back.transport == "websocket"
    text = load_table.markdown(doc)
    assert "WebSocket upgrades" in text
    assert "2/4 101, 2.00/4.00, not upgraded: 2 x HTTP 400" in text
    assert "| 1.33 |" in text


def test_websocket_is_refused_where_it_cannot_run() -> None:
    with pytest.raises(UsageError, match=r"HTTP/1\.1 upgrade"):
        LoadConfig(("direct",), api=Api.RESPONSES, transport="websocket", http_version=HttpVersion.HTTP2)
    with pytest.raises(UsageError, match="no WebSocket mode"):
        LoadConfig(("direct",), transport="websocket")
    with pytest.raises(UsageError, match="transport"):
        LoadConfig(("direct",), transport="pigeon")


def test_the_option_reaches_every_client_process_and_ray_actor() -> None:
    """Local client processes and the cluster's actors (load/cluster.py RayClients.run) are handed these shares."""
    base = work("http://127.0.0.1:1", max_streams=7)
    for n in (1, 2, 3):
        assert {w.transport for w in LoadRunner._shares(base, n)} == {"websocket"}
    assert {w.transport for w in LoadRunner._shares(replace(base, rate=10.0), 2)} == {"websocket"}


def test_a_101_with_a_wrong_accept_is_not_upgraded() -> None:
    def wrong(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101("not-the-key"))

    for url in scripted(wrong):
        r = stream(url)
    assert r.ws is not None
    assert not r.ws.upgraded
    assert r.ws.upgrade_status == 0
    assert r.error is not None
    assert r.first_content_t_ns is None


def test_a_peer_that_dies_right_after_its_101_is_a_cut_never_a_stream() -> None:
    def dies(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        conn.recv(65536)
        conn.shutdown(socket.SHUT_RDWR)

    for url in scripted(dies):
        r = stream(url)
    assert r.ws is not None
    assert r.ws.upgraded
    assert r.ws.messages == 0
    assert r.ws.close_code == 1006
    assert r.end is EndKind.CUT_ERROR
    assert r.error is not None


def test_a_binary_message_is_closed_1003_by_us_and_reported_as_a_cut() -> None:
    def binary(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        conn.recv(65536)
        conn.sendall(server_text(DELTA) + bytes([0x82, 3]) + b"abc")
        conn.recv(64)  # our close

    for url in scripted(binary):
        r = stream(url)
    assert r.ws is not None
    assert r.ws.messages == 1
    assert r.ws.close_code == 1003
    assert r.end is EndKind.CUT_ERROR


def test_a_level_stopped_by_refused_upgrades_names_the_upgrade_not_credentials() -> None:
    cell = Cell("nginx", 3, stopped="52 of 52 streams failed the same way (WebSocket upgrade not carried): ...")
    cfg = LoadConfig(("direct", "nginx"), api=Api.RESPONSES, transport="websocket", client_workers=1)
    row = _level_row(cell, MedianAndTail(), cfg)
    (warning,) = [w for w in row.warnings if w.kind == "stopped_early"]
    assert "does not carry the WebSocket upgrade" in warning.remedy
    assert "credentials" not in warning.remedy


def test_refusals_that_stop_a_level_in_its_warm_up_are_its_streams() -> None:
    """A path that never carries the upgrade stops the level after SAME_FAILURE_MIN refusals, long before a warm-up
    ends: those refusals are reported (not upgraded, with their status), never a level of no streams."""

    def refuse(conn: socket.socket, key: str) -> None:
        conn.sendall(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n")

    for url in scripted(refuse):
        long_warm_up = work(url, warmup_s=60.0, duration_s=1.0)
        report: WorkerReport = run(functools.partial(closed_loop, long_warm_up))
    assert report.stopped is not None
    assert len(report.results) == SAME_FAILURE_MIN
    assert all(r.ws is not None and r.ws.upgrade_status == 426 for r in report.results)
    assert all(r.error is not None and r.error.startswith(NOT_CARRIED) for r in report.results)


def test_the_types_a_peer_names_are_remembered_within_a_bound() -> None:
    final = FinalTypes(Api.RESPONSES)
    for i in range(MAX_TYPES_KNOWN + 50):
        text = json.dumps({"type": f"response.made_up_{i}"})
        assert not final.ends(event_type(text), sse_event(text, event_type(text)))
    text = '{"type":"response.completed","response":{}}'
    assert final.ends(event_type(text), sse_event(text, event_type(text)))  # asked of the reader, past the bound too
    assert len(final._known) == MAX_TYPES_KNOWN


class _Sock:
    """A socket's setsockopt, recorded."""

    def __init__(self) -> None:
        self.options: list[tuple[int, int, int]] = []

    def setsockopt(self, level: int, name: int, value: int) -> None:
        self.options.append((level, name, value))


def test_both_client_protocols_open_a_stream_the_same_way() -> None:
    """The first bytes (the request; the upgrade offer) at once, on the load client's WebSocket protocol as on the
    probe's asyncio one: one helper, probe/aio.py open_stream. The socket is not touched: the loop turned Nagle off
    already (tests/serve/test_nodelay.py), so no socket object per stream."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        request = ws_request(Api.RESPONSES, "h.test", "/v1/responses", [], {"model": "m"})
        protocols: list[asyncio.Protocol] = [
            WsLoadStream(request, "s", WsLeanRecorder, loop.create_future(), FinalTypes(Api.RESPONSES)),
            _StreamProtocol("s", b"GET / HTTP/1.1\r\n\r\n", monotonic_ns, loop.create_future(), TraceRecorder),
        ]
        for protocol in protocols:
            sock = _Sock()
            transport = FakeTransport({"socket": sock})
            protocol.connection_made(transport)
            assert sock.options == []
            assert len(transport.writes) == 1
            assert transport.writes[0].startswith(b"GET /")
            protocol.connection_made(FakeTransport())  # no socket (a test's transport): the write alone

    asyncio.run(main())
