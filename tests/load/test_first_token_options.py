"""`load --heartbeat-ms --reasoning-tokens --first-event-bytes --head-at` (issue 24 §4): the stub is started with
them or a --stub-url stub's are adopted (a flag that disagrees is refused), the integrity check re-renders the
reasoning and the padded first event and skips keep-alives, and the join steps over keep-alive writes and reports
an added first-token figure from StreamLog.first_token."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import BackgroundLoop
from tokenpath.audit import StreamLog, Write
from tokenpath.errors import UsageError
from tokenpath.load.framedelay import frame_delays_ns
from tokenpath.load.integrity import BeforeFirstToken, check_body, expected_frames
from tokenpath.load.lean import LeanRecorder
from tokenpath.load.runner import Cell, LoadConfig, LoadRunner, _level_row, content_write
from tokenpath.load.stubinfo import fetch_pacing, with_stub_pacing
from tokenpath.results.model import MedianAndTail
from tokenpath.stub.config import Pacing, StubConfig
from tokenpath.stub.server import StubServer
from tokenpath.wire.apis import Api

STUB = "http://127.0.0.1:8000"
PACING: dict[str, Any] = {"ttft_ms": 20.0, "interval_ms": 10.0, "tokens": 60, "frame_bytes": None, "format": "openai"}
OPTIONS: dict[str, Any] = {"heartbeat_ms": 50.0, "reasoning_tokens": 4, "first_event_bytes": 2048,
                           "head_at": "first-token"}  # fmt: skip
SID, MODEL, TOKENS = "tp-first", "tokenpath-stub", 6
PING = b": ping\n\n"


def _cfg(**kw: Any) -> LoadConfig:
    """A --stub-url run's config; the Pacing fields among `kw` are its pacing."""
    pacing = Pacing(**{k: kw.pop(k) for k in list(kw) if k in Pacing.OVERRIDABLE})
    return LoadConfig(("direct",), target_url=STUB, stub_url=STUB, client_workers=1, pacing=pacing, **kw)


def test_the_stubs_options_are_read_from_its_health_and_adopted() -> None:
    loop = BackgroundLoop()
    server = StubServer(StubConfig(port=0, tokens=60, ttft_ms=20, interval_ms=10, **OPTIONS))
    loop.run(server.start())
    try:
        pacing = fetch_pacing(server.url)
    finally:
        loop.run(server.close())
        loop.close()
    assert pacing == {**PACING, **OPTIONS}
    cfg = with_stub_pacing(_cfg(), STUB, pacing)
    p = cfg.pacing
    assert (p.heartbeat_ms, p.reasoning_tokens, p.first_event_bytes, p.head_at) == (
        50.0,
        4,
        2048,
        "first-token",
    )
    assert cfg.before_first_token == BeforeFirstToken(4, 2048, True)


@pytest.mark.parametrize(("key", "ours", "theirs"), [
    ("heartbeat_ms", 15000.0, "off"), ("reasoning_tokens", 8, "0"), ("first_event_bytes", 4096, "off"),
    ("head_at", "first-token", "start"),
])  # fmt: skip
def test_a_flag_the_stub_was_not_started_with_is_refused(key: str, ours: Any, theirs: str) -> None:
    # The health lists an option only when it is on: missing is the stub's off (and an older stub's).
    with pytest.raises(UsageError, match=f"`{key}` .* was started with `{key}` {theirs}: drop"):
        with_stub_pacing(_cfg(**{key: ours}, pacing_given=(key,)), STUB, PACING)
    same = with_stub_pacing(_cfg(**{key: ours}, pacing_given=(key,)), STUB, {**PACING, key: ours})
    assert getattr(same.pacing, key) == ours
    with pytest.raises(UsageError, match=f"`{key}` off|`{key}` 0|`{key}` start"):
        with_stub_pacing(_cfg(pacing_given=(key,)), STUB, {**PACING, key: ours})


