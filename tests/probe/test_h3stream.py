"""probe_stream(http_version 3) against an aioquic HTTP/3 server run in a thread on loopback: the arrivals and figures
of a clean stream, the certificate checked, and the ways a stream goes wrong over QUIC (a head with no body after it,
quic-go#5739; a reset; a closed connection) reported as held or cut, never as a short fast stream."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.events import QuicEvent

from tests.quicserver import start_quic
from tokenpath.errors import (
    ConnectError,
    ConnectTimeout,
    HTTPStatusError,
    IdleTimeout,
    NetworkError,
    RemoteProtocolError,
    TLSError,
    UsageError,
)
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.h3figures import BROWSER_H3_WINDOW, DEFAULT_H3_WINDOW, H3Window, parse_h3_window
from tokenpath.probe.metrics import RunMetrics, probe_results, run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.table import probe_table
from tokenpath.probe.trace import PARTIAL_TRACE
from tokenpath.probe.transport import TLSOptions, Transport
from tokenpath.serve.tlscert import self_signed
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind
from tokenpath.wire.httpversion import HttpVersion, parse_http_version

HEAD = [(b":status", b"200"), (b"content-type", b"text/event-stream")]
ROLE = b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
CONTENT = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


@dataclass
class Behaviour:
    """What the server does with each request: `frames` SSE events `interval_s` apart, then [DONE] and the end;
    or, from `after` frames on, `stall` (nothing more), `reset` (the stream), `close` (the connection) or `finish`
    (the stream ended without [DONE])."""

    frames: int = 5
    interval_s: float = 0.02
    after: int | None = None
    then: str = "end"
    heads: list[list[tuple[bytes, bytes]]] = field(default_factory=lambda: [HEAD])  # interim heads first
    error_body: bytes | None = None  # sent with end_stream right after the heads, instead of the frames
    trailers: list[tuple[bytes, bytes]] | None = None  # a field block after [DONE] that ends the stream
    requests: list[list[tuple[bytes, bytes]]] = field(default_factory=list)


class _Server(QuicConnectionProtocol):
    behaviour: Behaviour

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.h3 = H3Connection(self._quic)
        self.tasks: set[asyncio.Future[None]] = set()  # held, so none is collected while it runs

    def quic_event_received(self, event: QuicEvent) -> None:
        for h3_event in self.h3.handle_event(event):
            if isinstance(h3_event, HeadersReceived):
                self.behaviour.requests.append(list(h3_event.headers))
            if isinstance(h3_event, DataReceived) and h3_event.stream_ended:
                self.tasks.add(asyncio.ensure_future(self._respond(h3_event.stream_id)))

    async def _respond(self, sid: int) -> None:
        b = self.behaviour
        for head in b.heads:
            self.h3.send_headers(sid, head)
        if b.error_body is not None:
            self.h3.send_data(sid, b.error_body, end_stream=True)
        self.transmit()
        if b.error_body is not None:
            return
        for k in range(b.frames):
            if b.after is not None and k == b.after:
                if b.then == "reset":
                    self._quic.reset_stream(sid, 0x10C)  # H3_REQUEST_CANCELLED
                    self.transmit()
                elif b.then == "close":
                    self._quic.close(error_code=0x102, reason_phrase="going away")  # H3_INTERNAL_ERROR
                    self.transmit()
                elif b.then == "finish":
                    self.h3.send_data(sid, b"", end_stream=True)
                    self.transmit()
                return  # "stall": the head (and what came before) only, then silence
            await asyncio.sleep(b.interval_s)
            self.h3.send_data(sid, ROLE if k == 0 else CONTENT, end_stream=False)
            self.transmit()
        self.h3.send_data(sid, DONE, end_stream=b.trailers is None)
        if b.trailers is not None:
            self.transmit()
            await asyncio.sleep(b.interval_s)  # the trailers in a read of their own
            self.h3.send_headers(sid, b.trailers, end_stream=True)
        self.transmit()


@dataclass
class H3Server:
    port: int
    cacert: str
    behaviour: Behaviour

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/v1/chat/completions"


@dataclass
class Running:
    h3: H3Server
    stop: Callable[[], None]
    die: Callable[[], None]  # the UDP socket closed with no CONNECTION_CLOSE: a process killed


def _start_server(tmp_path: Path, behaviour: Behaviour, addresses: tuple[str, ...] = ("127.0.0.1",)) -> Running:
    running = start_quic(tmp_path, type("Server", (_Server,), {"behaviour": behaviour}), addresses)
    loop, server, thread, bound = running.loop, running.server, running.thread, running.port
    died = threading.Event()

    def stop() -> None:
        if died.is_set():  # the loop stopped where it was: close what it held, from here
            assert server._transport is not None
            server._transport.abort()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0.05))
            loop.close()
            return

        running.stop()

    def die() -> None:
        """The loop stops where it is (no task runs again), then its UDP socket closes: nothing answers any more."""
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        transport = server._transport
        assert transport is not None
        raw = transport.get_extra_info("socket")
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, raw.fileno())  # the socket's fd now /dev/null: the port closes, no CONNECTION_CLOSE sent
        os.close(null)
        died.set()

    return Running(H3Server(bound, running.cacert, behaviour), stop, die)


@pytest.fixture
def h3_server(tmp_path: Path) -> Iterator[H3Server]:
    running = _start_server(tmp_path, Behaviour())
    try:
        yield running.h3
    finally:
        running.stop()


def _cfg(server: H3Server, **kw: object) -> ProbeConfig:
    base = ProbeConfig(
        url=server.url,
        tls=TLSOptions(cacert=server.cacert),
        http_version=HttpVersion.HTTP3,
        connect_timeout_s=5.0,
        first_byte_timeout_s=5.0,
        idle_timeout_s=5.0,
        total_timeout_s=20.0,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _probe(server: H3Server, **kw: object) -> RunMetrics:
    return run_metrics(probe_stream(_cfg(server, **kw)))


def test_a_clean_stream_over_http3_reports_its_version_arrivals_and_handshake(h3_server: H3Server) -> None:
    h3_server.behaviour.frames = 5
    m = _probe(h3_server)
    assert m.http_version == "3"
    assert m.status == 200
    assert m.frames == 6  # role, four contents, [DONE]
    assert m.ttft_ms is not None
    assert m.ttfb_ms is not None
    assert m.ttfb_ms <= m.ttft_ms
    assert m.h3 is not None
    doc = m.to_json()
    assert doc["http_version"] == "3"
    h3 = doc["h3"]
    assert h3["window"] == "default"
    assert h3["handshake_ms"] > 0
    assert h3["data_events"] >= 6
    assert h3["data_reads"] >= 1
    assert h3["udp_reads"] >= h3["data_reads"]
    assert len(h3["arrivals_ms"]) == m.arrivals  # every arrival's time, in order
    assert h3["arrivals_ms"] == sorted(h3["arrivals_ms"])
    assert RunMetrics.from_json(doc).h3 == m.h3
    # The request reached the server as an HTTP/3 POST with the stream id, our pseudo-headers first.
    request = dict(h3_server.behaviour.requests[0])
    assert request[b":method"] == b"POST"
    assert request[b":path"] == b"/v1/chat/completions"
    assert request[b"x-tokenpath-stream"].startswith(b"tp-")


def test_the_table_shows_the_handshake_and_udp_reads(h3_server: H3Server) -> None:
    table = probe_table(probe_results(h3_server.url, [_probe(h3_server)]), wide=True)
    assert table.title is not None
    assert "over HTTP/3, --h3-window default" in str(table.title)
    columns = [str(c.header) for c in table.columns]
    assert columns[-4:] == ["handshake", "UDP reads", "DATA/read", "stalls"]
    assert all(len(list(c.cells)) == 1 for c in table.columns)


def test_frames_paced_apart_arrive_apart(h3_server: H3Server) -> None:
    """Arrivals are counted per UDP read, not per frame: frames 100 ms apart are one arrival each."""
    h3_server.behaviour.frames, h3_server.behaviour.interval_s = 4, 0.1
    m = _probe(h3_server)
    assert m.frames == 5
    assert m.arrivals >= 4


def test_a_burst_is_one_arrival_per_wake_up_not_per_datagram(h3_server: H3Server) -> None:
    """40 frames sent back to back, each in its own packet: the client's wake-ups read several datagrams each, and
    each wake-up is one arrival (counting per datagram or per DATA would give one arrival per frame)."""
    h3_server.behaviour.frames, h3_server.behaviour.interval_s = 40, 0.0
    m = _probe(h3_server)
    assert m.h3 is not None
    assert m.frames == 41
    assert m.h3.datagrams > m.h3.udp_reads
    assert m.arrivals < m.frames


def test_the_head_then_no_body_is_held_not_fast(h3_server: H3Server) -> None:
    """quic-go#5739: the head arrives, then no body byte. The probe waits out --idle-timeout and says so."""
    h3_server.behaviour.after, h3_server.behaviour.then = 0, "stall"
    with pytest.raises(IdleTimeout, match="0 frames"):
        probe_stream(_cfg(h3_server, idle_timeout_s=0.5))


