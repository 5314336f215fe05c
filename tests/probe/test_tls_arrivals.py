"""Over TLS an arrival is one wake-up of the client, not one TLS record: frames a proxy held and then sent as
separate records in one burst must count as one arrival, in the probe and in the load client alike."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import TLSRecordBurst
from tokenpath.probe.aio import stream_once
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import Trace
from tokenpath.probe.transport import TLSOptions
from tokenpath.serve.loops import new_event_loop
from tokenpath.serve.tlscert import self_signed

BURST = 5


@pytest.fixture
def burst_server(tmp_path: Path) -> Iterator[tuple[TLSRecordBurst, str]]:
    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    server = TLSRecordBurst(str(files.cert), str(files.key), burst=BURST)
    yield server, str(files.cert)
    server.close()


def arrivals(trace: Trace) -> list[int]:
    return [r.frames for r in trace.reads if r.frames]


def test_probe_counts_a_burst_of_records_as_one_arrival(burst_server: tuple[TLSRecordBurst, str]) -> None:
    server, cacert = burst_server
    cfg = ProbeConfig(url=f"https://127.0.0.1:{server.port}/v1", tls=TLSOptions(cacert=cacert), first_byte_timeout_s=5)
    trace = probe_stream(cfg)
    assert arrivals(trace) == [BURST, 1]
    assert run_metrics(trace).frames_per_read == (BURST + 1) / 2


def test_load_client_counts_a_burst_of_records_as_one_arrival(burst_server: tuple[TLSRecordBurst, str]) -> None:
    server, cacert = burst_server
    ctx = TLSOptions(cacert=cacert).context()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
    loop = new_event_loop("uvloop")
    try:
        trace = loop.run_until_complete(
            asyncio.wait_for(stream_once("127.0.0.1", server.port, request, "s", ssl_context=ctx), 10)
        )
    finally:
        loop.close()
    assert arrivals(trace) == [BURST, 1]


def test_a_record_read_alone_would_have_hidden_the_burst(
    burst_server: tuple[TLSRecordBurst, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: without the drain, one read per record shows no burst at all."""
    from tokenpath.probe.transport import SocketTransport

    monkeypatch.setattr(SocketTransport, "drain", lambda self: b"")
    server, cacert = burst_server
    cfg = ProbeConfig(url=f"https://127.0.0.1:{server.port}/v1", tls=TLSOptions(cacert=cacert), first_byte_timeout_s=5)
    assert set(arrivals(probe_stream(cfg))) == {1}


def test_a_peer_that_never_answers_close_notify_is_aborted_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream is over when its last chunk arrives; the client's close_notify then goes unanswered here (the
    peer holds the socket and reads nothing). The stream returns after CLOSE_WAIT_S, not TLS's own 30 s shutdown
    timeout, and leaves nothing that keeps the loop from closing."""
    from tokenpath.probe import aio

    monkeypatch.setattr(aio, "CLOSE_WAIT_S", 0.3)
    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(files.cert), str(files.key))
    listener = socket.create_server(("127.0.0.1", 0))
    release = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with ctx.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            body = b"data: [DONE]\n\n"
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))  # fmt: skip
            release.wait(10)  # never reads the close_notify

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
    client_ctx = TLSOptions(cacert=str(files.cert)).context()
    loop = new_event_loop("uvloop")
    try:
        started = time.monotonic()
        stream = stream_once("127.0.0.1", listener.getsockname()[1], request, "s", ssl_context=client_ctx)
        loop.run_until_complete(asyncio.wait_for(stream, 10))
        elapsed = time.monotonic() - started
    finally:
        loop.close()  # EBUSY here if the transport were still closing
        release.set()
        listener.close()
    assert elapsed < 5  # generous for a loaded host; without the abort it is uvloop's 30 s (the wait_for's 10)
