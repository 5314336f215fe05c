"""The gateway's keep-alives without a network (issue 36 §6): the machine's timer (due after the interval's silence,
re-armed lazily from the last read, never while the client is not reading, never for a format that has none), the
relay's rule (the format's own bytes, between whole frames only, at every split), and the two together driving a
real Downstream: a frame split across reads with a silence between gets no keep-alive in its middle."""

from __future__ import annotations

import dataclasses
import random

import pytest
from prometheus_client import CollectorRegistry

from tests.gateway.test_exchange_state import step, stream_to_head
from tests.gateway.test_pools import FakeClock
from tests.gateway.test_relay import CONTENT, OPENAI, ROLE
from tests.gateway.test_stream_formats import BEDROCK_STREAM, OLLAMA_LINES
from tests.wire.battery import splits
from tokenpath.gateway.config import HealthConfig, Limits, Member, PoolConfig
from tokenpath.gateway.downstream import Downstream
from tokenpath.gateway.exchange_state import (
    Action,
    Arm,
    Commit,
    End,
    ExchangeMachine,
    KeepAlive,
    Phase,
    Timer,
)
from tokenpath.gateway.failures import Failure, Outcome
from tokenpath.gateway.metrics import Metrics
from tokenpath.gateway.pools import Pool
from tokenpath.gateway.relay import Relay, RelayFailure
from tokenpath.gateway.streamformat import FORMATS, for_response
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.client import ResponseHead, ResponseParser
from tokenpath.wire.framing import Framing, chunk
from tokenpath.wire.server import Request
from tokenpath.wire.sse import Frame, SSEParser

EVERY = 15.0
LIMITS = Limits(idle_timeout_s=300, total_timeout_s=900, keepalive_interval_s=EVERY)
ANTHROPIC_EVENTS = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","content":[]}}',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"hi"}}',
    b'event: message_stop\ndata: {"type":"message_stop"}',
]
SSE_STREAMS = {
    Api.OPENAI: b"".join(line + b"\n\n" for line in OPENAI if line != b": keep-alive"),
    Api.RESPONSES: b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"hi"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed"}\n\n',
    Api.ANTHROPIC: b"".join(event + b"\n\n" for event in ANTHROPIC_EVENTS),
}


def make(limits: Limits = LIMITS) -> tuple[ExchangeMachine, Pool, FakeClock]:
    clock = FakeClock()
    pool = Pool(PoolConfig("p", (Member("http://127.0.0.1:9000"),)), HealthConfig(), clock=clock)
    return ExchangeMachine(pool, limits, clock), pool, clock


def streaming(limits: Limits = LIMITS, keeps_alive: bool = True) -> tuple[ExchangeMachine, FakeClock]:
    machine, pool, clock = make(limits)
    stream_to_head(machine, pool)
    step(pool, machine.head(200))
    machine.keeps_alive = keeps_alive  # as Downstream.forward_head sets it when it forwards the head
    return machine, clock


# the machine's timer ----------------------------------------------------------------------------------------
def test_the_head_arms_the_keepalive_timer_unless_its_interval_is_zero() -> None:
    machine, pool, clock = make()
    stream_to_head(machine, pool)
    actions = step(pool, machine.head(200))
    assert Arm(Timer.KEEPALIVE, clock.now + EVERY) in actions
    machine, pool, clock = make(dataclasses.replace(LIMITS, keepalive_interval_s=0))
    stream_to_head(machine, pool)
    assert [a for a in step(pool, machine.head(200)) if isinstance(a, Arm)] == [Arm(Timer.IDLE, clock.now + 300)]


def test_a_silent_upstream_gets_one_keepalive_per_interval() -> None:
    machine, clock = streaming()
    for _ in range(5):
        clock.now += EVERY
        assert machine.timer(Timer.KEEPALIVE) == [KeepAlive(), Arm(Timer.KEEPALIVE, clock.now + EVERY)]
    assert machine.phase is Phase.STREAMING


