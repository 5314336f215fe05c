"""The options of what real servers send around the first token, through an in-process stub on loopback, in every
format: each write the audit logs is the frame the format's reader reads at that place (keep-alives, reasoning and
the first content marked where they are), the first event's size, and the head held until the first token."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import HTTP_APIS, exchange, post
from tests.stub.test_formats import BODIES, PATHS, call
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.kinds import FrameKind
from tokenpath.wire.reader import frame_reader
from tokenpath.wire.request import STREAM_HEADER

StartStub = Callable[..., StubServer]
SSE_APIS = [Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC, Api.GEMINI]


def body(api: Api, **pacing: Any) -> dict[str, Any]:
    return {**BODIES[api], "tokenpath": pacing}


def kinds(api: Api, data: bytes) -> list[FrameKind]:
    reader = frame_reader(api, 1 << 20)
    return [reader.kind(f) for f in [*reader.feed(data), *reader.close()]]


def keepalives(api: Api, data: bytes) -> list[int]:
    """Where the format's own keep-alive is: an SSE comment line, or Anthropic's `ping` event (its keep-alive)."""
    reader = frame_reader(api, 1 << 20)
    frames = [*reader.feed(data), *reader.close()]
    if api is Api.ANTHROPIC:  # the ping the API sends with the head (message_start, content_block_start, ping) aside
        return [i for i, f in enumerate(frames) if getattr(f, "event", None) == b"ping" and i != 2]
    return [i for i, f in enumerate(frames) if reader.kind(f) is FrameKind.COMMENT]


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_every_write_is_the_frame_the_reader_reads_there(start_stub: StartStub, api: Api) -> None:
    """Reasoning and keep-alives (SSE formats) in one stream: the audit marks each where the reader finds it."""
    stub = start_stub(tokens=3, ttft_ms=20, interval_ms=10)
    beat = {"heartbeat_ms": 7} if api in SSE_APIS else {}
    sid = f"ft-{api.value}"
    status, _, data = call(stub.port, api, body(api, reasoning_tokens=2, **beat), sid=sid)
    assert status == 200
    got = kinds(api, data)
    log = stub.audit.get(sid)
    assert log is not None
    assert log.state == "complete"
    assert len(log.nbytes) == len(got)  # one write, one frame
    assert log.first_content is not None
    assert got[log.first_content] is FrameKind.CONTENT
    assert FrameKind.CONTENT not in got[: log.first_content]
    assert len(log.reasoning) == 2
    assert all(got[i] is FrameKind.REASONING for i in log.reasoning)
    assert log.reasoning[-1] < log.first_content
    comments = keepalives(api, data)
    assert list(log.heartbeats) == comments
    if beat:  # 20 + 4 x 10 ms of stream: keep-alives before the first token and between tokens
        assert comments[0] < log.reasoning[0]
        assert any(log.first_content < i for i in comments)
    assert all(a >= s for s, a in zip(log.scheduled_ns, log.actual_ns, strict=True))
    # The reasoning deltas are paced like tokens: the first at the TTFT, one interval apart
    started = log.started_ns
    assert log.scheduled_ns[log.reasoning[0]] - started == 20_000_000
    assert log.scheduled_ns[log.first_content] - started == 40_000_000


@pytest.mark.parametrize("api", [Api.BEDROCK, Api.OLLAMA], ids=lambda a: a.value)
def test_a_keep_alive_asked_of_a_format_without_one_is_its_bad_request(start_stub: StartStub, api: Api) -> None:
    stub = start_stub(tokens=2, ttft_ms=0, interval_ms=1)
    status, _, data = call(stub.port, api, body(api, heartbeat_ms=10))
    assert status == 400
    assert b"no keep-alive" in data


def test_a_request_s_heartbeat_0_is_none(start_stub: StartStub) -> None:
    stub = start_stub(tokens=3, ttft_ms=20, interval_ms=10, heartbeat_ms=5)
    _, _, data = call(stub.port, Api.ANTHROPIC, BODIES[Api.ANTHROPIC])
    assert keepalives(Api.ANTHROPIC, data)  # the flag's keep-alives: Anthropic's ping events
    _, _, data = call(stub.port, Api.ANTHROPIC, body(Api.ANTHROPIC, heartbeat_ms=0))
    assert not keepalives(Api.ANTHROPIC, data)


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_the_first_event_is_as_large_as_asked(start_stub: StartStub, api: Api) -> None:
    stub = start_stub(tokens=3, ttft_ms=0, interval_ms=1)
    sid = f"big-{api.value}"
    status, _, _ = call(stub.port, api, body(api, first_event_bytes=20_000), sid=sid)
    assert status == 200
    log = stub.audit.get(sid)
    assert log is not None
    assert log.first_content is not None
    assert log.nbytes[log.first_content] == 20_000
    assert log.nbytes[log.first_content + 1] < 1000


def first_read(port: int, raw: bytes) -> tuple[float, bytes, bytes]:
    """Seconds from the request to the first bytes; those bytes; and the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.monotonic()  # before the send: the stub cannot start its clock earlier (stamped after, a test
        sock.sendall(raw)  # preempted between the two read 143.7 ms of a 150 ms hold with a core busy)
        first = sock.recv(1 << 20)
        waited = time.monotonic() - t0
        rest = bytearray(first)
        while chunk := sock.recv(1 << 20):
            rest += chunk
    return waited, first, bytes(rest)


