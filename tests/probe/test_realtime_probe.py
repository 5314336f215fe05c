"""probe --api realtime (WebSocket only: the transport implied, SSE refused by name) against the stub in-process and
a scripted peer: TTFT to the first response.output_text.delta, messages per read, the stub's write join, the end by
response.done (a close before it is a cut)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit

import pytest
from typer.testing import CliRunner

from tests.helpers import CountingJson
from tests.wssession import accept_101, scripted, server_text
from tokenpath.cli import app
from tokenpath.errors import UsageError
from tokenpath.probe import wsstream
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.wsfallback import WsFallback
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.ending import EndKind

StartStub = Callable[..., StubServer]


def _cfg(url: str, **kw: object) -> ProbeConfig:
    return ProbeConfig(url=url, api=Api.REALTIME, transport="websocket", first_byte_timeout_s=5, **kw)  # type: ignore[arg-type]


def test_a_realtime_session_is_measured_to_response_done_and_joins_the_stub_s_writes(start_stub: StartStub) -> None:
    stub = start_stub(tokens=5, interval_ms=20, ttft_ms=40)
    trace = probe_stream(_cfg(f"{stub.url}/v1/realtime?model=gpt-realtime"))
    log = stub.audit.get(trace.stream_id)
    assert log is not None
    metrics = run_metrics(trace, log.snapshot())
    ws = metrics.ws
    assert ws is not None
    assert ws.upgraded
    assert ws.final_event  # response.done
    assert ws.close_code == 1000
    assert trace.end is not None
    assert trace.end.kind is EndKind.COMPLETE
    # session.created and the user item's added / done: messages of the session, none of the response's frames
    assert ws.messages == len(log.actual_ns) + 3
    assert metrics.frames == len(log.actual_ns)
    assert metrics.ttft_ms is not None
    assert metrics.ttft_ms >= 39  # TTFT from the client events to the first response.output_text.delta
    assert metrics.added_ttft_ms is not None  # the first delta joined to the stub's write of it
    assert metrics.gaps_ms["p50"] >= 10  # the tokens 20 ms apart (a wide margin under load)


def test_each_message_is_parsed_once(start_stub: StartStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its type, parsed once (event_type), names its SSE mirror and tells the session's events apart."""
    stub = start_stub(tokens=3, interval_ms=5, ttft_ms=5)
    parses = CountingJson()
    monkeypatch.setattr(wsstream, "json", parses)
    ws = run_metrics(probe_stream(_cfg(f"{stub.url}/v1/realtime?model=gpt-realtime"))).ws
    assert ws is not None
    assert ws.final_event
    assert parses.loads_calls == ws.messages


def test_a_close_before_response_done_is_a_cut() -> None:
    seen: list[bytes] = []

    def cut(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key) + server_text({"type": "session.created", "event_id": "e0", "session": {}}))
        seen.append(conn.recv(65536))  # the two client events, in one write
        delta: dict[str, object] = {"type": "response.output_text.delta", "event_id": "e1", "delta": "a"}
        conn.sendall(server_text(delta) + server_text({**delta, "event_id": "e2"}))
        conn.sendall(bytes([0x88, 2, 0x03, 0xF3]))  # 1011, before response.done

    for url in scripted(cut):
        trace = probe_stream(_cfg(url + "/v1/realtime?model=m"))
    metrics = run_metrics(trace)
    assert metrics.ws is not None
    assert metrics.ws.cut
    assert metrics.ws.close_code == 1011
    assert not metrics.ws.final_event
    assert metrics.ttft_ms is not None  # the deltas came
    assert trace.end is not None
    assert trace.end.kind is not EndKind.COMPLETE
    assert seen  # the client events came before the deltas (masked: the stub's tests read their content)


def test_a_failed_response_done_is_an_error_end_not_complete() -> None:
    def failed(conn: socket.socket, key: str) -> None:
        conn.sendall(accept_101(key))
        conn.recv(65536)
        conn.sendall(server_text({"type": "response.done", "event_id": "e", "response": {"status": "failed"}}))
        conn.recv(64)
        conn.sendall(bytes([0x88, 2, 0x03, 0xE8]))

    for url in scripted(failed):
        trace = probe_stream(_cfg(url + "/v1/realtime?model=m"))
    assert trace.end is not None
    assert trace.end.kind is EndKind.CUT_ERROR
    ws = run_metrics(trace).ws
    assert ws is not None
    assert not ws.final_event


def test_sse_and_a_fallback_to_it_are_refused_by_name() -> None:
    with pytest.raises(UsageError, match="realtime API is WebSocket only"):
        ProbeConfig(url="http://127.0.0.1:9/v1/realtime", api=Api.REALTIME)
    with pytest.raises(UsageError, match="no SSE to fall back to"):
        _cfg("http://127.0.0.1:9/v1/realtime", ws_fallback=WsFallback(2, 10, 1))


def test_the_cli_implies_websocket_for_realtime_and_refuses_sse(start_stub: StartStub) -> None:
    stub = start_stub(tokens=3, interval_ms=5, ttft_ms=0)
    url = f"{stub.url}/v1/realtime?model=m"
    out = CliRunner().invoke(app, ["probe", url, "--api", "realtime", "--json"])
    assert out.exit_code == 0, out.output
    run = json.loads(out.output)["runs"][0]
    assert run["websocket"]["final_event"] is True
    assert run["ttft_ms"] is not None
    refused = CliRunner().invoke(app, ["probe", url, "--api", "realtime", "--transport", "sse"])
    assert refused.exit_code != 0
    assert "WebSocket only" in refused.output


def test_the_probe_s_url_names_the_model_as_the_sdk_does() -> None:
    """The model rides in the query (openai-python's realtime.connect: base_url + /realtime?model=)."""
    from tokenpath.wire.request import endpoint_target

    target = endpoint_target("/v1", Api.REALTIME, "gpt-realtime:2025")
    assert urlsplit(target).path == "/v1/realtime"
    assert dict(parse_qsl(urlsplit(target).query)) == {"model": "gpt-realtime:2025"}
