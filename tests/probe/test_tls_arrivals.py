"""Over TLS an arrival is one wake-up of the client, not one TLS record: frames a proxy held and then sent as
separate records in one burst must count as one arrival, in the probe and in the load client alike."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import TLSRecordBurst
from tokenpath.loops import new_event_loop
from tokenpath.probe.aio import stream_once
from tokenpath.probe.client import ProbeConfig, probe_stream
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.trace import Trace
from tokenpath.probe.transport import TLSOptions
from tokenpath.tlscert import self_signed

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