def test_a_reset_stream_is_a_cut(h3_server: H3Server) -> None:
    h3_server.behaviour.after, h3_server.behaviour.then = 2, "reset"
    with pytest.raises(NetworkError, match="reset the HTTP/3 stream") as caught:
        probe_stream(_cfg(h3_server))
    _assert_cut(caught.value, frames=2)


def test_a_closed_connection_is_a_cut(h3_server: H3Server) -> None:
    h3_server.behaviour.after, h3_server.behaviour.then = 2, "close"
    with pytest.raises(NetworkError, match=r"QUIC connection ended before the HTTP/3 stream.*going away") as caught:
        probe_stream(_cfg(h3_server))
    _assert_cut(caught.value, frames=2)


def _assert_cut(exc: BaseException, frames: int) -> None:
    """A cut over HTTP/3 raises as over TCP: its end (a reset) and the trace so far go with the error."""
    end = STREAM_END.of(exc)
    assert end is not None
    assert (end.kind, end.how) == (EndKind.CUT_ERROR, BodyEnd.RESET)
    partial = PARTIAL_TRACE.of(exc)
    assert partial is not None
    assert 1 <= partial.frame_count <= frames  # a reset in the read that brought the last frame loses it
    assert partial.end == end


def test_every_http3_trace_carries_its_end(h3_server: H3Server) -> None:
    """probe/table.py shows a trace without an end as cut: a whole stream's says complete, one that ended without
    its final event cut_silent."""
    whole = probe_stream(_cfg(h3_server)).end
    assert whole is not None
    assert (whole.kind, whole.how) == (EndKind.COMPLETE, BodyEnd.END_STREAM)
    h3_server.behaviour.after, h3_server.behaviour.then = 2, "finish"
    short = probe_stream(_cfg(h3_server)).end
    assert short is not None
    assert (short.kind, short.how) == (EndKind.CUT_SILENT, BodyEnd.END_STREAM)


