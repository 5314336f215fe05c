from __future__ import annotations

import ssl

import pytest

from tokenpath.errors import (
    ContentTypeError,
    FirstByteTimeout,
    HTTPStatusError,
    IdleTimeout,
    NetworkError,
    PeerError,
    ProtocolError,
    UsageError,
)
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import PARTIAL_TRACE, Trace
from tokenpath.probe.transport import Target
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind

MS = 1_000_000


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class ScriptedTransport:
    """Replays (delay_ms, bytes) steps; bytes None = the peer stays silent past any timeout."""

    def __init__(self, clock: FakeClock, steps: list[tuple[float, bytes | None]]) -> None:
        self.clock = clock
        self.steps = list(steps)
        self.sent = b""
        self.closed = False

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv(self, timeout_s: float) -> bytes:
        if not self.steps:
            return b""
        delay_ms, data = self.steps.pop(0)
        if data is None or delay_ms / 1000 > timeout_s:
            self.clock.now += int(timeout_s * 1e9)
            raise TimeoutError
        self.clock.now += int(delay_ms * MS)
        return data

    def drain(self) -> bytes:
        return b""

    def close(self) -> None:
        self.closed = True


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def run(steps: list[tuple[float, bytes | None]], **cfg: float) -> tuple[ScriptedTransport, object]:
    clock = FakeClock()
    transport = ScriptedTransport(clock, steps)
    config = ProbeConfig(url="http://127.0.0.1:9/v1", **cfg)  # type: ignore[arg-type]

    def connect(target: Target, c: ProbeConfig) -> ScriptedTransport:
        return transport

    trace = probe_stream(config, stream_id="s1", clock=clock, connect=connect)
    return transport, trace


def test_request_is_written_by_hand_with_stream_id() -> None:
    transport, _ = run([(1, HEAD + chunk(b"data: 1\n\n") + b"0\r\n\r\n")])
    assert transport.sent.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"X-Tokenpath-Stream: s1\r\n" in transport.sent
    assert b'"user":"s1"' in transport.sent
    assert b"Connection: close" in transport.sent
    assert transport.closed


def test_reads_are_timestamped_when_they_return() -> None:
    steps: list[tuple[float, bytes | None]] = [
        (2, HEAD),
        (90, chunk(b"data: 1\n\n")),
        (50, chunk(b"data: 2\n\n") + b"0\r\n\r\n"),
    ]
    _, trace = run(steps)
    metrics = run_metrics(trace)  # type: ignore[arg-type]
    assert metrics.ttfb_ms == 2.0
    assert metrics.ttft_ms == 92.0
    assert metrics.gaps_ms["max"] == 50.0
    assert metrics.total_ms == 142.0


def test_api_key_goes_in_authorization_header() -> None:
    clock = FakeClock()
    transport = ScriptedTransport(clock, [(1, HEAD + b"0\r\n\r\n")])
    cfg = ProbeConfig(url="http://h/v1", api_key="sk-secret")
    assert "sk-secret" not in repr(cfg)
    probe_stream(cfg, clock=clock, connect=lambda t, c: transport)
    assert b"Authorization: Bearer sk-secret\r\n" in transport.sent


def test_non_2xx_shows_the_body() -> None:
    body = b'{"error":{"message":"bad key"}}'
    resp = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    with pytest.raises(HTTPStatusError, match=r"HTTP 401.*bad key"):
        run([(1, resp)])


def test_non_sse_content_type() -> None:
    resp = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    with pytest.raises(ContentTypeError, match="application/json"):
        run([(1, resp)])


def test_first_byte_timeout() -> None:
    with pytest.raises(FirstByteTimeout, match=r"`first_byte_timeout` 0\.5"):
        run([(0, None)], first_byte_timeout_s=0.5)


def test_idle_timeout_between_frames() -> None:
    with pytest.raises(IdleTimeout, match="after 1 frames"):
        run([(1, HEAD + chunk(b"data: 1\n\n")), (0, None)], idle_timeout_s=0.2)


