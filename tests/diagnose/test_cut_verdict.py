"""Issue 36 item 5: diagnose names a cut. A run the path cut (its end read from the probe's error) is the verdict,
through the check the CLI passes to classify(): which limit, its value, the proxy's long_streams line or the
keep-alive advice, exit 19. The cut itself comes from the probe's trace so far, carried by its error."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.diagnose.test_measure import trace_of
from tokenpath.cli.diagnose import checks
from tokenpath.diagnose import measure
from tokenpath.diagnose.classify import Cause, RunFigures, classify
from tokenpath.diagnose.cuts import Limit
from tokenpath.diagnose.report import diagnosis, lines
from tokenpath.diagnose.series import plan
from tokenpath.errors import (
    HTTPStatusError,
    IdleTimeout,
    PathCut,
    PeerError,
    RemoteProtocolError,
    StreamFormatError,
)
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.probe.trace import PARTIAL_TRACE, Trace, TraceRecorder
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind, StreamEnd

S = 1_000_000_000
NGINX = [("Server", "nginx/1.22.1")]
# 1.1 s after the request, 1.0 s after the last byte: an idle timer mid-stream.
MID_STREAM_CUT = StreamEnd(EndKind.CUT_ERROR, BodyEnd.TRUNCATED, at_ns=int(1.1 * S), since_last_byte_ns=1 * S)


def streamed(name: str = "base", end: StreamEnd | None = None) -> RunFigures:
    return RunFigures(name, 2, (1, 1), (60, 60), (90.0, 104.0), ttfb_ms=1.0, ttft_ms=90.0, end=end)


def test_the_cli_check_names_a_cut_run_before_the_rules() -> None:
    runs = [streamed(), streamed("browser", MID_STREAM_CUT)]
    assert classify(runs).cause is not Cause.CUT  # the rules alone never name a cut
    verdict = classify(runs, checks())
    assert verdict.cause is Cause.CUT
    assert verdict.end == MID_STREAM_CUT
    assert "idle mid-stream limit, cut at 1 s (browser run)" in verdict.summary
    assert not verdict.held
    assert classify([streamed(), streamed("browser")], checks()).cause is not Cause.CUT


def test_a_cut_names_its_limit_and_the_recognised_proxys_line() -> None:
    verdict = classify([streamed(end=MID_STREAM_CUT)], checks())
    d = diagnosis("http://p", True, [streamed(end=MID_STREAM_CUT)], verdict, [NGINX])
    assert d.exit_code == PathCut.exit_code == 19
    assert d.cut is not None
    assert (d.cut.limit, d.cut.cut_s) == (Limit.IDLE_MID_STREAM, 1.0)
    text = lines(d)
    assert text[0].startswith("http://p: cuts the stream: idle mid-stream limit")
    assert "cut: idle mid-stream limit at 1 s" in text
    assert "fix: nginx: proxy_read_timeout 3600s;" in text
    assert d.fix is None
    assert d.generic is None
    doc = d.to_json()
    assert doc["cut"] == {"limit": "idle mid-stream", "cut_s": 1.0, "fix": "nginx: proxy_read_timeout 3600s;"}
    assert doc["runs"][0]["end"]["kind"] == "cut_error"


def test_an_unnamed_path_gets_the_keep_alive_advice() -> None:
    verdict = classify([streamed(end=MID_STREAM_CUT)], checks())
    d = diagnosis("http://p", True, [streamed(end=MID_STREAM_CUT)], verdict, [[]])
    assert d.cut is not None
    assert d.cut.fix.startswith("send keep-alives more often than every 1 s")


def _cut_trace() -> Trace:
    trace = trace_of([[60], [60]], [90.0, 104.0])
    trace.t_last_byte_ns = trace.t_sent_ns + 104 * 1_000_000
    trace.t_end_ns = trace.t_sent_ns + int(1.2 * S)
    return trace


def _as_probed(exc: PeerError) -> PeerError:
    """`exc` as every probe client raises it (probe/client.py's read loop): carrying the trace so far and the end
    its recorder gave the stream (none for what ends no stream: a timeout of ours)."""
    trace = _cut_trace()
    assert trace.t_end_ns is not None
    recorder = TraceRecorder(trace.stream_id, trace.t_sent_ns)
    recorder.trace = trace
    return PARTIAL_TRACE.attach(STREAM_END.attach(exc, recorder.cut(exc, trace.t_end_ns)), trace)


def test_read_stream_takes_a_body_cut_short_from_the_end_and_trace_the_error_carries() -> None:
    def probe(cfg: ProbeConfig) -> Trace:  # raises as probe_stream does: the trace so far and its end go with it
        raise _as_probed(RemoteProtocolError("the body ended before its last chunk"))

    trace, end = measure.read_stream(probe, ProbeConfig(url="http://127.0.0.1:9"))
    assert trace.frame_count == 2
    assert end is not None
    assert (end.kind, end.how) == (EndKind.CUT_ERROR, BodyEnd.TRUNCATED)
    assert end.at_ns == int(1.2 * S)
    assert end.since_last_byte_ns == int(1.2 * S) - 104 * 1_000_000


@pytest.mark.parametrize(
    "error",
    [IdleTimeout("no frame for 10 s"), StreamFormatError("a malformed event"), HTTPStatusError("HTTP 502")],
)
def test_what_is_no_cut_is_raised(error: PeerError) -> None:
    """Our own timeout, a malformed frame (a broken body, but not a cut), an error status instead of a stream."""

    def probe(cfg: ProbeConfig) -> Trace:
        raise _as_probed(error)

    with pytest.raises(type(error)):
        measure.read_stream(probe, ProbeConfig(url="http://127.0.0.1:9"))


def test_an_error_with_no_end_attached_is_raised_never_guessed() -> None:
    """A stream's end comes from the client that read it; diagnose never guesses one from the trace so far."""

    def probe(cfg: ProbeConfig) -> Trace:
        raise PARTIAL_TRACE.attach(RemoteProtocolError("the body ended before its last chunk"), _cut_trace())

    with pytest.raises(RemoteProtocolError):
        measure.read_stream(probe, ProbeConfig(url="http://127.0.0.1:9"))


def test_a_cut_warm_up_and_cut_runs_keep_the_series_going() -> None:
    def probe(cfg: ProbeConfig) -> Trace:
        raise _as_probed(RemoteProtocolError("cut"))

    out = measure.run_series(ProbeConfig(url="http://127.0.0.1:9"), plan(controlled=False), probe)
    assert [m.figures.end is not None and m.figures.end.cut for m in out] == [True, True]


def test_the_probe_hands_over_the_stream_so_far_with_a_cut() -> None:
    """A real socket: a chunked head and one event, then a close without the last chunk."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        event = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        conn.sendall(head + b"%x\r\n" % len(event) + event + b"\r\n")
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        with pytest.raises(RemoteProtocolError) as caught:
            probe_stream(ProbeConfig(url=f"http://127.0.0.1:{port}/v1"))
    finally:
        listener.close()
    trace = PARTIAL_TRACE.of(caught.value)
    assert trace is not None
    assert trace.frame_count == 1
    assert trace.t_end_ns is not None

    def probe(cfg: ProbeConfig) -> Trace:
        raise caught.value

    _, end = measure.read_stream(probe, ProbeConfig(url="http://127.0.0.1:9"))
    assert end is not None
    assert end.cut
    assert end.since_last_byte_ns is not None
