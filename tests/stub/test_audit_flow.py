"""An audit answer (every log at once can be hundreds of MB) is written only while the client takes it: a client that
does not read holds the answer's writer, not the answer queued in memory, and one that takes nothing for
stub.app.STALL_S is dropped, as a paced stream's is (tests/stub/test_flow_control.py). Found by review: a client that
never read got the whole answer queued in its transport for as long as it stayed connected."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest

from tests.helpers import BackgroundLoop
from tests.stub.test_audit_slices import _expected, _fill
from tests.stub.test_flow_control import SEND_BUFFER_MAX, _quiet_client, _read_to_end, shut_window_resets
from tokenpath.serve import h2 as serve_h2
from tokenpath.serve import http as serve_http
from tokenpath.stub import app as stub_app
from tokenpath.stub.server import StubServer

StartStub = Callable[..., StubServer]
ALL = b"GET /_tokenpath/audit HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
# What the stub may hand its transport while the client reads nothing: the kernel's buffers and asyncio's up to its
# high-water mark, with the piece that crossed it (a few kB: one log's entry).
HELD_BYTES = SEND_BUFFER_MAX + (512 << 10)
STREAMS, WRITES = 3000, 200  # an answer of ~24 MB: several times what the kernel and asyncio hold


@pytest.fixture
def big(bg: BackgroundLoop, start_stub: StartStub) -> StubServer:
    stub = start_stub()
    bg.call(_fill, stub.audit, STREAMS, WRITES)
    if len(_expected(stub.audit, None)) < 4 * HELD_BYTES:
        pytest.skip(f"a {SEND_BUFFER_MAX} B send buffer holds most of the answer: held and queued look alike")
    return stub


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes every audit answer hands its carrier (HTTP/1.1's transport, or an HTTP/2 stream's queue)."""
    counts = [0]

    def counting(original: Callable[..., None]) -> Callable[..., None]:
        def write(self: serve_http.Response, wire_bytes: bytes, last: bool = False) -> None:
            if self.request.path.startswith(stub_app.AUDIT_PREFIX):
                counts[0] += len(wire_bytes)
            original(self, wire_bytes, last)

        return write

    monkeypatch.setattr(serve_http.Response, "write", counting(serve_http.Response.write))
    monkeypatch.setattr(serve_h2.H2Response, "write", counting(serve_h2.H2Response.write))
    return counts


def _answered(bg: BackgroundLoop, stub: StubServer) -> None:
    """Waits (bounded) until no audit answer is in progress."""
    deadline = time.monotonic() + 60
    while bg.call(lambda: len(stub.app._tasks)) and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.05)
    assert bg.call(lambda: len(stub.app._tasks)) == 0, "the answer never ended"  # type: ignore[union-attr]


def test_a_client_that_never_reads_an_audit_answer_holds_little_and_is_dropped(
    bg: BackgroundLoop, big: StubServer, written: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stub_app, "STALL_S", 0.3)
    with _quiet_client(big.port) as sock:
        sock.sendall(ALL)
        _answered(bg, big)
        assert 0 < written[0] < HELD_BYTES, f"{written[0]} B handed to the transport of a client that read nothing"
        with pytest.raises(ConnectionResetError):  # dropped, what was queued with it
            _read_to_end(sock)


def test_a_client_that_reads_late_gets_the_whole_answer(bg: BackgroundLoop, big: StubServer) -> None:
    """Paused, then resumed: every byte, as AuditReply makes them."""
    with _quiet_client(big.port) as sock:
        sock.settimeout(60)
        sock.sendall(ALL)
        time.sleep(1.0)  # the answer built and its writer paused on the full buffer
        data = bytearray()
        while chunk := sock.recv(1 << 20):
            data += chunk
    _, _, body = bytes(data).partition(b"\r\n\r\n")
    assert body == _expected(big.audit, None)


def test_an_http2_audit_answer_waits_on_its_window_and_is_reset_after_the_stall_limit(
    big: StubServer, written: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """h2c with the client's initial window 0: the answer's writer is paused from its first DATA (the window holds
    it back; the stream's queue would take the whole answer), then the stream is reset (RST_STREAM CANCEL)."""
    import h2.errors

    monkeypatch.setattr(stub_app, "STALL_S", 0.3)
    headers = [(":method", "GET"), (":path", "/_tokenpath/audit"), (":scheme", "http"), (":authority", "t")]
    assert shut_window_resets(big.port, headers, None, 60) == [(1, h2.errors.ErrorCodes.CANCEL)]
    assert 0 < written[0] < HELD_BYTES, f"{written[0]} B queued for a stream whose window stayed shut"


def test_an_http2_client_that_reads_gets_the_whole_answer(big: StubServer) -> None:
    """The window opened as the client takes DATA: the paused writer resumes on each WINDOW_UPDATE, every byte sent."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "GET"), (":path", "/_tokenpath/audit"), (":scheme", "http"),
                          (":authority", "t")], end_stream=True)  # fmt: skip
    body = bytearray()
    ended = False
    with socket.create_connection(("127.0.0.1", big.port), timeout=60) as sock:
        sock.sendall(conn.data_to_send())
        while not ended:
            data = sock.recv(1 << 20)
            assert data, "the connection closed before the answer's end"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                ended |= isinstance(event, h2.events.StreamEnded)
                assert not isinstance(event, h2.events.StreamReset)
            sock.sendall(conn.data_to_send())
    assert bytes(body) == _expected(big.audit, None)