def test_reads_push_the_keepalive_back_without_a_call_of_their_own() -> None:
    """A read is the one assignment it always was; the timer, when it fires, re-arms from the last read."""
    machine, clock = streaming()
    clock.now += 10
    machine.read()  # a token, 10 s into the interval
    clock.now += 5  # the timer armed at the head fires: 5 s of silence, not 15
    assert machine.timer(Timer.KEEPALIVE) == [Arm(Timer.KEEPALIVE, clock.now + 10)]
    clock.now += 10
    assert machine.timer(Timer.KEEPALIVE) == [KeepAlive(), Arm(Timer.KEEPALIVE, clock.now + EVERY)]
    clock.now += 3
    machine.read()
    clock.now += 12  # 15 s since the keep-alive, 12 since the read: the read counts
    assert machine.timer(Timer.KEEPALIVE) == [Arm(Timer.KEEPALIVE, clock.now + 3)]


def test_no_keepalive_while_the_client_is_not_reading_and_the_silence_restarts_when_it_reads_again() -> None:
    machine, clock = streaming()
    machine.client_paused()
    clock.now += EVERY
    assert machine.timer(Timer.KEEPALIVE) == [Arm(Timer.KEEPALIVE, clock.now + EVERY)]  # no KeepAlive
    machine.client_resumed()
    clock.now += EVERY - 1
    assert machine.timer(Timer.KEEPALIVE) == [Arm(Timer.KEEPALIVE, clock.now + 1)]
    clock.now += 1
    assert machine.timer(Timer.KEEPALIVE)[0] == KeepAlive()


def test_a_format_without_keepalives_lets_the_timer_go_after_its_first_firing() -> None:
    machine, clock = streaming(keeps_alive=False)
    clock.now += EVERY
    assert machine.timer(Timer.KEEPALIVE) == []  # not re-armed: one wasted wake-up per stream, no more


def test_after_the_end_a_keepalive_timer_is_late_and_ignored() -> None:
    for end in ("upstream_ended", "client_gone", "total"):
        machine, pool, clock = make()
        stream_to_head(machine, pool)
        step(pool, machine.head(200))
        machine.keeps_alive = True
        step(pool, machine.timer(Timer.TOTAL) if end == "total" else getattr(machine, end)())
        assert machine.phase is Phase.DONE
        clock.now += EVERY
        assert machine.timer(Timer.KEEPALIVE) == [], end


def test_keepalives_never_push_back_the_idle_timeout_of_a_silent_upstream() -> None:
    """A keep-alive is ours, not the member's: a member silent for idle_timeout_s is ended as idle however many
    keep-alives filled its silence (a hung member must not hold a stream until the total timeout)."""
    machine, pool, clock = make(dataclasses.replace(LIMITS, idle_timeout_s=100))
    stream_to_head(machine, pool)
    step(pool, machine.head(200))
    machine.keeps_alive = True
    keepalives = 0
    while clock.now + EVERY < 1000 + 100:  # the fake clock starts at 1000
        clock.now += EVERY
        keepalives += machine.timer(Timer.KEEPALIVE).count(KeepAlive())
    assert keepalives == 6
    clock.now = 1000 + 100
    (end,) = [a for a in step(pool, machine.timer(Timer.IDLE)) if isinstance(a, End)]
    assert end.outcome is Outcome.IDLE_TIMEOUT
    assert machine.phase is Phase.DONE


def test_an_upstream_silent_for_the_whole_total_timeout_gets_keepalives_then_the_error_frame() -> None:
    limits = dataclasses.replace(LIMITS, idle_timeout_s=1000, total_timeout_s=100)
    machine, pool, clock = make(limits)
    stream_to_head(machine, pool)
    step(pool, machine.head(200))
    machine.keeps_alive = True
    keepalives = 0
    while clock.now + EVERY < 1000 + 100:  # the fake clock starts at 1000
        clock.now += EVERY
        keepalives += machine.timer(Timer.KEEPALIVE).count(KeepAlive())
    assert keepalives == 6
    actions = step(pool, machine.timer(Timer.TOTAL))
    assert [type(a).__name__ for a in actions] == ["Abort", "End"]
    assert machine.timer(Timer.KEEPALIVE) == []


