"""What diagnose counts as the path's cut, and when one cut is the answer: the uncut runs refute a limit a cut
named (a total shorter than an uncut run lasted, an idle limit shorter than an uncut run's silence); a refuted or
lone cut is measured again and is exit 19 only when it repeats in a clear share of the repeats; the origin's error
event, an empty answer, bytes that broke HTTP and an end sooner than any limit are no limit; a total limit gets a
proxy's line only when that line lifts a total; an unpaced series' unsure that no repeat changes is not repeated."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tokenpath.cli.diagnose import checks
from tokenpath.diagnose import cuts, measure
from tokenpath.diagnose.classify import Cause, RunFigures, classify
from tokenpath.diagnose.cuts import Limit, cut_check, name_end
from tokenpath.diagnose.limits import LimitFound, Measure
from tokenpath.diagnose.measure import Measured
from tokenpath.diagnose.report import diagnosis
from tokenpath.diagnose.series import Run, plan
from tokenpath.errors import PathCut, ProtocolViolation, RemoteProtocolError, StreamFormatError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.trace import PARTIAL_TRACE, Trace, TraceRecorder
from tokenpath.wire.client import ClientConnection
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind, LastWord, StreamEnd, broken_by, classify_end, origin_end
from tokenpath.wire.eventstream import EventStreamParser
from tokenpath.wire.ndjson import NDJSONParser

S = 1_000_000_000
MS = 1_000_000
TEMPLATE = ProbeConfig(url="http://127.0.0.1:9")


def run(
    name: str = "base",
    end: StreamEnd | None = None,
    last_ms: float = 600.0,
    frames: int = 12,
    gap_ms: float | None = None,
    paced: bool = True,
) -> RunFigures:
    """A run that streamed `frames` frames evenly until `last_ms` (every `gap_ms` when given), then ended."""
    step = gap_ms if gap_ms is not None else last_ms / max(frames, 1)
    arrivals = tuple(last_ms - step * (frames - 1 - k) for k in range(frames))
    return RunFigures(
        name,
        frames,
        (1,) * frames,
        (60,) * frames,
        arrivals,
        ttfb_ms=arrivals[0] if arrivals else 1.0,
        ttft_ms=arrivals[0] if arrivals else None,
        interval_ms=step if paced else None,
        frame_bytes=60 if paced else None,
        writes_ms=arrivals if paced else None,
        end=end,
    )


def reset_at(at_s: float, since_last_s: float = 0.05) -> StreamEnd:
    return StreamEnd(EndKind.CUT_ERROR, BodyEnd.RESET, at_ns=int(at_s * S), since_last_byte_ns=int(since_last_s * S))


ERROR_FRAME = StreamEnd(EndKind.CUT_ERROR, BodyEnd.CHUNKED, at_ns=int(0.6 * S), since_last_byte_ns=0)
EMPTY = StreamEnd(EndKind.CUT_SILENT, BodyEnd.CHUNKED, at_ns=300_000, since_last_byte_ns=0)
CLOSED_SOON = StreamEnd(EndKind.CUT_SILENT, BodyEnd.CLOSE, at_ns=int(0.605 * S), since_last_byte_ns=50 * MS)


# --- wire/ending.py: bytes that break HTTP are the peer's error, a close before the body's end a cut -----------


def _client_error(*reads: bytes, eof: bool = False) -> RemoteProtocolError:
    conn = ClientConnection()
    conn.start_response("POST")

    def feed() -> None:
        for data in reads:
            conn.receive_data(data)
        if eof:
            conn.receive_eof()

    with pytest.raises(RemoteProtocolError) as caught:
        feed()
    return caught.value


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_bytes_that_break_http_are_malformed_and_a_close_before_the_end_truncates() -> None:
    bad_size = _client_error(CHUNKED_HEAD + b"5\r\ndata:\r\nzz\r\nhello\r\n")
    upgrade = _client_error(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
    past_the_end = _client_error(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\ndata: x\n\nmore bytes")
    mid_chunk = _client_error(CHUNKED_HEAD + b"20\r\ndata: half", eof=True)
    short = _client_error(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\ndata: x\n\n", eof=True)
    assert broken_by(bad_size) is BodyEnd.MALFORMED
    assert broken_by(upgrade) is BodyEnd.MALFORMED
    assert broken_by(past_the_end) is BodyEnd.MALFORMED
    assert broken_by(mid_chunk) is BodyEnd.TRUNCATED
    assert broken_by(short) is BodyEnd.TRUNCATED
    bad_crc = EventStreamParser()
    with pytest.raises(StreamFormatError) as broken:
        bad_crc.feed(b"\x00\x00\x00\x10\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00")
    assert broken_by(broken.value) is BodyEnd.MALFORMED
    inside_a_message = EventStreamParser()
    inside_a_message.feed(b"\x00\x00\x00")
    inside_a_line = NDJSONParser()
    inside_a_line.feed(b'{"half": ')
    for ended_inside in (inside_a_message, inside_a_line):
        with pytest.raises(StreamFormatError) as cut:
            ended_inside.close()
        assert broken_by(cut.value) is BodyEnd.TRUNCATED


def test_a_violation_is_told_by_the_errors_class_not_its_words() -> None:
    """The code that saw the bytes chose the class (errors.ProtocolViolation; StreamFormatError's `truncated`): the
    words of a message, which change, decide nothing."""
    assert broken_by(ProtocolViolation("the server sent something")) is BodyEnd.MALFORMED
    assert broken_by(RemoteProtocolError("malformed HTTP response: a protocol error, a flood")) is BodyEnd.TRUNCATED
    assert broken_by(StreamFormatError("a bad prelude CRC")) is BodyEnd.MALFORMED
    assert broken_by(StreamFormatError("a bad prelude CRC", truncated=True)) is BodyEnd.TRUNCATED
    assert broken_by(StreamFormatError("ended inside a message: truncated")) is BodyEnd.MALFORMED


def test_the_matrix_and_load_still_count_a_malformed_body_as_cut_error() -> None:
    """Issue 36: every client counts each stream's end; a body that broke HTTP is cut_error, its `how` malformed."""
    end = classify_end(LastWord.NOTHING, BodyEnd.MALFORMED, sent_ns=0, end_ns=5 * MS, last_byte_ns=4 * MS)
    assert (end.kind, end.how, end.cut) == (EndKind.CUT_ERROR, BodyEnd.MALFORMED, True)
    assert StreamEnd.from_json(end.to_json()) == end


def test_read_stream_raises_a_malformed_body_as_the_peers_error() -> None:
    trace = Trace("s", 0)
    trace.t_end_ns = 250 * MS
    error = ProtocolViolation("malformed HTTP response body: Invalid character in chunk size")
    recorder = TraceRecorder(trace.stream_id, trace.t_sent_ns)
    recorder.trace = trace
    STREAM_END.attach(error, recorder.cut(error, 250 * MS))
    PARTIAL_TRACE.attach(error, trace)

    def probe(cfg: ProbeConfig) -> Trace:
        raise error

    assert STREAM_END.of(error) is not None
    with pytest.raises(RemoteProtocolError):
        measure.read_stream(probe, TEMPLATE)


# --- what is no cut of the path's ------------------------------------------------------------------------------


def test_the_origins_error_event_is_named_not_a_cut() -> None:
    runs = [run(end=ERROR_FRAME), run("browser", ERROR_FRAME)]
    assert name_end(ERROR_FRAME) is None
    verdict = classify(runs, checks())
    assert verdict.cause is not Cause.CUT
    assert verdict.end is None
    assert any("the origin's own error event" in note for note in verdict.notes)


def test_an_empty_answer_and_a_normal_end_sooner_than_any_limit_are_no_limit() -> None:
    assert cuts.not_the_paths(run(end=EMPTY, frames=0)) is not None
    assert cuts.not_the_paths(run(end=CLOSED_SOON)) is not None
    refused = StreamEnd(EndKind.CUT_ERROR, BodyEnd.TRUNCATED, at_ns=1 * MS, since_last_byte_ns=None)
    assert cuts.not_the_paths(run(end=refused, frames=0)) is not None  # no byte, 1 ms: the stream never began
    first_byte = StreamEnd(EndKind.CUT_ERROR, BodyEnd.TRUNCATED, at_ns=60 * S, since_last_byte_ns=None)
    assert cuts.not_the_paths(run(end=first_byte, frames=0)) is None  # a first-byte limit's cut
    for runs in ([run(end=EMPTY, frames=0), run("browser", EMPTY, frames=0)], [run(end=CLOSED_SOON)]):
        verdict = classify(runs, checks())
        assert verdict.cause is not Cause.CUT
        assert verdict.notes


def test_a_total_limit_shorter_than_the_floor_is_not_named() -> None:
    assert name_end(reset_at(0.312)) is None
    assert name_end(reset_at(0.9)) is None
    named = name_end(reset_at(1.2))
    assert named is not None
    assert named.limit is Limit.TOTAL
    assert name_end(StreamEnd(EndKind.CUT_ERROR, BodyEnd.RESET, at_ns=400 * MS, since_last_byte_ns=300 * MS)) is None


def test_a_reset_too_soon_for_a_limit_is_a_cut_with_no_limit_named() -> None:
    runs = [run(end=reset_at(0.6)), run("browser", reset_at(0.6))]
    verdict = classify(runs, checks())
    assert verdict.cause is Cause.CUT
    assert "too soon for a limit" in verdict.summary
    assert "total limit" not in verdict.summary
    d = diagnosis("http://p", True, runs, verdict, [[("Server", "nginx")]])
    assert d.exit_code == PathCut.exit_code
    assert d.cut is None  # no limit, so no line that lifts one


# --- a cut the other runs refute, or the only one --------------------------------------------------------------


def test_an_uncut_run_longer_than_a_total_limit_refutes_it() -> None:
    cut = run(end=reset_at(1.2), last_ms=1150.0)
    slow = run("slow", last_ms=1500.0)
    named = name_end(cut.end) if cut.end is not None else None
    assert named is not None
    assert cuts.refuted(named, [cut, slow]) is not None
    assert cuts.refuted(named, [cut, run("slow", last_ms=1100.0)]) is None
    assert cuts.in_doubt([cut, slow]) is not None
    verdict = cut_check([cut, slow], ())
    assert verdict is not None
    assert any("longer than a 1.2 s total" in note for note in verdict.notes)


def test_an_uncut_runs_silence_longer_than_an_idle_limit_refutes_it() -> None:
    idle = StreamEnd(EndKind.CUT_ERROR, BodyEnd.TRUNCATED, at_ns=int(2.2 * S), since_last_byte_ns=int(1.5 * S))
    cut = run(end=idle, last_ms=700.0)
    silent = run("slow", last_ms=4000.0, frames=3, gap_ms=1800.0)  # two 1.8 s silences, uncut
    named = name_end(idle)
    assert named is not None
    assert named.limit is Limit.IDLE_MID_STREAM
    assert cuts.refuted(named, [cut, silent]) is not None
    assert cuts.refuted(named, [cut, run("slow", last_ms=1400.0)]) is None


def test_a_lone_cut_is_in_doubt_and_cuts_in_every_run_are_not() -> None:
    assert cuts.in_doubt([run(end=reset_at(1.2)), run("browser", last_ms=600.0)]) is not None
    assert cuts.in_doubt([run(end=reset_at(1.2)), run("browser", end=reset_at(1.2))]) is None
    assert cuts.in_doubt([run(end=reset_at(1.2))]) is None  # nothing to compare with
    assert cuts.in_doubt([run(), run("browser")]) is None


def test_repeats_judge_a_cut_as_holds_are_judged() -> None:
    whole = [run(), run("slow", last_ms=1000.0)]
    streams = classify(whole)
    once = [run(end=reset_at(1.2)), run("slow", last_ms=1000.0), *whole, *whole]
    found = cuts.repeated_cut(once, streams)
    assert found is not None
    assert found.cause is Cause.UNSURE
    assert "cut a stream once" in found.summary
    assert found.end is None  # the report names no limit for a cut seen once
    twice = [run(end=reset_at(1.2)), run("slow", last_ms=1000.0), run(end=reset_at(1.21)), *whole[1:], *whole]
    found = cuts.repeated_cut(twice, streams)
    assert found is not None
    assert found.cause is Cause.CUT
    assert "cut in 2 of 3 repeats" in found.summary
    assert cuts.repeated_cut(whole * 3, streams) is None


def test_a_cut_seen_once_is_a_note_on_a_hold() -> None:
    held = run(paced=False)
    held_verdict = classify([held])
    fake_held = held_verdict.__class__(Cause.TIME_QUANTIZED, "holds frames on a timer")
    found = cuts.repeated_cut([run(end=reset_at(1.2)), run(), run()], fake_held)
    assert found is not None
    assert found.cause is Cause.TIME_QUANTIZED
    assert any("cut one stream once" in note for note in found.notes)


def _scripted(monkeypatch: pytest.MonkeyPatch, passes: list[dict[str, StreamEnd | None]]) -> list[int]:
    """measure.run_series replaced: each call is the next pass, each run ended as the pass says (None: whole)."""
    calls: list[int] = []

    def fake(template: ProbeConfig, runs: Sequence[Run], *_: object, **__: object) -> list[Measured]:
        ends = passes[min(len(calls), len(passes) - 1)]
        calls.append(len(runs))
        out = []
        for r in runs:
            end = ends.get(r.name)
            last = 1500.0 if r.name == "slow" else 600.0
            figures = run(r.name, end, last_ms=(end.at_ns / MS - 50) if end and end.at_ns else last)
            out.append(Measured(figures, (), end))
        return out

    monkeypatch.setattr(measure, "run_series", fake)
    return calls


def test_one_transient_reset_is_measured_again_and_is_no_firm_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """cut.sh once 3: the base run reset at 1.2 s while slow lasted 1.5 s uncut; its repeats are whole."""
    calls = _scripted(monkeypatch, [{"base": reset_at(1.2)}, {}])
    first = plan(controlled=True, encodings=False)
    _, verdict = measure.diagnose_series(TEMPLATE, first, checks=checks())
    assert len(calls) > 1  # measured again
    assert verdict.cause is Cause.UNSURE
    assert "cut a stream once" in verdict.summary
    assert any("refute" in note and "measured" in note for note in verdict.notes)


def test_a_cut_that_repeats_is_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A total limit of 1.2 s cuts only the slow run, in every repeat: lone, so measured again, then exit 19."""
    calls = _scripted(monkeypatch, [{"slow": reset_at(1.2)}])
    first = plan(controlled=True, encodings=False)
    measured, verdict = measure.diagnose_series(TEMPLATE, first, checks=checks())
    assert len(calls) == 2  # the first pass and one repeat: 2 of 2 is a clear share
    assert verdict.cause is Cause.CUT
    assert "total limit, cut at 1.2 s (slow run, cut in 2 of 2 repeats)" in verdict.summary
    assert any(m.figures.name == "slow" and m.figures.end is not None for m in measured)


def test_a_cut_in_every_run_stands_without_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _scripted(monkeypatch, [{"base": reset_at(1.2), "slow": reset_at(1.2), "large": reset_at(1.2)}])
    first = plan(controlled=True, encodings=False)
    _, verdict = measure.diagnose_series(TEMPLATE, first, checks=checks())
    assert verdict.cause is Cause.CUT
    assert len(calls) == 1


# --- a total limit's fix ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("proxy", ["nginx", "haproxy", "apache2", "caddy"])
def test_an_idle_timeout_line_is_never_the_fix_for_a_total_limit(proxy: str) -> None:
    named = cuts.name_cut(LimitFound(Measure.TOTAL, None, 40.0, None, 1), proxy)
    assert named is not None
    line = cuts.lift_line(proxy)
    assert line is not None
    assert line not in named.fix
    assert "set elsewhere" in named.fix
    idle = cuts.name_cut(LimitFound(Measure.MID_STREAM, None, 40.0, None, 1), proxy)
    assert idle is not None
    assert idle.fix == f"{proxy}: {cuts.lift_line(proxy)}"  # an idle limit keeps its line


@pytest.mark.parametrize(("proxy", "key"), [("envoy", "timeout: 0s"), ("gateway", "total_timeout_s")])
def test_a_line_that_lifts_a_total_is_its_fix(proxy: str, key: str) -> None:
    named = cuts.name_cut(LimitFound(Measure.TOTAL, None, 40.0, None, 1), proxy)
    assert named is not None
    assert key in named.fix
    assert named.fix == f"{proxy}: {cuts.lift_line(proxy)}"


# --- an unpaced series' unsure that no repeat changes ------------------------------------------------------------


def test_an_inherent_unsure_is_not_repeated_and_a_repeat_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def short(template: ProbeConfig, runs: Sequence[Run], *_: object, **__: object) -> list[Measured]:
        calls.append(len(runs))
        return [Measured(run(r.name, frames=0, last_ms=0.0, paced=False), ()) for r in runs]

    monkeypatch.setattr(measure, "run_series", short)
    _, verdict = measure.diagnose_series(TEMPLATE, plan(controlled=False), checks=checks())
    assert verdict.cause is Cause.UNSURE
    assert len(calls) == 1
    assert not any("disagreed" in note for note in verdict.notes)
    why = measure._undecided(verdict, 0, [run(end=reset_at(1.2)), run("browser")], judge=cuts.cut_check)
    assert why is not None
    assert "disagreed" not in why


def ended_with(event: bytes) -> StreamEnd:
    """A probe trace of an OpenAI SSE stream whose last event is `event`, its body ended properly (chunked)."""
    recorder = TraceRecorder("s", 0)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n' + event
    recorder.on_read(10 * MS, head + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
    end = recorder.result().end
    assert end is not None
    return end


def test_an_error_event_naming_a_timeout_is_the_paths_cut_and_any_other_the_origins() -> None:
    """The tokenpath gateway ends a stream at its idle limit with an error event (`upstream_idle_timeout`): a path's
    timer said in the format, a cut diagnose names; an error event in other words is the origin's own failure. The
    probe's end keeps the event's words (wire/ending.py error_detail) for origin_end to read."""
    timed_out = ended_with(b'data: {"error":{"message":"no upstream byte","code":"upstream_idle_timeout"}}\n\n')
    failed = ended_with(b'data: {"error":{"message":"generation time limit","type":"server_error"}}\n\n')
    assert timed_out.kind is failed.kind is EndKind.CUT_ERROR
    assert "upstream_idle_timeout" in timed_out.detail
    assert not origin_end(timed_out)
    assert origin_end(failed)
    run = next(r for r in plan(controlled=True) if r.name == "base")
    figures = RunFigures(run.name, 1, (1,), (60,), (2000.0,), 1.0, 1.0, end=timed_out)
    assert cuts.not_the_paths(figures) is None  # the path's: named like any cut
    assert cuts.not_the_paths(RunFigures(run.name, 1, (1,), (60,), (2000.0,), 1.0, 1.0, end=failed)) is not None
