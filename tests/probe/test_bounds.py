"""What the probe keeps of a stream is bounded, and every deadline holds however a peer spaces its bytes: real
loopback servers (tests/probe/hostile.py) in process, each stopping on its own so that a probe without the bound
fails an assertion instead of hanging the suite. The same endpoints against the CLI, measured for memory:
test_hostile_processes.py."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator

import pytest

from tests.probe.hostile import (
    ANTHROPIC_FRAMES,
    OPENAI_FRAMES,
    SSE_HEAD,
    TRICKLE_S,
    Hostile,
    server_context,
    status,
)
from tokenpath import errors
from tokenpath.errors import ResponseTooLarge
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import TraceLimits, TraceRecorder
from tokenpath.probe.transport import DRAIN_MAX_BYTES, TLSOptions, open_connection, parse_target
from tokenpath.serve.tlscert import self_signed
from tokenpath.wire.sse import SSEParser

MS = 1_000_000


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    files = self_signed(tmp_path_factory.mktemp("tls"), ["127.0.0.1"])
    return server_context(str(files.cert), str(files.key))


@pytest.fixture
def serve() -> Iterator[Callable[..., Hostile]]:
    started: list[Hostile] = []

    def start(kind: str | Callable[[socket.socket], None], **kw: object) -> Hostile:
        started.append(Hostile(kind, **kw))  # type: ignore[arg-type]
        return started[-1]

    yield start
    for h in started:
        h.close()


def timed(fn: Callable[[], object]) -> tuple[float, BaseException | None]:
    t0 = time.monotonic()
    try:
        fn()
    except Exception as exc:
        return time.monotonic() - t0, exc
    return time.monotonic() - t0, None


# -- a trace keeps at most its limits, and counts the rest ---------------------------------------------------------


def test_a_trace_keeps_at_most_its_limits_and_counts_every_read_and_frame() -> None:
    head = SSE_HEAD + b"Connection: close\r\n\r\n"
    limits = TraceLimits(reads=10, frames=25, frame_bytes=1 << 20)
    small, whole = TraceRecorder("s", 0, limits), TraceRecorder("s", 0)
    for rec in (small, whole):
        rec.on_read(1 * MS, head)
        for i in range(100):
            rec.on_read((2 + i) * MS, b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n' * (1 + i % 3))
    assert (small.trace.read_count, len(small.trace.reads)) == (101, 10)
    assert (small.trace.frame_count, len(small.trace.frames)) == (199, 25)
    assert small.trace.reads_dropped == 91
    assert small.trace.frames_dropped == 174
    a, b = run_metrics(small.trace), run_metrics(whole.trace)
    # every figure but the gaps (over the kept arrivals) is the whole stream's
    assert (a.frames, a.arrivals, a.frames_per_read, a.bursts, a.ttfb_ms, a.ttft_ms) == (
        b.frames, b.arrivals, b.frames_per_read, b.bursts, b.ttfb_ms, b.ttft_ms)  # fmt: skip
    assert b.frames == 199
    assert len(whole.trace.frames) == 199


def test_kept_frames_stop_at_the_byte_limit_and_stay_a_prefix() -> None:
    rec = TraceRecorder("s", 0, TraceLimits(frame_bytes=1000))
    rec.on_read(MS, SSE_HEAD + b"Connection: close\r\n\r\n")
    rec.on_read(2 * MS, b"data: " + b"x" * 600 + b"\n\n")  # kept
    rec.on_read(3 * MS, b"data: " + b"y" * 600 + b"\n\n")  # over: not kept, and nothing after it
    rec.on_read(4 * MS, b"data: z\n\n")
    assert [len(f.frame.raw) for f in rec.trace.frames] == [608]
    assert rec.trace.frame_count == 3


def test_the_answer_ends_past_its_byte_bound_and_only_when_one_is_set() -> None:
    """`response_bytes`: the stream's bytes read in all, head included; past it, ResponseTooLarge (the monitor's
    bound on a flood); None (the probe command's) reads on."""
    frame = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
    head = SSE_HEAD + b"Connection: close\r\n\r\n"
    bound = len(head) + 10 * len(frame)
    bounded, unbounded = TraceRecorder("s", 0, TraceLimits(response_bytes=bound)), TraceRecorder("s", 0)
    for rec in (bounded, unbounded):
        rec.on_read(MS, head)
        for i in range(10):
            rec.on_read((2 + i) * MS, frame)  # exactly the bound: read
    with pytest.raises(ResponseTooLarge, match=f"response larger than {bound:,} bytes"):
        bounded.on_read(20 * MS, b"d")
    assert unbounded.on_read(20 * MS, frame * 1000) == 1000
    assert bounded.trace.frame_count == 10


# -- TLS: one drain takes at most DRAIN_MAX_BYTES; the handshake and each read end at their deadline ---------------


def test_one_drain_takes_at_most_its_limit_from_a_peer_flooding_records(
    tls: ssl.SSLContext, serve: Callable[..., Hostile]
) -> None:
    sent = 8 * DRAIN_MAX_BYTES  # then the peer stops and waits: a drain without the limit returns all of it

    def flood_then_wait(conn: socket.socket) -> None:
        conn.recv(65536)
        for _ in range(sent // 16384):
            conn.sendall(b"r" * 16384)  # one 16 KB record each
        time.sleep(30)

    h = serve(flood_then_wait, tls=tls)
    transport = open_connection(parse_target(h.url), connect_timeout_s=5, tls=TLSOptions(insecure=True))
    try:
        transport.sendall(b"GET / HTTP/1.1\r\n\r\n")
        first = transport.recv(5)
        time.sleep(1.0)  # let the flood fill the socket buffers
        drained = transport.drain()
        assert 0 < len(drained) <= DRAIN_MAX_BYTES
        assert len(first) + len(drained) < sent
    finally:
        transport.close()


def test_the_tls_handshake_ends_at_the_connect_deadline_however_slowly_the_peer_sends(
    serve: Callable[..., Hostile],
) -> None:
    def trickle_briefly(conn: socket.socket) -> None:  # a 16 KB record header, then a byte per TRICKLE_S, for 10 s
        conn.recv(65536)
        conn.sendall(b"\x16\x03\x03\x40\x00")
        for _ in range(int(10 / TRICKLE_S)):
            conn.sendall(b"\x00")
            time.sleep(TRICKLE_S)

    h = serve(trickle_briefly, https=True)
    elapsed, exc = timed(lambda: open_connection(parse_target(h.url), connect_timeout_s=1.0,
                                                 tls=TLSOptions(insecure=True)))  # fmt: skip
    assert isinstance(exc, errors.ConnectTimeout), exc
    assert elapsed < 4.0


def test_total_timeout_covers_the_tls_handshake(serve: Callable[..., Hostile]) -> None:
    h = serve("handshake_trickle", https=True)
    cfg = ProbeConfig(url=h.url, tls=TLSOptions(insecure=True), connect_timeout_s=30, total_timeout_s=1.0)
    elapsed, exc = timed(lambda: probe_stream(cfg))
    assert isinstance(exc, errors.TotalTimeout), exc
    assert elapsed < 4.0


# -- deadlines: the head, the error body and the body all end by --total-timeout ------------------------------------


def test_a_head_trickled_a_byte_at_a_time_ends_at_total_timeout(serve: Callable[..., Hostile]) -> None:
    h = serve("head_trickle")
    cfg = ProbeConfig(url=h.url, total_timeout_s=1.5, idle_timeout_s=30, first_byte_timeout_s=30)
    elapsed, exc = timed(lambda: probe_stream(cfg))
    assert isinstance(exc, errors.TotalTimeout), exc
    assert elapsed < 1.5 + 2.0


def test_a_head_trickled_then_silent_ends_at_total_timeout_not_a_read_timeout_later(
    serve: Callable[..., Hostile],
) -> None:
    def trickle_then_hang(conn: socket.socket) -> None:  # a byte every 0.25 s until 2.5 s, then silence
        conn.recv(65536)
        for byte in b"HTTP/1.1 2":
            conn.sendall(bytes([byte]))
            time.sleep(0.25)
        time.sleep(60)

    h = serve(trickle_then_hang)
    cfg = ProbeConfig(url=h.url, total_timeout_s=3.0, idle_timeout_s=20, first_byte_timeout_s=20)
    elapsed, exc = timed(lambda: probe_stream(cfg))
    assert isinstance(exc, errors.TotalTimeout), exc
    assert elapsed < 3.0 + 1.2  # not a whole read timeout (min(idle, total) = 3 s) after the last byte, at 2.5 s


def test_an_error_body_trickled_is_previewed_for_a_second_at_most(serve: Callable[..., Hostile]) -> None:
    def slow_503(conn: socket.socket) -> None:  # 20 bytes, one per TRICKLE_S, then the end: 10 s without the bound
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 20\r\n\r\n")
        for _ in range(20):
            conn.sendall(b"z")
            time.sleep(TRICKLE_S)

    h = serve(slow_503)
    elapsed, exc = timed(lambda: probe_stream(ProbeConfig(url=h.url)))
    assert isinstance(exc, errors.HTTPStatusError), exc
    assert "HTTP 503" in str(exc)
    assert "z" in str(exc)
    assert elapsed < 4.0


# -- B: a Content-Encoding is decoded; one the probe cannot read is its own error ---------------------------------


def test_a_gzip_response_is_decoded_and_its_frames_counted(serve: Callable[..., Hostile]) -> None:
    h = serve("gzip")
    metrics = run_metrics(probe_stream(ProbeConfig(url=h.url, accept_encoding="gzip")))
    assert metrics.content_encoding == "gzip"
    assert metrics.frames == len(SSEParser().feed(OPENAI_FRAMES))
    assert metrics.ttft_ms is not None


@pytest.mark.parametrize(
    ("header", "reason"),
    [(b"Content-Encoding: compress", "unsupported"), (b"Transfer-Encoding: gzip, chunked", "unsupported")],
)
def test_a_coding_it_cannot_decode_is_refused_by_name(
    header: bytes, reason: str, serve: Callable[..., Hostile]
) -> None:
    def encoded(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(SSE_HEAD + header + b"\r\nConnection: close\r\n\r\n")

    h = serve(encoded)
    with pytest.raises(errors.ContentEncodingError, match=header.split(b": ")[1].split(b",")[0].decode()) as info:
        probe_stream(ProbeConfig(url=h.url))
    assert info.value.reason == reason


def test_identity_is_read_as_it_is(serve: Callable[..., Hostile]) -> None:
    def identity(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(SSE_HEAD + b"Content-Encoding: identity\r\nContent-Length: %d\r\n\r\n%b"
                     % (len(OPENAI_FRAMES), OPENAI_FRAMES))  # fmt: skip

    h = serve(identity)
    assert run_metrics(probe_stream(ProbeConfig(url=h.url))).ttft_ms is not None


# -- C: another API format has no TTFT, and says why ----------------------------------------------------------------


def test_an_anthropic_stream_reports_no_ttft_and_says_it_is_another_format(serve: Callable[..., Hostile]) -> None:
    h = serve("anthropic")
    metrics = run_metrics(probe_stream(ProbeConfig(url=h.url)))
    assert metrics.frames == 8
    assert metrics.ttft_ms is None  # was the first frame's arrival: message_start
    assert "no OpenAI content frame" in metrics.ttft_note
    assert "event: message_start" in metrics.ttft_note
    assert metrics.to_json()["ttft_note"] == metrics.ttft_note


def test_ttft_is_the_first_openai_content_frame_not_an_earlier_foreign_one() -> None:
    rec = TraceRecorder("s", 0)
    rec.on_read(MS, SSE_HEAD + b"Connection: close\r\n\r\n")
    rec.on_read(100 * MS, b'event: response.created\ndata: {"type":"response.created"}\n\n')  # 100 ms: not TTFT
    rec.on_read(140 * MS, b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n')
    metrics = run_metrics(rec.trace)
    assert metrics.ttft_ms == 140.0
    assert metrics.ttft_note == ""


def test_plain_text_frames_are_still_content() -> None:
    rec = TraceRecorder("s", 0)
    rec.on_read(MS, SSE_HEAD + b"Connection: close\r\n\r\n" + b"data: 17\n\n")
    assert run_metrics(rec.trace).ttft_ms == 1.0


def test_the_anthropic_frames_fixture_is_what_the_note_names() -> None:
    assert ANTHROPIC_FRAMES.startswith(b"event: message_start\n")


# -- D: 400 is BadRequest (exit 12), 401 an HTTPStatusError (exit 6) --------------------------------------------


@pytest.mark.parametrize(
    ("code", "reason", "error"),
    [(400, "Bad Request", errors.BadRequest), (413, "Content Too Large", errors.BadRequest),
     (401, "Unauthorized", errors.HTTPStatusError), (404, "Not Found", errors.HTTPStatusError),
     (429, "Too Many Requests", errors.HTTPStatusError)],
)  # fmt: skip
def test_a_refused_request_is_bad_request_and_other_statuses_are_http_status(
    code: int, reason: str, error: type[errors.PeerError], serve: Callable[..., Hostile]
) -> None:
    h = serve(status(code, reason, b'{"error":{"message":"why"}}'))
    with pytest.raises(error, match=rf"HTTP {code} .*why") as caught:
        probe_stream(ProbeConfig(url=h.url))
    assert type(caught.value) is error


def test_an_event_or_a_head_past_its_limit_is_response_too_large() -> None:
    from tokenpath.wire.sse import MAX_EVENT_BYTES

    rec = TraceRecorder("s", 0)
    rec.on_read(MS, SSE_HEAD + b"Connection: close\r\n\r\ndata: ")
    for i in range(MAX_EVENT_BYTES // 65536 - 1):
        rec.on_read((2 + i) * MS, b"x" * 65536)
    with pytest.raises(errors.ResponseTooLarge, match="grew past"):
        rec.on_read(MS * 1000, b"x" * 65536)
    with pytest.raises(errors.ResponseTooLarge, match="response head larger"):
        TraceRecorder("s", 0).on_read(MS, b"HTTP/1.1 200 OK\r\n" + b"X-More: y\r\n" * 8000)