@pytest.mark.parametrize("silent", [False, True], ids=["streaming", "silent"])
def test_what_a_stream_costs_is_one_firing_per_interval_and_one_write_per_silent_interval(silent: bool) -> None:
    """The cost the hot path does not pay: a stream that streams (a read every 50 ms for 10 minutes) wakes its
    keep-alive timer once per interval and writes nothing; a silent one wakes once per interval and writes once.
    The loop is driven as the shell drives it: a firing at the armed time, reads in between."""
    machine, clock = streaming()
    start, end = clock.now, clock.now + 600
    due = start + EVERY
    firings = writes = 0
    while due <= end:
        if not silent:
            while clock.now + 0.05 < due:
                clock.now += 0.05
                machine.read()
        clock.now = due
        actions = machine.timer(Timer.KEEPALIVE)
        firings += 1
        writes += actions.count(KeepAlive())
        (arm,) = [a for a in actions if isinstance(a, Arm)]
        assert arm.at > clock.now  # never re-armed in the past: no busy loop
        due = arm.at
    assert firings == 600 // EVERY
    assert writes == (firings if silent else 0)


# the relay's rule: the format's bytes, between whole frames only ---------------------------------------------
def test_each_format_has_its_own_keepalive_or_none() -> None:
    expected = {
        Api.OPENAI: b": keep-alive\n\n",
        Api.RESPONSES: b": keep-alive\n\n",
        Api.REALTIME: None,  # WebSocket only: kept alive by pings
        Api.ANTHROPIC: b'event: ping\ndata: {"type": "ping"}\n\n',
        Api.GEMINI: None,
        Api.BEDROCK: None,
        Api.OLLAMA: None,
    }
    assert set(expected) == set(SPECS)  # every format's decision checked here
    assert {api: FORMATS[api].keepalive for api in SPECS} == expected
    for api, beat in expected.items():
        stream = FORMATS[api]
        relay = Relay(stream, chunked=True)
        assert relay.keepalive() == (chunk(beat) if beat else b""), api  # before any body byte, after the head
        assert Relay(stream, chunked=False).keepalive() == (beat or b""), api


@pytest.mark.parametrize("api", [Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC])
def test_a_keepalive_is_its_formats_skipped_frame_and_never_content(api: Api) -> None:
    """Read back by the format's own reader: one whole frame, not content (TTFT and first-token figures never see
    it), not the final event; Anthropic's parses as the `ping` event its SDK skips."""
    from tokenpath.wire.kinds import FrameKind
    from tokenpath.wire.reader import FrameReader

    beat = SPECS[api].keepalive
    assert beat is not None
    reader = FrameReader(api)
    (frame,) = reader.feed(beat)
    assert reader.pending_bytes() == 0
    assert reader.kind(frame) is not FrameKind.CONTENT
    assert not reader.ends(frame)
    (sse,) = SSEParser().feed(beat)
    assert (sse.event, sse.data) == ((b"ping", b'{"type": "ping"}') if api is Api.ANTHROPIC else (None, None))


def test_no_keepalive_for_a_body_that_is_no_token_stream_or_after_a_failure() -> None:
    assert Relay(None, chunked=True).keepalive() == b""  # JSON, an encoded stream: bytes we may not add to
    relay = Relay(FORMATS[Api.OPENAI], chunked=False)
    relay.feed(b"data: " + b"x" * (9 << 20))  # a frame past what the relay holds: the stream is ending
    assert isinstance(relay.failure, RelayFailure)
    assert relay.keepalive() == b""


def client_frames(api: Api, wire: bytes) -> tuple[list[Frame], int]:
    """The frames a client parses out of what it was sent, keep-alives apart: (the others, how many keep-alives)."""
    frames = SSEParser().feed(wire)
    beat = SSEParser().feed(SPECS[api].keepalive or b"")[0]
    others = [f for f in frames if (f.event, f.data, f.comments) != (beat.event, beat.data, beat.comments)]
    return others, len(frames) - len(others)


def fields(frames: list[Frame]) -> list[tuple[bytes | None, bytes | None, list[bytes]]]:
    return [(f.event, f.data, f.comments) for f in frames]


