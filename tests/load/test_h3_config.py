"""load --http3's rules (load/h3conn.py): an https target only, refused by name where it would be ignored or cannot
run (the catalogue's clear-text targets, WebSocket, a cluster, HTTP/2's options); the option reaches every client
process; the direct floor is measured over HTTP/1.1 (the stub serves no QUIC)."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest
from aioquic.quic.configuration import QuicConfiguration
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.errors import UsageError
from tokenpath.load import worker
from tokenpath.load.runner import Cell, LoadConfig, LoadRunner, _http3_fields
from tokenpath.load.worker import Workload, _probe_config, one_stream
from tokenpath.probe.transport import TLSOptions
from tokenpath.report import load_table
from tokenpath.results.model import LoadResults, LoadRow, Provenance
from tokenpath.serve.loops import new_event_loop
from tokenpath.wire.apis import Api
from tokenpath.wire.httpversion import HttpVersion

H3 = HttpVersion.HTTP3
TARGET = {"target_url": "https://127.0.0.1:8443/v1", "stub_url": "http://127.0.0.1:9/"}


def test_http3_needs_an_https_target_and_refuses_what_it_cannot_run() -> None:
    LoadConfig(("direct",), http_version=H3, **TARGET)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="https `target_url`"):
        LoadConfig(("direct",), http_version=H3)
    with pytest.raises(UsageError, match="https `target_url`"):
        LoadConfig(("direct",), http_version=H3, target_url="http://127.0.0.1:1/v1", stub_url="http://127.0.0.1:9/")
    with pytest.raises(UsageError, match="clear text"):
        LoadConfig(("direct", "nginx"), http_version=H3, **TARGET)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="cluster"):
        LoadConfig(("direct",), http_version=H3, cluster="local:2", **TARGET)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="HTTP/3"):
        LoadConfig(("direct",), http_version=H3, api=Api.RESPONSES, transport="websocket", **TARGET)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="HTTP/2's"):
        LoadConfig(("direct",), http_version=H3, streams_per_connection=4, **TARGET)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="`h3_window` is HTTP/3's"):
        LoadConfig(("direct",), h3_window="browser")
    assert LoadConfig(("direct",), http_version=H3, h3_window="browser", **TARGET).h3_window == "browser"  # type: ignore[arg-type]


def test_the_cli_refuses_http3_with_websocket_and_with_http2_by_name() -> None:
    argv = ["load", "--http3", "--target", "https://127.0.0.1:1/", "--stub-url", "http://127.0.0.1:9/"]
    out = CliRunner().invoke(app, [*argv, "--api", "responses", "--transport", "websocket"])
    assert out.exit_code != 0
    assert "--transport websocket is an HTTP/1.1 upgrade: it does not run over HTTP/3" in " ".join(out.output.split())
    out = CliRunner().invoke(app, [*argv, "--http2"])
    assert out.exit_code != 0
    assert "--http2 and --http3: choose one" in " ".join(out.output.split())
    out = CliRunner().invoke(app, ["load", "--http3"])
    assert out.exit_code != 0
    assert "--http3 needs an https --target" in " ".join(out.output.split())


def test_the_option_reaches_every_client_process() -> None:
    base = Workload("https://127.0.0.1:1/v1", "m", "p", 5, 7, 0.0, 1.0, http_version=H3, h3_window="browser")
    for n in (1, 2, 3):
        shares = LoadRunner._shares(base, n)
        assert {(w.http_version, w.h3_window) for w in shares} == {(H3, "browser")}


def test_a_level_over_http3_carries_its_handshakes_to_the_table() -> None:
    cell = Cell("target", 3, http_version=H3, handshake_ms=[2.0, 4.0], data_frames=30, data_reads=20)
    fields = _http3_fields(cell)
    assert fields["connections"] == 2
    assert fields["handshake_ms"].p50 == pytest.approx(2.0)
    assert fields["handshake_ms"].p99 == pytest.approx(4.0)
    row = replace(LoadRow(level=3, target="target"), **fields)
    text = load_table.markdown(LoadResults(provenance=Provenance.now("load"), config={}, levels=(row,)))
    assert "3, 1/conn, handshake 2.0/4.0 ms" in text
    assert "| 1.50 |" in text


def test_a_udp_port_with_nothing_on_it_is_a_connect_error_not_a_stream() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now: ICMP port unreachable
    work = Workload(f"https://127.0.0.1:{port}/v1", "m", "p", 5, 1, 0.0, 1.0, http_version=H3)
    cfg = _probe_config(work)
    loop = new_event_loop("uvloop")
    try:
        result = loop.run_until_complete(one_stream(cfg, "127.0.0.1", port, work))
    finally:
        loop.close()
    assert result.error is not None
    assert "nothing answers on UDP" in result.error or "no QUIC handshake" in result.error
    assert result.h3 is None
    assert result.first_content_t_ns is None


def test_the_window_asked_for_reaches_each_stream_s_quic_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    real = worker._quic_config

    def spy(tls: TLSOptions, url: str, window: str) -> QuicConfiguration:
        asked.append(window)
        return real(tls, url, window)

    monkeypatch.setattr(worker, "_quic_config", spy)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    work = Workload(f"https://127.0.0.1:{port}/v1", "m", "p", 5, 1, 0.0, 1.0, http_version=H3, h3_window="browser")
    loop = new_event_loop("uvloop")
    try:
        loop.run_until_complete(one_stream(_probe_config(work), "127.0.0.1", port, work))
    finally:
        loop.close()
    assert asked == ["browser"]
    config = real(TLSOptions(), work.url, "browser")
    assert (config.max_stream_data, config.max_data) == (6 << 20, 15 << 20)  # Chromium's, as probe --h3-window
