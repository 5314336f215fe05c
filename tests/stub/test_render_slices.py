"""A long stream's shape is rendered, framed and scheduled in slices (stub/loopshare.py) before its head is written:
the same bytes as the synchronous render, turns for the rest of the loop meanwhile, other streams paced through it,
nothing left behind by a client that leaves or a stub that closes, and a 400 still a 400. Short streams stay on the
synchronous path."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import BackgroundLoop, exchange, post
from tests.stub.test_formats import BODIES, PATHS
from tests.wssession import messages_until
from tokenpath.errors import UsageError
from tokenpath.stub import app as stub_app
from tokenpath.stub import frames
from tokenpath.stub.config import LEAD_FRAMES, MAX_STREAM_BYTES, StubConfig
from tokenpath.stub.formats import FORMATS, base
from tokenpath.stub.formats.base import compact_json
from tokenpath.stub.frames import StreamRequest, StreamShape
from tokenpath.stub.loopshare import LoopShare, Steps, finish, shared
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api

StartStub = Callable[..., StubServer]
MS = 1_000_000
LONG = 3_000  # frames: well past SLICED_FRAMES and STEP_FRAMES, quick to render


@pytest.fixture(autouse=True)
def _no_cached_shapes() -> Iterator[None]:
    """Every test renders its shapes itself (the cache is the process's)."""
    frames._shapes.clear()
    frames._shapes_bytes = 0
    yield
    frames._shapes.clear()
    frames._shapes_bytes = 0


class EveryStep(LoopShare):
    """A LoopShare that gives the loop a turn after every step (slice 0): the turns counted, no clock relied on."""

    made: ClassVar[list[EveryStep]] = []

    def __init__(self, clock: Any = None, slice_ns: int = 0) -> None:
        super().__init__(slice_ns=0)
        EveryStep.made.append(self)


def _kind(api: Api) -> str:
    return "chat" if api is Api.OPENAI else api.value


def _request(api: Api, tokens: int) -> StreamRequest:
    return StreamRequest(_kind(api), "m", "", tokens, prompt_tokens=3, ttft_ms=5.0, interval_ms=2.0)


def _same(a: StreamShape, b: StreamShape) -> None:
    cid = "chatcmpl-" + "q" * 24
    assert a.wire(False, cid) == b.wire(False, cid)
    assert a.wire(True, cid) == b.wire(True, cid)
    assert (a.sizes, a.lead, a.first_content, a.reasoning, a.with_next) == (
        b.sizes,
        b.lead,
        b.first_content,
        b.reasoning,
        b.with_next,
    )


def _pacings() -> list[tuple[Api, dict[str, Any]]]:
    cases: list[tuple[Api, dict[str, Any]]] = []
    for api in FORMATS:
        cases.append((api, {}))
        cases.append((api, {"frame_bytes": 400, "first_event_bytes": 2_000}))
        if api is not Api.REALTIME:
            cases.append((api, {"reasoning_tokens": 700}))
    return cases


@pytest.mark.parametrize(("api", "pacing"), _pacings())
def test_a_shape_built_in_slices_is_the_one_the_synchronous_render_makes(api: Api, pacing: dict[str, Any]) -> None:
    fmt, req = FORMATS[api], _request(api, LONG)
    cfg = StubConfig(tokens=LONG, **pacing).pacing
    now = fmt.shape(req, cfg)
    frames._shapes.clear()
    frames._shapes_bytes = 0
    share = EveryStep()
    sliced = asyncio.run(shared(fmt.shape_steps(req, cfg), share))
    assert sliced is not now  # built afresh, not the cached one
    _same(sliced, now)
    assert share.turns >= 2 * (LONG // frames.STEP_FRAMES)  # a turn every step: of the render, then the framing
    cid = "resp_" + "z" * 24
    wire = asyncio.run(shared(sliced.wire_steps(True, cid), EveryStep()))
    assert wire == now.wire(True, cid)


def test_a_callback_scheduled_during_the_build_runs_before_it_ends() -> None:
    async def main() -> list[str]:
        order: list[str] = []
        fmt, req = FORMATS[Api.BEDROCK], _request(Api.BEDROCK, LONG)
        loop = asyncio.get_running_loop()
        build = loop.create_task(shared(fmt.shape_steps(req, StubConfig(tokens=LONG).pacing), EveryStep()))
        await asyncio.sleep(0)  # the build's first step
        loop.call_soon(order.append, "other")
        await build
        order.append("built")
        return order

    assert asyncio.run(main()) == ["other", "built"]


def _big(api: Api, tokens: int = 100_000, **pacing: Any) -> dict[str, Any]:
    body: dict[str, Any] = {**BODIES[api], "tokenpath": {"tokens": tokens, "ttft_ms": 5, "interval_ms": 20, **pacing}}
    if api is Api.ANTHROPIC:
        body["max_tokens"] = tokens
    return body


def test_a_large_stream_s_build_gives_the_loop_turns_then_streams_as_always(
    start_stub: StartStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    EveryStep.made.clear()
    monkeypatch.setattr(stub_app, "LoopShare", EveryStep)
    stub = start_stub()
    body = _big(Api.ANTHROPIC, LONG, interval_ms=0, ttft_ms=0)
    raw = exchange(stub.port, post(PATHS[Api.ANTHROPIC], body, extra="X-Tokenpath-Stream: long\r\n"), timeout=30)
    assert raw.startswith(b"HTTP/1.1 200")
    assert [s.turns > LONG // frames.STEP_FRAMES for s in EveryStep.made] == [True]
    log = stub.audit.get("long")
    assert log is not None
    assert log.state == "complete"
    assert log.started_ns < log.scheduled_ns[0] + 1  # the schedule starts at the request's arrival, not the build's end
    shape = FORMATS[Api.ANTHROPIC].shape(
        _request(Api.ANTHROPIC, LONG), StubConfig(tokens=LONG, ttft_ms=0, interval_ms=0).pacing
    )
    assert len(log.actual_ns) == len(shape.sizes)
    assert b"".join(shape.wire(False, "msg_" + "x" * 24)).count(b"content_block_delta") == raw.count(
        b"content_block_delta"
    )


def _read_all(sock: socket.socket) -> None:
    while sock.recv(1 << 20):
        pass


def test_a_short_stream_is_paced_through_a_long_stream_s_build(start_stub: StartStub) -> None:
    """Without slices the loop is held for the whole build (~0.7 s for Bedrock's 100,000 frames): no write of the
    short stream could be made while it runs. No bound on drift here: a loaded host adds its own."""
    stub = start_stub()
    short = socket.create_connection(("127.0.0.1", stub.port), timeout=30)
    tokenpath = {"tokens": 200, "ttft_ms": 5, "interval_ms": 5}
    short.sendall(post(PATHS[Api.OPENAI], {**BODIES[Api.OPENAI], "user": "short", "tokenpath": tokenpath}))
    reader = threading.Thread(target=_read_all, args=(short,))
    reader.start()
    time.sleep(0.1)
    with socket.create_connection(("127.0.0.1", stub.port), timeout=30) as big:
        sent = time.monotonic_ns()
        big.sendall(post(PATHS[Api.BEDROCK], _big(Api.BEDROCK)))
        head = big.recv(1 << 16)
        headed = time.monotonic_ns()
    reader.join(30)
    short.close()
    assert head.startswith(b"HTTP/1.1 200")
    log = stub.audit.get("short")
    assert log is not None
    during = [a for a in log.actual_ns if sent + 50 * MS < a < headed - MS]
    assert headed - sent > 200 * MS  # the build took long enough to see writes through it
    assert len(during) >= 5


def _wait(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


class Held(LoopShare):
    """A build whose every turn waits until the test lets it go: it cannot end before the test has acted. (Raced
    instead, the test's thread lost: a build holds the GIL between its turns, and the thread asking the loop whether
    the build had begun got it back only once the build had ended.)"""

    gate: ClassVar[asyncio.Event | None] = None

    async def turn(self) -> None:
        assert Held.gate is not None
        await Held.gate.wait()


@pytest.fixture
def held_builds(bg: BackgroundLoop, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    Held.gate = bg.call(asyncio.Event)
    monkeypatch.setattr(stub_app, "LoopShare", Held)
    yield
    bg.call(Held.gate.set)


def test_a_client_that_leaves_mid_build_leaves_nothing_behind(
    bg: BackgroundLoop, start_stub: StartStub, held_builds: None
) -> None:
    stub = start_stub()
    app = stub.app
    assert app is not None
    with socket.create_connection(("127.0.0.1", stub.port), timeout=30) as sock:
        sock.sendall(post(PATHS[Api.GEMINI], _big(Api.GEMINI), extra="X-Tokenpath-Stream: gone\r\n"))
        assert _wait(lambda: bool(bg.call(lambda: len(app._builds))))
    assert _wait(lambda: not bg.call(lambda: len(app._builds)))  # cancelled while held: the gate never opened
    bg.run(asyncio.sleep(0.05))
    assert bg.call(lambda: (len(app.streams), len(app.pacer))) == (0, 0)
    assert stub.audit.get("gone") is None  # never opened: the stream never started


def test_a_stub_that_closes_mid_build_cancels_it(bg: BackgroundLoop, start_stub: StartStub, held_builds: None) -> None:
    stub = start_stub()
    app = stub.app
    assert app is not None
    with socket.create_connection(("127.0.0.1", stub.port), timeout=30) as sock:
        sock.sendall(post(PATHS[Api.BEDROCK], _big(Api.BEDROCK), extra="X-Tokenpath-Stream: closing\r\n"))
        assert _wait(lambda: bool(bg.call(lambda: len(app._builds))))
        bg.run(stub.close())
        bg.run(asyncio.sleep(0.01))
        assert bg.call(lambda: len(app._builds)) == 0
    assert stub.audit.get("closing") is None


def _late_frame_bytes(api: Api) -> int:
    """A frame size the first tokens' frames fit and a later token's (more digits) does not."""
    fmt = FORMATS[api]
    for size in range(40, 2_000):
        try:
            fmt.shape(_request(api, 300), StubConfig(tokens=300, frame_bytes=size).pacing)
        except UsageError:
            continue
        return size
    raise AssertionError("no frame size fits")


@pytest.mark.parametrize("api", [Api.OLLAMA, Api.GEMINI])
def test_a_frame_size_a_later_frame_cannot_fit_is_still_a_400(start_stub: StartStub, api: Api) -> None:
    size = _late_frame_bytes(api)
    req, pacing = _request(api, 20_000), StubConfig(tokens=20_000, frame_bytes=size).pacing
    next(FORMATS[api].shape_steps(req, pacing))  # the first step fits: the error is met in the slices
    with pytest.raises(UsageError):
        FORMATS[api].shape(req, pacing)
    frames._shapes.clear()
    stub = start_stub()
    body = {**BODIES[api], "tokenpath": {"tokens": 20_000, "frame_bytes": size, "interval_ms": 1}}
    raw = exchange(stub.port, post(PATHS[api], body, extra="X-Tokenpath-Stream: too-small\r\n"), timeout=30)
    assert raw.startswith(b"HTTP/1.1 400")
    assert b"frame_bytes" in raw
    assert stub.audit.get("too-small") is None


def test_short_and_cached_streams_stay_synchronous(start_stub: StartStub, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []
    build = stub_app.StubApp._build

    def counted(self: stub_app.StubApp, *args: Any) -> None:
        built.append(args)
        build(self, *args)

    monkeypatch.setattr(stub_app.StubApp, "_build", counted)
    stub = start_stub()
    small = {**BODIES[Api.OLLAMA], "tokenpath": {"tokens": stub_app.SLICED_FRAMES, "interval_ms": 0, "ttft_ms": 0}}
    assert exchange(stub.port, post(PATHS[Api.OLLAMA], small), timeout=30).startswith(b"HTTP/1.1 200")
    assert built == []  # uncached, but short: no task
    large = _big(Api.OLLAMA, LONG, interval_ms=0, ttft_ms=0)
    for _ in range(2):
        assert exchange(stub.port, post(PATHS[Api.OLLAMA], large), timeout=30).startswith(b"HTTP/1.1 200")
    assert len(built) == 1  # the second found its shape cached


def test_a_long_websocket_response_is_built_in_slices_and_streams_the_same_events(start_stub: StartStub) -> None:
    from tests.stub.test_websocket import LAST, _sse_events, _ws

    stub = start_stub(tokens=LONG, interval_ms=0, ttft_ms=0)
    sse = _sse_events(stub, "sse-long")
    frames._shapes.clear()
    late = {"tokens": 20_000, "interval_ms": 1, "frame_bytes": _late_frame_bytes(Api.RESPONSES)}
    with _ws(stub, "ws-long") as ws:
        ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
        messages = messages_until(ws, *LAST)
        ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi", "tokenpath": late}))
        error = json.loads(ws.recv(timeout=10))
    assert len(messages) == len(sse)
    assert json.loads(messages[-1])["type"] == "response.completed"
    assert error["type"] == "error"
    assert "frame_bytes" in error["error"]["message"]


def test_a_bug_in_a_large_stream_s_build_costs_its_request_not_a_hang(
    start_stub: StartStub, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As the server's handler guard has it for a short stream: logged, and the client's connection ended."""

    failing: list[str] = ["a bug"]

    def broken(self: StreamShape, chunked: bool, cid: str) -> Iterator[None]:
        if failing:  # always: the raise inside a generator, as wire_steps is one
            raise RuntimeError(failing[0])
        yield

    monkeypatch.setattr(StreamShape, "wire_steps", broken)
    stub = start_stub()
    with socket.create_connection(("127.0.0.1", stub.port), timeout=10) as sock:
        sock.sendall(post(PATHS[Api.OLLAMA], _big(Api.OLLAMA, LONG)))
        try:
            got = sock.recv(1 << 16)
        except ConnectionResetError:
            got = b""
    assert got == b""  # no head: the stream never started
    assert "building a large stream failed" in caplog.text
    assert "a bug" in caplog.text


@settings(max_examples=200, deadline=None)
@given(text=st.text(), thought=st.text(min_size=1), step=st.integers(min_value=1, max_value=64))
def test_a_text_put_in_its_slot_is_the_event_encoded_with_it(text: str, thought: str, step: int) -> None:
    """JSON escapes a string character by character: the text's pieces encoded apart are its encoding whole, in
    every place the slot is, beside another text's slot (any character: quotes, controls, surrogates, non-BMP)."""

    def event(t: str, th: str) -> dict[str, Any]:
        return {"type": "x", "text": t, "part": {"text": t, "summary": [th]}, "items": [{"a": t}, th]}

    with_slots = compact_json(event(base.TEXT_SLOT, base.THOUGHT_SLOT))
    steps = base.filled_steps(with_slots, {base.TEXT_SLOT: text, base.THOUGHT_SLOT: thought})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "TEXT_STEP_CHARS", step)
        taken = 0
        while True:
            try:
                next(steps)
                taken += 1
            except StopIteration as done:
                filled = done.value
                break
    assert filled == compact_json(event(text, thought))
    assert taken >= -(-len(text) // step) + -(-len(thought) // step)  # a step per piece, not one for the whole


@pytest.mark.parametrize("api", [Api.RESPONSES, Api.REALTIME])
def test_a_closing_event_s_text_is_put_in_over_several_steps(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The closing events hold the whole text: without the slot each was one encode of it in one step."""
    monkeypatch.setattr(base, "TEXT_STEP_CHARS", 1_000)
    put: list[int] = []  # the steps each closing event's fill took
    real = base.filled_steps

    def counted(encoded: bytes, texts: dict[str, str]) -> Steps[bytes]:
        steps, taken = real(encoded, texts), 0
        while True:
            try:
                next(steps)
            except StopIteration as done:
                put.append(taken)
                return done.value  # type: ignore[no-any-return]
            taken += 1
            yield

    fill_module = sys.modules[FORMATS[api].__module__]
    monkeypatch.setattr(fill_module, "filled_steps", counted)
    req = _request(api, LONG)
    shape = finish(FORMATS[api].shape_steps(req, StubConfig(tokens=LONG).pacing))
    text = base.full_text(LONG)
    assert len(put) >= 3  # every closing event that holds the text
    assert min(put) >= len(text) // 1_000  # each in a step per 1,000 characters, not one encode
    assert all(b"\\u0000" not in f for f in shape.wire(False, "resp_" + "q" * 24))  # no slot left unfilled


class Recorded(LoopShare):
    """Every build's turns, in the order they came, by build; and the slice each build was given."""

    order: ClassVar[list[int]] = []  # the build each turn was of
    slices: ClassVar[list[int]] = []

    def __init__(self, clock: Any = None, slice_ns: int = 0) -> None:
        super().__init__(slice_ns=0)
        Recorded.slices.append(slice_ns)
        self.build = len(Recorded.slices)

    async def turn(self) -> None:
        Recorded.order.append(self.build)
        await super().turn()


def test_large_streams_are_built_one_at_a_time_with_a_turn_every_step(
    start_stub: StartStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built at once, each build ran a slice between two of the loop's polls: a frame due meanwhile waited for all
    of them. One at a time, a turn after every step past BUILD_SLICE_NS (below LoopShare's 1 ms)."""
    Recorded.order.clear()
    Recorded.slices.clear()
    monkeypatch.setattr(stub_app, "LoopShare", Recorded)
    stub = start_stub()
    sockets = []
    for api in (Api.OLLAMA, Api.ANTHROPIC, Api.GEMINI):
        sock = socket.create_connection(("127.0.0.1", stub.port), timeout=30)
        sock.sendall(post(PATHS[api], _big(api, LONG, interval_ms=0, ttft_ms=0)))
        sockets.append(sock)
    for sock in sockets:
        with sock:
            _read_all(sock)
    assert Recorded.slices == [stub_app.BUILD_SLICE_NS] * 3
    runs = [build for i, build in enumerate(Recorded.order) if i == 0 or Recorded.order[i - 1] != build]
    assert runs == [1, 2, 3]  # each build's turns together: never one build's step between another's


@pytest.mark.parametrize("api", [Api.OPENAI, Api.ANTHROPIC])
def test_unpadded_frames_past_the_response_limit_are_a_400_met_as_they_are_rendered(
    start_stub: StartStub, api: Api
) -> None:
    """MAX_STREAM_BYTES was checked only for a padded frame_bytes: a 256-character model name grows each unpadded
    frame, and 100,000 of them (172 MB) were rendered and streamed. The render now stops at the limit."""
    model = "é" * 256  # JSON-escaped: 6 bytes a character in every frame that names the model
    body = {**BODIES[api], "model": model, "tokenpath": {"tokens": 100_000, "ttft_ms": 0, "interval_ms": 0}}
    stub = start_stub()
    raw = exchange(stub.port, post(PATHS[api], body, extra="X-Tokenpath-Stream: too-large\r\n"), timeout=60)
    if api is Api.OPENAI:  # the model in every chunk: past the limit
        assert raw.startswith(b"HTTP/1.1 400"), raw[:200]
        assert f"larger than {MAX_STREAM_BYTES} bytes".encode() in raw
        assert stub.audit.get("too-large") is None
    else:  # Anthropic names it once, in message_start: well within it, streamed
        assert raw.startswith(b"HTTP/1.1 200"), raw[:200]
        assert len(raw) < MAX_STREAM_BYTES


def test_the_bound_is_the_limit_or_what_the_stubs_own_flags_declare() -> None:
    """The operator's padded frames are not capped (`--tokens 20000 --frame-bytes 2048`: 41 MB, as the gateway's
    hostile tests stream); every other response is held to MAX_STREAM_BYTES."""
    assert StubConfig().max_response_bytes == MAX_STREAM_BYTES
    assert StubConfig(tokens=100, frame_bytes=2048).max_response_bytes == MAX_STREAM_BYTES
    big = StubConfig(tokens=20_000, frame_bytes=2048)
    assert big.max_response_bytes == (20_000 + LEAD_FRAMES) * 2048 > MAX_STREAM_BYTES
    req = replace(_request(Api.OPENAI, 20_000), max_bytes=big.max_response_bytes)
    assert sum(FORMATS[Api.OPENAI].shape(req, big.pacing).sizes) <= big.max_response_bytes
    with pytest.raises(UsageError, match=f"larger than {MAX_STREAM_BYTES} bytes"):  # the same frames, unflagged
        FORMATS[Api.OPENAI].shape(_request(Api.OPENAI, 20_000), big.pacing)