@pytest.mark.parametrize("api", [Api.OPENAI, Api.RESPONSES, Api.ANTHROPIC])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_at_every_split_a_keepalive_goes_only_between_whole_frames(api: Api, eol: bytes) -> None:
    """A silence after each read of every split: a keep-alive is asked for there. It goes out exactly when the reads
    so far ended on a frame boundary, and the client parses every upstream frame whole and unchanged, the
    keep-alives as frames of their own."""
    raw = SSE_STREAMS[api].replace(b"\n", eol)
    expected = fields(SSEParser().feed(raw))
    for pieces in splits(raw):
        relay = Relay(FORMATS[api], chunked=False)
        upstream = SSEParser()
        wire, asked = b"", 0
        for piece in pieces:
            wire += relay.feed(piece)
            upstream.feed(piece)
            beat = relay.keepalive()
            boundary = upstream.pending_bytes() == 0
            assert bool(beat) == boundary, (pieces, piece)
            wire += beat
            asked += bool(beat)
        frames, beats = client_frames(api, wire)
        assert fields(frames) == expected, pieces
        assert beats == asked


def test_no_keepalive_ever_for_bedrock_and_ollama_at_any_split() -> None:
    ndjson = b"\n".join(OLLAMA_LINES) + b"\n"
    for api, raw in ((Api.BEDROCK, BEDROCK_STREAM), (Api.OLLAMA, ndjson)):
        for pieces in splits(raw):
            relay = Relay(FORMATS[api], chunked=True)
            for piece in pieces:
                relay.feed(piece)
                assert relay.keepalive() == b"", (api, pieces)


# the machine and a real Downstream together ------------------------------------------------------------------
class FakeResponse:
    """The client's side of serve.http.Response that Downstream uses: a chunked HTTP/1.1 response whose bytes
    are kept."""

    def __init__(self) -> None:
        self.request = Request("POST", "/v1/chat/completions", "/v1/chat/completions", "", "1.1", True)
        self.framing: Framing | None = None
        self.wire = b""
        self.client_gone = False

    def start(self, status: int, headers: list[tuple[str, str]], length: int | None) -> bytes:
        self.framing = Framing.CHUNKED
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers)
        return f"HTTP/1.1 {status} OK\r\n{lines}Transfer-Encoding: chunked\r\n\r\n".encode()

    def write(self, data: bytes, last: bool = False) -> None:
        self.wire += data

    def release_admission(self) -> None:
        pass


class Control:
    def upstream_head(self, head: ResponseHead) -> None: ...
    def upstream_complete(self) -> None: ...
    def upstream_lost(self, failure: Failure) -> None: ...
    def relay_failed(self, failure: RelayFailure) -> None: ...


class Shell:
    """The exchange's part, as exchange.Exchange does it: the machine's head decision performed (Commit forwards
    the head), timers fired at their armed time, KeepAlive handed to the Downstream."""

    def __init__(self, api: Api, content_type: str, *headers: tuple[str, str]) -> None:
        self.api = api
        self.machine, pool, self.clock = make()
        self.response = FakeResponse()
        self.registry = CollectorRegistry()
        self.down = Downstream(Control(), self.response, api, Metrics(self.registry), self.clock)  # type: ignore[arg-type]
        self.down.machine = self.machine
        stream_to_head(self.machine, pool)
        head = ResponseHead(200, "1.1", (("Content-Type", content_type), *headers), Framing.CHUNKED, True)
        self.timer_at = 0.0
        self.perform(step(pool, self.machine.head(200)), head)
        self.down.upstream_read_done()  # the read that brought the head: it goes out now

    def perform(self, actions: list[Action], head: ResponseHead | None = None) -> None:
        for action in actions:
            if isinstance(action, Commit):
                assert head is not None
                self.down.forward_head(head, "X-Request-Id", "r1")
            elif isinstance(action, KeepAlive):
                self.down.keep_alive()
            elif isinstance(action, Arm) and action.timer is Timer.KEEPALIVE:
                self.timer_at = action.at

    def read(self, data: bytes) -> None:
        self.down.upstream_body(data)
        self.down.upstream_read_done()

    def silence(self, seconds: float) -> None:
        """`seconds` without an upstream read: the keep-alive timer fires each time it is due."""
        end = self.clock.now + seconds
        while self.timer_at and self.timer_at <= end:
            self.clock.now = self.timer_at
            self.timer_at = 0.0
            self.perform(self.machine.timer(Timer.KEEPALIVE))
        self.clock.now = end

    def body(self) -> bytes:
        parser = ResponseParser()
        return parser.feed(self.response.wire)

    def keepalives_counted(self) -> float | None:
        labels = {"pool": "p", "format": self.api.value}
        return self.registry.get_sample_value("tokenpath_gateway_keepalives_total", labels)