HELD_TTFT_MS = 150


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_the_held_head_leaves_with_the_first_token(start_stub: StartStub, api: Api) -> None:
    stub = start_stub(tokens=2, ttft_ms=HELD_TTFT_MS, interval_ms=60)  # the content: far enough behind to be apart
    raw = post(PATHS[api], body(api, head_at="first-token", reasoning_tokens=1), extra=f"{STREAM_HEADER}: held\r\n")
    waited, first, _ = first_read(stub.port, raw)
    assert waited >= (HELD_TTFT_MS - 5) / 1000  # nothing, not even the head, before the first token
    parser = ResponseParser("POST")
    got = kinds(api, parser.feed(first))
    assert parser.head is not None
    assert parser.head.status == 200
    assert FrameKind.REASONING in got  # the head and the first token: one write
    assert FrameKind.CONTENT not in got  # the content is one interval later
    log = stub.audit.get("held")
    assert log is not None
    assert all(s - log.started_ns == HELD_TTFT_MS * 1_000_000 for s in log.scheduled_ns[: log.reasoning[0] + 1])


def test_the_head_leaves_at_once_by_default(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, ttft_ms=HELD_TTFT_MS, interval_ms=5)
    waited, first, whole = first_read(stub.port, post(PATHS[Api.GEMINI], BODIES[Api.GEMINI]))
    assert waited < (HELD_TTFT_MS - 50) / 1000
    assert first.startswith(b"HTTP/1.1 200")
    assert b"data:" not in first  # Gemini has no lead frames: the head alone
    assert json.loads(whole.split(b"data: ", 2)[1].split(b"\r\n\r\n")[0])["candidates"]


def test_the_flags_apply_when_the_request_says_nothing(start_stub: StartStub) -> None:
    stub = start_stub(tokens=2, ttft_ms=10, interval_ms=5, reasoning_tokens=3, first_event_bytes=700)
    status, _, data = call(stub.port, Api.OPENAI, BODIES[Api.OPENAI], sid="flags")
    assert status == 200
    assert kinds(Api.OPENAI, data).count(FrameKind.REASONING) == 3
    log = stub.audit.get("flags")
    assert log is not None
    assert log.first_content is not None
    assert log.nbytes[log.first_content] == 700
    health = json.loads(
        exchange(stub.port, b"GET /_tokenpath/health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").split(
            b"\r\n\r\n"
        )[1]
    )
    assert health["pacing"]["reasoning_tokens"] == 3
    assert health["pacing"]["first_event_bytes"] == 700
    assert "head_at" not in health["pacing"]  # at their defaults they are not listed: health reads as it always has
    assert "heartbeat_ms" not in health["pacing"]