def test_an_error_status_is_reported_with_its_body(h3_server: H3Server) -> None:
    h3_server.behaviour.heads = [[(b":status", b"503"), (b"content-type", b"application/json")]]
    h3_server.behaviour.error_body = b'{"error":"overloaded"}'
    with pytest.raises(HTTPStatusError, match=r"HTTP 503 .*overloaded"):
        probe_stream(_cfg(h3_server))


def test_an_interim_head_is_not_the_response(h3_server: H3Server) -> None:
    h3_server.behaviour.heads = [[(b":status", b"103"), (b"link", b"</a>; rel=preload")], HEAD]
    m = _probe(h3_server)
    assert m.status == 200
    assert m.frames == 6


def test_trailers_end_the_stream_and_are_no_head(h3_server: H3Server) -> None:
    h3_server.behaviour.trailers = [(b"x-usage", b"12")]
    m = _probe(h3_server)
    assert m.status == 200
    assert m.frames == 6


def test_a_malformed_head_is_a_protocol_error(h3_server: H3Server) -> None:
    h3_server.behaviour.heads = [[(b":status", b"2000"), (b"content-type", b"text/event-stream")]]
    with pytest.raises(RemoteProtocolError, match=r"broke HTTP/3 .*:status"):
        probe_stream(_cfg(h3_server))


def test_a_server_that_dies_mid_stream_is_a_cut(tmp_path: Path) -> None:
    """The server's process gone mid-stream (no CONNECTION_CLOSE): its port answers ICMP unreachable, or nothing while
    the client has nothing to send: a cut or a held stream, never a complete one and never a connect failure."""
    server = _start_server(tmp_path, Behaviour(frames=20, interval_s=0.05))
    threading.Timer(0.4, server.die).start()
    try:
        with pytest.raises((NetworkError, IdleTimeout)) as caught:
            probe_stream(_cfg(server.h3, idle_timeout_s=2.0))
    finally:
        server.stop()
    assert not isinstance(caught.value, ConnectError), caught.value
    assert "0 frames" not in str(caught.value)  # it died mid-stream, after frames had arrived


