"""probe_stream(http_version 2) over a scripted transport whose peer is the h2 library's server state machine: the
arrival rule per stream, the head checks and errors over HTTP/2, and servers that do not speak it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest

from tokenpath.errors import FirstByteTimeout, HTTP2Unavailable, HTTPStatusError, NetworkError, ProtocolError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import PARTIAL_TRACE, Trace
from tokenpath.probe.transport import Target, Transport
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind
from tokenpath.wire.h2client import BROWSER_WINDOW
from tokenpath.wire.httpversion import HttpVersion

SSE = [(b":status", b"200"), (b"content-type", b"text/event-stream")]
CONTENT = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
ROLE = b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'

Script = Callable[["H2Peer", int], list[bytes]]  # (peer, request's stream id) -> what each recv() returns


class H2Peer:
    """A Transport whose other end is an h2 server: the request is fed to it, `script` says what each recv()
    returns (bytes, or b"" for EOF)."""

    def __init__(self, script: Script) -> None:
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.h2.initiate_connection()
        self.script = script
        self.reads: list[bytes] | None = None
        self.sent = b""
        self.request_headers: list[tuple[bytes, bytes]] = []

    def sendall(self, data: bytes) -> None:
        self.sent += data
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived) and self.reads is None:
                assert event.stream_id is not None
                self.request_headers = list(event.headers or [])
                self.reads = self.script(self, event.stream_id)

    def recv(self, timeout_s: float) -> bytes:
        assert self.reads is not None
        if not self.reads:
            raise TimeoutError
        return self.reads.pop(0)

    def drain(self) -> bytes:
        return b""

    def close(self) -> None:
        pass

    def take(self) -> bytes:
        return self.h2.data_to_send()


def run(script: Script, **cfg: Any) -> tuple[Trace, H2Peer]:
    peer = H2Peer(script)
    ticks = iter(range(0, 10**15, 1_000_000))  # 1 ms a clock read: a timeout is ~1,000 loops

    def connect(target: Target, c: ProbeConfig) -> Transport:
        return peer

    config = ProbeConfig(
        url="http://127.0.0.1:9", http_version=HttpVersion.HTTP2, first_byte_timeout_s=1, idle_timeout_s=1, **cfg
    )
    return probe_stream(config, connect=connect, clock=lambda: next(ticks)), peer


def test_each_read_that_advanced_the_stream_is_an_arrival_and_others_are_not() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        reads = [peer.take()]  # SETTINGS (+ ACK): the connection's, not the stream's
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, ROLE)
        reads.append(peer.take())
        peer.h2.ping(b"12345678")
        reads.append(peer.take())  # a PING only: not a read of this stream
        peer.h2.send_data(sid, CONTENT)
        peer.h2.send_data(sid, CONTENT)
        reads.append(peer.take())  # two frames, one read: one arrival of two
        peer.h2.send_data(sid, b"data: [DONE]\n\n", end_stream=True)
        reads.append(peer.take())
        return reads

    trace, peer = run(script)
    assert trace.http_version == "2"
    assert trace.frame_count == 4
    assert dict(trace.bursts) == {1: 2, 2: 1}
    assert trace.read_count == 3
    assert trace.h2 is not None
    assert trace.h2.connection_reads == 5
    assert trace.h2.data_frames == 4
    assert trace.h2.data_reads == 3
    assert trace.h2.flow_control_stalls == 0
    assert trace.t_first_content_ns is not None
    fields = dict(peer.request_headers)
    assert fields[b":method"] == b"POST"
    assert fields[b":path"] == b"/v1/chat/completions"
    assert fields[b"accept"] == b"text/event-stream"
    assert b"x-tokenpath-stream" in fields
    # the PING was answered (the client wrote its ACK)
    peer.h2.receive_data(peer.sent)


def test_the_window_is_the_stated_one() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        assert peer.h2.remote_settings.initial_window_size == BROWSER_WINDOW.stream
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, CONTENT, end_stream=True)
        return [peer.take()]

    trace, _ = run(script, h2_window=BROWSER_WINDOW)
    assert trace.h2 is not None
    assert trace.h2.window == "browser"


def test_a_non_2xx_answer_is_its_status_with_the_body() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, [(b":status", b"503"), (b"content-type", b"application/json")])
        first = peer.take()
        peer.h2.send_data(sid, b'{"error":"overloaded"}', end_stream=True)
        return [first, peer.take()]

    with pytest.raises(HTTPStatusError, match=r"HTTP 503 .*overloaded"):
        run(script)


def test_a_reset_stream_is_a_network_error_naming_the_code() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, ROLE)
        first = peer.take()
        peer.h2.reset_stream(sid, 2)
        return [first, peer.take()]

    with pytest.raises(NetworkError, match="INTERNAL_ERROR"):
        run(script)


def test_a_connection_closed_mid_stream_is_a_protocol_error() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, CONTENT)
        return [peer.take(), b""]

    with pytest.raises(ProtocolError, match="before the HTTP/2 stream ended"):
        run(script)


@pytest.mark.parametrize(
    "reads",
    [
        [b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"],  # nginx without http2 on the port
        [b""],  # a server that closes on the preface
    ],
)
def test_a_server_that_does_not_speak_http2_is_http2_unavailable(reads: list[bytes]) -> None:
    with pytest.raises(HTTP2Unavailable, match="HTTP/2"):
        run(lambda peer, sid: list(reads))


def test_silence_is_the_first_byte_timeout() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        return [peer.take()]  # SETTINGS, then nothing for this stream

    with pytest.raises(FirstByteTimeout):
        run(script)


def test_the_tls_context_follows_http2_also_after_replace() -> None:
    cfg = ProbeConfig(url="https://127.0.0.1:9", http_version=HttpVersion.HTTP2)
    assert cfg.tls.http2
    h1 = dataclasses.replace(cfg, http_version=HttpVersion.HTTP11)
    assert not h1.tls.http2  # an HTTP/1.1 run made from an h2 one must not insist on h2 by ALPN
    assert dataclasses.replace(h1, http_version=HttpVersion.HTTP2).tls.http2


def test_a_goaway_then_close_mid_stream_says_what_the_server_said() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, CONTENT)
        peer.h2.close_connection(11, additional_data=b"too many requests", last_stream_id=sid)
        return [peer.take(), b""]

    with pytest.raises(ProtocolError, match=r"GOAWAY: ENHANCE_YOUR_CALM \(too many requests\)"):
        run(script)


def test_a_ping_flood_is_a_protocol_error_and_the_probe_stops_reading() -> None:
    def script(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        first = peer.take()
        ping = first[:0] + bytes([0, 0, 8, 6, 0, 0, 0, 0, 0]) + b"p" * 8
        return [first, ping * 2_000]

    with pytest.raises(ProtocolError, match="flood"):
        run(script)


def test_end_stream_without_the_final_event_is_cut_silent_and_with_it_complete() -> None:
    def script(done: bool) -> Script:
        def send(peer: H2Peer, sid: int) -> list[bytes]:
            peer.h2.send_headers(sid, SSE)
            peer.h2.send_data(sid, CONTENT + (b"data: [DONE]\n\n" if done else b""), end_stream=True)
            return [peer.take()]

        return send

    cut, _ = run(script(False))
    assert cut.end is not None
    assert (cut.end.kind, cut.end.how) == (EndKind.CUT_SILENT, BodyEnd.END_STREAM)
    whole, _ = run(script(True))
    assert whole.end is not None
    assert (whole.end.kind, whole.end.how) == (EndKind.COMPLETE, BodyEnd.END_STREAM)


def test_a_reset_stream_and_a_lost_connection_carry_their_cut_error() -> None:
    def reset(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, ROLE)
        first = peer.take()
        peer.h2.reset_stream(sid, 2)
        return [first, peer.take()]

    def closed(peer: H2Peer, sid: int) -> list[bytes]:
        peer.h2.send_headers(sid, SSE)
        peer.h2.send_data(sid, CONTENT)
        return [peer.take(), b""]

    for script, how in ((reset, BodyEnd.RESET), (closed, BodyEnd.TRUNCATED)):
        with pytest.raises(ProtocolError if how is BodyEnd.TRUNCATED else NetworkError) as info:
            run(script)
        end = STREAM_END.of(info.value)
        assert end is not None
        assert (end.kind, end.how) == (EndKind.CUT_ERROR, how)
        partial = PARTIAL_TRACE.of(info.value)  # the trace so far, as over HTTP/1.1 (diagnose reads a cut from it)
        assert partial is not None
        assert partial.frame_count == 1
        assert partial.end == end