def test_the_stub_load_starts_gets_the_flags_and_the_stubs_rules_hold_before_it_starts() -> None:
    cfg = _cfg(**OPTIONS)
    assert cfg.pacing.to_argv() == [
        "--heartbeat-ms", "50", "--reasoning-tokens", "4", "--first-event-bytes", "2048", "--head-at", "first-token"
    ]  # fmt: skip
    assert _cfg().pacing.to_argv() == []
    with pytest.raises(UsageError, match=r"bedrock.*keep-alive"):
        _cfg(heartbeat_ms=100.0, api=Api.BEDROCK)
    with pytest.raises(UsageError, match="head_at"):
        _cfg(head_at="later")
    assert _cfg(heartbeat_ms=0.0).pacing.heartbeat_ms is None


def _body(extra: BeforeFirstToken, beats_after: tuple[int, ...] = ()) -> bytes:
    frames = expected_frames(SID, MODEL, TOKENS, extra)
    out = [PING if extra.keepalives else b""]
    for i, frame in enumerate(frames):
        out.append(frame)
        out += [PING] if i in beats_after else []
    return b"".join(out)


def test_integrity_re_renders_reasoning_and_the_first_event_and_skips_keepalives() -> None:
    extra = BeforeFirstToken(reasoning=4, first_event_bytes=2048, keepalives=True)
    body = _body(extra, beats_after=(2, 6))
    got = check_body(body, SID, MODEL, TOKENS, Api.OPENAI, extra)
    assert (got.byte_exact, got.lost, got.out_of_order, got.ok) == (True, 0, 0, True)
    # Each option ignored: the bytes are not what the stub sent.
    for wrong in (BeforeFirstToken(0, 2048, True), BeforeFirstToken(4, None, True), BeforeFirstToken(4, 2048, False)):
        assert check_body(body, SID, MODEL, TOKENS, Api.OPENAI, wrong).byte_exact is False, wrong
    plain = BeforeFirstToken(reasoning=4, first_event_bytes=2048)
    assert check_body(_body(plain), SID, MODEL, TOKENS, Api.OPENAI, plain).byte_exact is True


def _log(n: int, first_content: int, reasoning: tuple[int, ...] = (), beats: tuple[int, ...] = ()) -> StreamLog:
    writes = tuple(Write(i, i * 100, i * 100, 10) for i in range(n))
    return StreamLog("s", 100.0, 0, "complete", writes, first_content, reasoning, beats)


def test_the_join_steps_over_keepalive_writes() -> None:
    log = _log(8, 2, beats=(0, 4))
    assert [content_write(log, t) for t in range(4)] == [2, 3, 5, 6]
    assert content_write(_log(8, 2), 2) == 4
    marks = [t for k in range(8) for t in (k * 100 + 7, (k + 1) * 10)]  # each write arrives 7 ns after it
    assert frame_delays_ns(log, 2, marks) == [7, 7, 7, 7]  # writes 3, 5, 6, 7: not the keep-alive at 4
    assert frame_delays_ns(_log(8, 2), 2, marks) == [7] * 5


def test_first_token_is_joined_on_the_first_reasoning_write() -> None:
    cell = Cell("direct", 1)
    LoadRunner._first_token(cell, _log(8, 5, reasoning=(1, 2, 3, 4)), 100 + 3_000_000)
    assert cell.first_token.get_total_count() == 1
    row = _level_row(cell, MedianAndTail(), _cfg())
    assert row.added_first_token_ms is not None
    assert row.added_first_token_ms.p50 == pytest.approx(3.0, rel=0.01)  # joined to write 1 (at 100 ns)
    LoadRunner._first_token(cell, _log(8, 1), 5_000_000)  # no reasoning: the first token is the content
    assert cell.first_token.get_total_count() == 1
    assert _level_row(Cell("direct", 1), MedianAndTail(), _cfg()).added_first_token_ms is None


def test_the_lean_recorder_times_the_first_reasoning_frame() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    frames = expected_frames(SID, MODEL, TOKENS, BeforeFirstToken(reasoning=2))
    body = PING + b"".join(frames)
    lean = LeanRecorder(SID, 0)
    lean.on_read(1000, head % len(body) + PING + frames[0])  # the role delta
    lean.on_read(2000, frames[1])  # reasoning
    lean.on_read(3000, frames[2])  # reasoning
    lean.on_read(4000, b"".join(frames[3:]))  # content
    trace = lean.result()
    assert (trace.first_token_t_ns, trace.first_content_t_ns) == (2000, 4000)
