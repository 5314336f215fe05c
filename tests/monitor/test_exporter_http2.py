"""The exporter over HTTP/2 (a module with http_version = "2"): probe_http_status_code comes from the h2 answer's
head, read beside the probe's connection, on a real socket against an in-process h2c server."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Iterator

import h2.config
import h2.connection
import h2.events
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import accept_each
from tokenpath.monitor import exporter as ex
from tokenpath.monitor.allowlist import AllowList
from tokenpath.monitor.modules import ModuleSpec, build
from tokenpath.monitor.probing import Aborter, probe_route
from tokenpath.probe.client import ProbeConfig

SSE = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'


def h2_answer(status: bytes, content_type: bytes, body: bytes) -> Callable[[socket.socket], None]:
    """An h2c server (prior knowledge) answering every stream with this status and body."""

    def handle(conn: socket.socket) -> None:
        server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        server.initiate_connection()
        conn.settimeout(10)
        with conn:
            conn.sendall(server.data_to_send())
            for _ in range(100):  # bounded: the probe's request takes a read or two
                data = conn.recv(65536)
                if not data:
                    return
                for event in server.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        assert event.stream_id is not None
                        head = [(b":status", status), (b"content-type", content_type)]
                        server.send_headers(event.stream_id, head)
                        server.send_data(event.stream_id, body, end_stream=True)
                conn.sendall(server.data_to_send())

    return handle


@pytest.fixture
def h2_target() -> Iterator[Callable[[bytes, bytes, bytes], str]]:
    listeners: list[socket.socket] = []

    def serve(status: bytes, content_type: bytes, body: bytes) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        accept_each(listener, h2_answer(status, content_type, body))
        return f"http://127.0.0.1:{listener.getsockname()[1]}/v1"

    yield serve
    for listener in listeners:
        listener.close()


def probed(target: str) -> dict[str, float]:
    modules = {"h2": build("h2", ModuleSpec(http_version="2"), {})}
    config = ex.ExporterConfig(modules, AllowList.parse(["http://127.0.0.1:*"]))
    answer = ex.ProbeExporter(config, ex.sniffing_prober(Aborter())).handle("GET", "/probe", f"target={target}", "5")
    assert answer.status == 200, answer.body
    return {
        s.name: s.value
        for family in text_string_to_metric_families(answer.body.decode())
        for s in family.samples
        if not s.labels
    }


@pytest.mark.parametrize("status", [b"503", b"429"])
def test_a_failed_h2_probe_reports_the_status_the_server_sent(
    h2_target: Callable[[bytes, bytes, bytes], str], status: bytes
) -> None:
    values = probed(h2_target(status, b"application/json", b'{"error":"busy"}'))
    assert values["probe_success"] == 0
    assert values["probe_http_status_code"] == int(status)


def test_a_streamed_h2_probe_reports_200(h2_target: Callable[[bytes, bytes, bytes], str]) -> None:
    values = probed(h2_target(b"200", b"text/event-stream", SSE))
    assert values["probe_success"] == 1
    assert values["probe_http_status_code"] == 200


def test_the_probe_log_lines_say_which_http_version_was_spoken(
    h2_target: Callable[[bytes, bytes, bytes], str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tokenpath.monitor")
    probed(h2_target(b"200", b"text/event-stream", SSE))
    probed(h2_target(b"503", b"application/json", b"{}"))  # a failed probe has no trace: what it asked for
    records = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert [(r["outcome"], r["http_version"]) for r in records] == [("ok", "2"), ("http_status", "2")]
    outcome = probe_route("t", "via", ProbeConfig(url="http://127.0.0.1:1/v1"), lambda cfg, sid: 1 / 0)  # type: ignore[arg-type,return-value]
    assert outcome.http_version == "1.1"