def test_the_certificate_is_checked(h3_server: H3Server, tmp_path: Path) -> None:
    other = self_signed(tmp_path / "other", ["127.0.0.1"])
    with pytest.raises(TLSError):
        probe_stream(_cfg(h3_server, tls=TLSOptions(cacert=str(other.cert))))
    assert _probe(h3_server, tls=TLSOptions(insecure=True)).http_version == "3"


def test_the_certificate_must_name_the_host(tmp_path: Path) -> None:
    """The right CA, the wrong name: a certificate for 127.0.0.2 (and localhost) does not serve 127.0.0.1."""
    server = _start_server(tmp_path, Behaviour(), addresses=("127.0.0.2",))
    try:
        with pytest.raises(TLSError):
            probe_stream(_cfg(server.h3))
        named = replace(_cfg(server.h3), url=server.h3.url.replace("127.0.0.1", "localhost"))
        assert run_metrics(probe_stream(named)).http_version == "3"
    finally:
        server.stop()


def test_the_windows_are_sent_as_stated(h3_server: H3Server) -> None:
    """A stream window below the body: the server is held by it, each read then leaves no credit (a stall), and
    the stream still completes as our MAX_STREAM_DATA goes out."""
    h3_server.behaviour.frames = 40
    h3_server.behaviour.interval_s = 0.0
    small = _probe(h3_server, h3_window=H3Window(200, 100_000))
    assert small.h3 is not None
    assert small.frames == 41
    assert small.h3.flow_control_stalls >= 1
    assert small.h3.min_credit is not None
    assert small.h3.min_credit < 1200
    roomy = _probe(h3_server, h3_window=BROWSER_H3_WINDOW)
    assert roomy.h3 is not None
    assert roomy.h3.window == "browser"
    assert roomy.h3.flow_control_stalls == 0


def test_nothing_listening_fails_the_connect(tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never read: no ICMP, no answer
        cfg = ProbeConfig(
            url=f"https://127.0.0.1:{port}/v1/chat/completions",
            http_version=HttpVersion.HTTP3,
            tls=TLSOptions(insecure=True),
            connect_timeout_s=0.5,
        )
        with pytest.raises(ConnectTimeout, match="QUIC handshake"):
            probe_stream(cfg)


def test_a_bad_cacert_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("not a certificate")
    cfg = ProbeConfig(url="https://127.0.0.1:1/v1", http_version=HttpVersion.HTTP3, tls=TLSOptions(cacert=str(bad)))
    with pytest.raises(UsageError, match="cacert"):
        probe_stream(cfg)


def test_http3_refuses_a_connector_it_would_bypass(h3_server: H3Server) -> None:
    """A link's (or a test's) TCP connector cannot carry QUIC: refused, never silently bypassed from the host."""

    def connect(target: object, cfg: object) -> Transport:
        raise AssertionError("not called")

    with pytest.raises(UsageError, match="UDP"):
        probe_stream(_cfg(h3_server), connect=connect)


def test_http3_needs_https() -> None:
    with pytest.raises(UsageError, match="https"):
        probe_stream(ProbeConfig(url="http://127.0.0.1:1/v1/chat/completions", http_version=HttpVersion.HTTP3))


def test_window_presets_parse_back() -> None:
    assert parse_h3_window("default") == DEFAULT_H3_WINDOW
    assert (BROWSER_H3_WINDOW.stream, BROWSER_H3_WINDOW.connection) == (6 << 20, 15 << 20)  # Chromium's
    for text in ("65536", "1000:2000", "browser"):
        assert str(parse_h3_window(text)) == text
    with pytest.raises(UsageError):
        parse_h3_window("lots")
    with pytest.raises(UsageError):
        parse_h3_window("0")


def test_declared_versions_refuse_http3_until_a_client_speaks_it() -> None:
    with pytest.raises(ValueError, match="probe --http3"):
        parse_http_version("3")
    assert parse_http_version("2") is HttpVersion.HTTP2
