"""A silence mid-stream (`pause_ms` after content token `pause_after`): part of the schedule, so every later frame is
that much later, the keep-alives go on through it, and a stub that pauses as told passes its audit; in every API
format, asked per request (the body's `tokenpath` member) or by the stub's flags."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import HTTP_APIS
from tests.stub.test_first_token_frames import MS, plan_shape
from tests.stub.test_first_token_server import SSE_APIS, body, kinds
from tests.stub.test_formats import BODIES, call
from tokenpath.audit import audit_stream
from tokenpath.errors import BadRequest, UsageError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.stub.config import MAX_TOKENS, Pacing, StubConfig
from tokenpath.stub.plan import plan_writes
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api
from tokenpath.wire.kinds import FrameKind

StartStub = Callable[..., StubServer]
PAUSE_MS = 120
INTERVAL_MS = 40


def test_the_pause_moves_every_frame_after_its_token() -> None:
    s = plan_shape()  # lead, reasoning, content 1, content 2, end
    offsets = [0, 10 * MS, 15 * MS, 20 * MS, 25 * MS]
    plan = plan_writes(s, s.wire(False, ""), offsets, pause_ms=30)
    assert plan.offsets == [0, 10 * MS, 15 * MS, 50 * MS, 55 * MS]  # after content token 1, everything 30 ms later
    assert plan.wire == s.wire(False, "")  # the same bytes: a pause is only time
    after_two = plan_writes(s, s.wire(False, ""), offsets, pause_ms=30, pause_after=2)
    assert after_two.offsets == [0, 10 * MS, 15 * MS, 20 * MS, 55 * MS]
    past_the_end = plan_writes(s, s.wire(False, ""), offsets, pause_ms=30, pause_after=MAX_TOKENS)
    assert past_the_end.offsets == after_two.offsets  # after the last token: before the stream's final events


def test_keep_alives_go_on_through_the_pause() -> None:
    s = plan_shape()
    offsets = [0, 10 * MS, 15 * MS, 20 * MS, 25 * MS]
    plan = plan_writes(s, s.wire(False, ""), offsets, heartbeat=(b"P", 1), heartbeat_ms=10, pause_ms=30)
    assert plan.wire == [b"L", b"R", b"P", b"C0", b"P", b"P", b"P", b"C1", b"P", b"E"]
    assert plan.offsets == [0, 10 * MS, 10 * MS, 15 * MS, 20 * MS, 30 * MS, 40 * MS, 50 * MS, 50 * MS, 55 * MS]
    assert plan.first_content == 3


def test_the_pause_is_part_of_the_stream_s_time() -> None:
    pacing = Pacing(ttft_ms=10, interval_ms=5, tokens=4, pause_ms=PAUSE_MS)
    assert pacing.planned
    assert not Pacing(ttft_ms=10, interval_ms=5, tokens=4).planned  # the hot path, as it was
    assert pacing.stream_ms == 10 + 4 * 5 + PAUSE_MS
    with pytest.raises(UsageError, match="pause_ms"):
        Pacing(pause_ms=4_000_000).check_bounds("")  # past the longest stream


@pytest.mark.parametrize("api", HTTP_APIS, ids=lambda a: a.value)
def test_a_stub_that_pauses_as_told_passes_its_audit(start_stub: StartStub, api: Api) -> None:
    stub = start_stub(tokens=4, ttft_ms=10, interval_ms=INTERVAL_MS)  # the audit's tolerance: 20 % of it
    sid = f"pause-{api.value}"
    status, _, data = call(stub.port, api, body(api, pause_ms=PAUSE_MS, pause_after=2), sid=sid)
    assert status == 200
    _, _, plain = call(stub.port, api, BODIES[api])
    assert kinds(api, data) == kinds(api, plain)  # the same frames: a pause is only time
    log = stub.audit.get(sid)
    assert log is not None
    assert log.state == "complete"
    # Each write is held to its paused deadline: were the pause outside the schedule, the write after it would be a
    # whole pause late. How many writes a loaded host delays past the audit's tolerance (8 ms here) is the host's:
    # three and five of ten were seen with the CPUs busy, each write its own stall, 40 ms and more apart (what the
    # exclusion rule is for). So a bound on the drift with half a pause of margin, not a count of late writes.
    verdict = audit_stream(log)
    assert verdict.drift_max_ms < PAUSE_MS / 2, verdict
    second = log.first_content + 1 if log.first_content is not None else 0
    scheduled = [s - log.started_ns for s in log.scheduled_ns]
    assert scheduled[second + 1] - scheduled[second] == (INTERVAL_MS + PAUSE_MS) * MS  # token 3: the pause late
    assert scheduled[second] - scheduled[second - 1] == INTERVAL_MS * MS
    assert log.actual_ns[second + 1] - log.actual_ns[second] >= PAUSE_MS * MS


@pytest.mark.parametrize("api", SSE_APIS, ids=lambda a: a.value)
def test_keep_alives_fill_the_silence(start_stub: StartStub, api: Api) -> None:
    stub = start_stub(tokens=3, ttft_ms=10, interval_ms=INTERVAL_MS)
    sid = f"beat-{api.value}"
    status, _, data = call(stub.port, api, body(api, pause_ms=PAUSE_MS, heartbeat_ms=25), sid=sid)
    assert status == 200
    log = stub.audit.get(sid)
    assert log is not None
    assert audit_stream(log).drift_max_ms < PAUSE_MS / 2
    assert log.first_content is not None
    got = kinds(api, data)
    after_first = got[log.first_content + 1 :]
    silence = after_first[: after_first.index(FrameKind.CONTENT)]
    beat = FrameKind.CONTROL if api is Api.ANTHROPIC else FrameKind.COMMENT  # Anthropic's is its `ping` event
    assert silence.count(beat) >= PAUSE_MS // 25 - 1  # a keep-alive every 25 ms through the pause
    assert (b"\n: ping" in data) is (api is not Api.ANTHROPIC)  # never an SSE comment in Anthropic's stream


def test_the_flags_pause_every_stream_and_a_request_can_say_otherwise(start_stub: StartStub) -> None:
    stub = start_stub(tokens=3, ttft_ms=10, interval_ms=10, pause_ms=PAUSE_MS, pause_after=1)
    call(stub.port, Api.OPENAI, BODIES[Api.OPENAI], sid="flag")
    call(stub.port, Api.OPENAI, body(Api.OPENAI, pause_ms=0), sid="none")
    paused, plain = stub.audit.get("flag"), stub.audit.get("none")
    assert paused is not None
    assert plain is not None
    assert [s - paused.started_ns for s in paused.scheduled_ns[:2]] == [
        s - plain.started_ns for s in plain.scheduled_ns[:2]
    ]
    assert [s - paused.started_ns for s in paused.scheduled_ns[2:]] == [
        s - plain.started_ns + PAUSE_MS * MS for s in plain.scheduled_ns[2:]
    ]  # from the second content token on, every write the pause later


def test_the_probe_sees_the_silence(start_stub: StartStub) -> None:
    """The pause is a silence in what the probe reads: the token after it arrives no sooner than its schedule (the
    first token's 10 ms, one 10 ms interval, the pause; a write is never early), and the longest gap between arrivals
    holds most of the pause. Not all of it: the write before the pause can be late on a loaded host while the one
    after it is on time (CI saw a 116 ms gap for a 120 ms pause, the write before it 14 ms late)."""
    stub = start_stub(tokens=4, ttft_ms=10, interval_ms=10)
    member: dict[str, Any] = {"pause_ms": PAUSE_MS, "pause_after": 1}
    cfg = ProbeConfig(url=f"http://127.0.0.1:{stub.port}", extra_body=(("tokenpath", member),))
    trace = probe_stream(cfg)
    metrics = run_metrics(trace)
    assert metrics.ttft_ms is not None
    assert trace.first_content is not None
    after_the_pause = trace.frames[trace.first_content + 1]
    assert after_the_pause.t_ns - trace.t_sent_ns >= (10 + 10 + PAUSE_MS) * MS
    assert max(metrics.gaps_ms.values()) >= PAUSE_MS / 2


def test_a_request_s_pause_is_checked_as_the_flags_are() -> None:
    base = StubConfig().pacing
    got = base.override({"pause_ms": 500, "pause_after": 3})
    assert (got.pause_ms, got.pause_after) == (500, 3)
    for bad in ({"pause_ms": -1}, {"pause_after": 0}, {"pause_after": 1.5}, {"pause_ms": "5"}, {"pause_ms": 4e9}):
        with pytest.raises(BadRequest, match="tokenpath"):
            base.override(bad)
    with pytest.raises(UsageError, match="pause_after"):
        StubConfig(pause_after=0)
    assert "pause_ms" not in base.to_json(with_frame=True)  # the health lists it only when it is on
    assert StubConfig(pause_ms=5.0).pacing.to_json(with_frame=True)["pause_ms"] == 5.0
