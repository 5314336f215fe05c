"""The stub answering as a real origin does (stub/presets.py, stub/replay.py), in-process on loopback: an HTTP/1.0
request answered chunked, a recorded shape replayed with its sizes exact, its gaps on the stub's pacer, audited."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.helpers import CHAT, exchange, post
from tokenpath.audit import audit_stream
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.stub.replay import RecordedEvent, RecordedWrite, Recording
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.kinds import FrameKind

StartStub = Callable[..., StubServer]


def recording(name: str = "shape", framing: str = "chunked") -> Recording:
    def event(kind: FrameKind, text: str) -> RecordedEvent:
        return RecordedEvent(kind, f"data: {text}\n\n".encode())

    role = event(FrameKind.CONTROL, '{"choices":[{"delta":{"role":"assistant"}}]}')
    tokens = [event(FrameKind.CONTENT, '{"choices":[{"delta":{"content":"' + "x" * n + '"}}]}') for n in (1, 5, 3)]
    end = event(FrameKind.DONE, "[DONE]")
    writes = (
        RecordedWrite(40.0, (role, tokens[0])),  # two events in one write, as a server's one send
        RecordedWrite(70.0, (tokens[1],)),
        RecordedWrite(100.0, (tokens[2], end)),
    )
    headers = (("X-Accel-Buffering", "no"), ("Server", "recorded"))
    return Recording(name, Api.OPENAI, framing, "text/event-stream", headers, 1.0, writes, {})


def saved(tmp_path: Path, rec: Recording) -> str:
    path = tmp_path / f"{rec.name}.json"
    path.write_text(rec.dumps())
    return str(path)


def test_a_replay_writes_the_recorded_sizes_at_the_recorded_times(start_stub: StartStub, tmp_path: Path) -> None:
    rec = recording()
    stub = start_stub(replays=(saved(tmp_path, rec),))
    trace = probe_stream(ProbeConfig(url=stub.url))
    assert trace.head is not None
    assert trace.head.header("x-accel-buffering") == "no"
    assert trace.head.header("server") == "recorded"
    assert [f.frame.raw for f in trace.frames] == [e.data for e in rec.events]  # sizes and bytes exact
    log = stub.audit.get(trace.stream_id)
    assert log is not None
    assert len(log.actual_ns) == len(rec.events)  # every event a frame of the audit
    assert audit_stream(log).writes == len(rec.events)
    # The pacer never writes early; each write at its offset (the events of one write share it). How late depends
    # on the machine's load: only a wide bound here, the stub's drift is certification's to measure.
    assert all(a >= s for s, a in zip(log.scheduled_ns, log.actual_ns, strict=True))
    offsets_ms = [(s - log.scheduled_ns[0]) / 1e6 for s in log.scheduled_ns]
    assert offsets_ms == [0.0, 0.0, 30.0, 60.0, 60.0]


def test_an_http10_request_gets_the_recorded_framing(start_stub: StartStub, tmp_path: Path) -> None:
    chunked = saved(tmp_path, recording("chunked", "chunked"))
    close = saved(tmp_path, recording("close", "close"))
    stub = start_stub(recordings=(chunked, close))
    for name, framed in (("chunked", True), ("close", False)):
        body = {**CHAT, "tokenpath": {"replay": name}}
        head, _, rest = exchange(stub.port, post("/v1/chat/completions", body, version="1.0")).partition(b"\r\n\r\n")
        assert (b"Transfer-Encoding: chunked" in head) is framed, name
        assert rest.endswith(b"0\r\n\r\n" if framed else b"data: [DONE]\n\n")


def test_http10_chunked_is_the_stubs_or_a_requests_choice(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0, format="plain", http10_framing="chunked")
    head, _, body = exchange(stub.port, post("/v1/chat/completions", CHAT, version="1.0")).partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head
    assert body == b"9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n0\r\n\r\n"
    member = {**CHAT, "tokenpath": {"http10_framing": "close", "headers": {"X-Accel-Buffering": "no"}}}
    head, _, body = exchange(stub.port, post("/v1/chat/completions", member, version="1.0")).partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head
    assert b"X-Accel-Buffering: no" in head
    bad = {**CHAT, "tokenpath": {"http10_framing": "gzip"}}
    status = exchange(stub.port, post("/v1/chat/completions", bad)).split(b" ", 2)[1]
    assert status == b"400"


def test_a_replay_the_stub_does_not_have_is_refused(start_stub: StartStub, tmp_path: Path) -> None:
    stub = start_stub(recordings=(saved(tmp_path, recording()),))
    response = exchange(stub.port, post("/v1/chat/completions", {**CHAT, "tokenpath": {"replay": "other"}}))
    head, _, body = response.partition(b"\r\n\r\n")
    assert b" 400 " in head.split(b"\r\n")[0]
    assert "no recording 'other'" in json.loads(body)["error"]["message"]


def test_a_stub_says_what_it_does_besides_pacing_and_answers_as_a_plain_origin_when_asked(
    start_stub: StartStub,
) -> None:
    """diagnose's baseline (diagnose/origin.py): the health names the origin's behaviour; `plain_origin` answers
    close-delimited to HTTP/1.0 without the headers a path acts on (the stub's other headers kept)."""
    own = (("X-Accel-Buffering", "no"), ("Cache-Control", "no-store"), ("X-Mine", "1"))
    stub = start_stub(tokens=2, interval_ms=1, ttft_ms=0, format="plain", http10_framing="chunked", headers=own)
    health = json.loads(exchange(stub.port, b"GET /_tokenpath/health HTTP/1.0\r\n\r\n").partition(b"\r\n\r\n")[2])
    assert health["origin"] == {
        "http10_framing": "chunked",
        "headers": {"X-Accel-Buffering": "no", "Cache-Control": "no-store"},
    }
    plain = {**CHAT, "tokenpath": {"plain_origin": True}}
    head, _, body = exchange(stub.port, post("/v1/chat/completions", plain, version="1.0")).partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head
    assert b"X-Accel-Buffering" not in head
    assert b"no-store" not in head
    assert b"X-Mine: 1" in head
    assert body == b"data: 0\n\ndata: 1\n\n"
    alone = {**CHAT, "tokenpath": {"plain_origin": True, "headers": {"X-Accel-Buffering": "no"}}}
    head = exchange(stub.port, post("/v1/chat/completions", alone, version="1.0")).partition(b"\r\n\r\n")[0]
    assert b"X-Accel-Buffering: no" in head
    assert b"no-store" not in head
    assert b"Transfer-Encoding" not in head
    chunked = {**CHAT, "tokenpath": {"plain_origin": True, "http10_framing": "chunked"}}
    head = exchange(stub.port, post("/v1/chat/completions", chunked, version="1.0")).partition(b"\r\n\r\n")[0]
    assert b"Transfer-Encoding: chunked" in head
    assert b"X-Accel-Buffering" not in head
    as_itself = exchange(stub.port, post("/v1/chat/completions", CHAT, version="1.0")).partition(b"\r\n\r\n")[0]
    assert b"X-Accel-Buffering: no" in as_itself
    assert b"Transfer-Encoding: chunked" in as_itself
    bad = {**CHAT, "tokenpath": {"plain_origin": "yes"}}
    assert exchange(stub.port, post("/v1/chat/completions", bad)).split(b" ", 2)[1] == b"400"