def test_a_frame_split_across_reads_with_a_silence_between_gets_no_keepalive_in_its_middle() -> None:
    shell = Shell(Api.OPENAI, "text/event-stream")
    assert shell.machine.keeps_alive
    shell.silence(EVERY)  # after the head, before the first body byte: a keep-alive
    shell.read(ROLE + b"\n\n" + CONTENT[:20])  # a whole frame, then half of one
    shell.silence(3 * EVERY)  # the upstream stops inside the frame: nothing may go out
    assert shell.body() == b": keep-alive\n\n" + ROLE + b"\n\n"
    shell.read(CONTENT[20:] + b"\n\n")
    shell.silence(EVERY)
    body = shell.body()
    assert body == b": keep-alive\n\n" + ROLE + b"\n\n" + CONTENT + b"\n\n" + b": keep-alive\n\n"
    assert shell.keepalives_counted() == 2
    assert shell.down.relay is not None
    assert shell.down.relay.frames == 2  # keep-alives are not relayed frames
    assert shell.down.relay.last_out == CONTENT + b"\n\n"  # what an error frame or the final-event check follows


def test_anthropic_gets_ping_events_and_the_chunked_framing_is_kept() -> None:
    shell = Shell(Api.ANTHROPIC, "text/event-stream")
    shell.read(ANTHROPIC_EVENTS[0] + b"\n\n")
    shell.silence(2 * EVERY + 1)
    frames, beats = client_frames(Api.ANTHROPIC, shell.body())
    assert beats == 2
    assert [f.event for f in frames] == [b"message_start"]
    assert shell.keepalives_counted() == 2


@pytest.mark.parametrize(
    ("api", "content_type"),
    [
        (Api.GEMINI, "text/event-stream"),
        (Api.BEDROCK, "application/vnd.amazon.eventstream"),
        (Api.OLLAMA, "application/x-ndjson"),
        (Api.OPENAI, "application/json"),
    ],
)
def test_formats_without_keepalives_and_bodies_that_are_no_stream_get_nothing(api: Api, content_type: str) -> None:
    shell = Shell(api, content_type)
    assert not shell.machine.keeps_alive
    shell.silence(5 * EVERY)
    assert shell.body() == b""
    assert shell.timer_at == 0.0  # the timer was let go at its first firing
    assert shell.keepalives_counted() is None


def test_an_encoded_stream_gets_no_keepalive() -> None:
    """Bytes added to a gzip stream would break it: the relay passes encoded bodies as they come."""
    assert for_response(Api.OPENAI, "text/event-stream") is FORMATS[Api.OPENAI]
    shell = Shell(Api.OPENAI, "text/event-stream", ("Content-Encoding", "gzip"))
    assert not shell.machine.keeps_alive
    shell.silence(2 * EVERY)
    assert shell.body() == b""


def test_random_reads_and_silences_never_put_a_keepalive_inside_a_frame() -> None:
    rng = random.Random(36)
    raw = SSE_STREAMS[Api.OPENAI] * 3
    for _ in range(200):
        shell = Shell(Api.OPENAI, "text/event-stream")
        cuts = sorted(rng.sample(range(1, len(raw)), rng.randint(1, 12)))
        for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True):
            shell.read(raw[a:b])
            shell.silence(rng.choice([0.5, EVERY, 2.5 * EVERY]))
        frames, _ = client_frames(Api.OPENAI, shell.body())
        assert fields(frames) == fields(SSEParser().feed(raw))


def test_a_keepalive_never_overtakes_bytes_not_yet_written() -> None:
    """The head leaves with the read that brought it (upstream_read_done); a keep-alive asked for before that read
    is done (no timer can fire there today: this holds the order should one ever) goes out behind the head."""
    shell = Shell(Api.OPENAI, "text/event-stream")
    wire = shell.response.wire
    shell.response.wire = b""
    shell.down.out.append(wire)  # the head, forwarded and not yet written
    shell.down.keep_alive()
    assert shell.response.wire == wire + chunk(b": keep-alive\n\n")
    assert shell.down.out == []