def test_malformed_chunked_encoding() -> None:
    with pytest.raises(ProtocolError, match="malformed"):
        run([(1, HEAD + b"zz\r\n")])


def test_truncated_stream() -> None:
    with pytest.raises(ProtocolError, match="chunked"):
        run([(1, HEAD + chunk(b"data: 1\n\n"))])


def test_reset_is_a_peer_error() -> None:
    class Resetting(ScriptedTransport):
        def recv(self, timeout_s: float) -> bytes:
            raise ConnectionResetError(104, "Connection reset by peer")

    clock = FakeClock()
    with pytest.raises(PeerError, match="reset"):
        probe_stream(ProbeConfig(url="http://h"), clock=clock, connect=lambda t, c: Resetting(clock, []))


@pytest.mark.parametrize("where", ["sendall", "recv"])
def test_a_tls_session_ended_after_the_handshake_is_a_network_error_not_ours(where: str) -> None:
    """A monitor stopping mid-probe aborts a TLS socket inside sendall/recv: ssl.SSLEOFError, which must count as
    the connection's failure (monitor outcome `network`), never as an internal error."""

    class Ended(ScriptedTransport):
        def sendall(self, data: bytes) -> None:
            if where == "sendall":
                raise ssl.SSLEOFError(8, "EOF occurred in violation of protocol")

        def recv(self, timeout_s: float) -> bytes:
            raise ssl.SSLEOFError(8, "EOF occurred in violation of protocol")

    clock = FakeClock()
    with pytest.raises(NetworkError, match="TLS connection failed"):
        probe_stream(ProbeConfig(url="http://h"), clock=clock, connect=lambda t, c: Ended(clock, []))


@pytest.mark.parametrize("flag", ["connect_timeout_s", "first_byte_timeout_s", "idle_timeout_s", "total_timeout_s"])
@pytest.mark.parametrize("value", [-1.0, 0.0, float("nan"), float("inf")])
def test_timeouts_must_be_positive_and_finite(flag: str, value: float) -> None:
    with pytest.raises(UsageError, match="must be a number of seconds > 0"):
        ProbeConfig(url="http://127.0.0.1:9", **{flag: value})  # type: ignore[arg-type]


def test_every_http_1_1_trace_carries_its_end() -> None:
    """probe/table.py shows a trace without an end as cut: a whole stream's says complete, a short one's cut."""
    _, whole = run(
        [(1, HEAD + chunk(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n') + b"0\r\n\r\n")]
    )
    _, short = run([(1, HEAD + chunk(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n') + b"0\r\n\r\n")])
    assert isinstance(whole, Trace)
    assert isinstance(short, Trace)
    assert whole.end is not None
    assert (whole.end.kind, whole.end.how) == (EndKind.COMPLETE, BodyEnd.CHUNKED)
    assert short.end is not None
    assert (short.end.kind, short.end.how) == (EndKind.CUT_SILENT, BodyEnd.CHUNKED)


def test_a_cut_raises_with_its_end_and_the_trace_so_far() -> None:
    with pytest.raises(ProtocolError) as truncated:
        run([(1, HEAD + chunk(b"data: 1\n\n")), (5, b"")])

    class Resetting(ScriptedTransport):
        def recv(self, timeout_s: float) -> bytes:
            if self.steps:
                return super().recv(timeout_s)
            raise ConnectionResetError(104, "Connection reset by peer")

    clock = FakeClock()
    transport = Resetting(clock, [(1, HEAD + chunk(b"data: 1\n\n"))])
    with pytest.raises(NetworkError, match="reset") as reset:
        probe_stream(ProbeConfig(url="http://h"), clock=clock, connect=lambda t, c: transport)
    for caught, how in ((truncated, BodyEnd.TRUNCATED), (reset, BodyEnd.RESET)):
        end = STREAM_END.of(caught.value)
        assert end is not None
        assert (end.kind, end.how) == (EndKind.CUT_ERROR, how)
        partial = PARTIAL_TRACE.of(caught.value)
        assert partial is not None
        assert partial.frame_count == 1
        assert partial.end == end
