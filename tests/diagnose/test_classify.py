"""classify() over synthetic figures: each cause from the runs that show it, the series growing until it can tell,
and "unsure" wherever the runs disagree. The figures are made by small models of each behaviour on the series' own
schedules (series.SCHEDULES), each frame's write known as a paced stub's audit gives it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tokenpath.diagnose import series as s
from tokenpath.diagnose.classify import (
    Cause,
    RunFigures,
    Verdict,
    classify,
    disagree,
    intermittent,
    least_held,
    most_held,
    shares,
    timer_kind,
)
from tokenpath.diagnose.fixes import generic_fix
from tokenpath.diagnose.report import diagnosis
from tokenpath.diagnose.shape import Kind
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd

BROWSER = "gzip, deflate, br, zstd"
Model = Callable[..., RunFigures]


def writes(name: str) -> list[float]:
    sched = s.SCHEDULES[name]
    return [s.TTFT_MS + k * sched.interval_ms for k in range(sched.frames)]


def run_of(name: str, groups: list[list[int]], at: list[float], *, ttfb: float = 1.0, encoding: str = "") -> RunFigures:
    """Figures of the run `name` whose frames (indexes) arrived in `groups` at the times `at`."""
    sched = s.SCHEDULES[name]
    compressed = name in s.COMPRESSED
    return RunFigures(
        name=name,
        frames=sum(len(g) for g in groups),
        bursts=tuple(len(g) for g in groups),
        burst_bytes=tuple(len(g) * sched.frame_bytes for g in groups),
        arrivals_ms=tuple(at),
        ttfb_ms=ttfb,
        ttft_ms=at[0] if at else None,
        accept_encoding=BROWSER if compressed else None,
        content_encoding=(encoding or "gzip") if compressed else "identity",
        interval_ms=sched.interval_ms,
        frame_bytes=sched.frame_bytes,
        stub_ttft_ms=s.TTFT_MS,
        writes_ms=tuple(writes(name)),
    )


def streaming(name: str, late: float = 0.5, **kw: object) -> RunFigures:
    w = writes(name)
    return run_of(name, [[k] for k in range(len(w))], [t + late for t in w], **kw)  # type: ignore[arg-type]


def whole(name: str, **kw: object) -> RunFigures:
    w = writes(name)
    return run_of(name, [list(range(len(w)))], [w[-1] + 1], **kw)  # type: ignore[arg-type]


def timer(name: str, hold: float = 200.0, **kw: object) -> RunFigures:
    """A cork timer started by the first held frame: everything written before it fires goes with it."""
    w = writes(name)
    groups: list[list[int]] = []
    at: list[float] = []
    k = 0
    while k < len(w):
        fire = w[k] + hold
        group = [j for j in range(k, len(w)) if w[j] <= fire]
        groups.append(group)
        at.append(fire if group[-1] < len(w) - 1 else w[-1] + 1)
        k = group[-1] + 1
    return run_of(name, groups, at, **kw)  # type: ignore[arg-type]


def threshold(name: str, quantum: int = 300, **kw: object) -> RunFigures:
    """A byte threshold: frames go once `quantum` bytes are held (the rest at the end of the response)."""
    w = writes(name)
    size = s.SCHEDULES[name].frame_bytes
    groups: list[list[int]] = [[]]
    at: list[float] = []
    for k in range(len(w)):
        groups[-1].append(k)
        if len(groups[-1]) * size >= quantum:
            at.append(w[k] + 0.5)
            groups.append([])
    if groups[-1]:
        at.append(w[-1] + 1)
    else:
        groups.pop()
    return run_of(name, groups, at, **kw)  # type: ignore[arg-type]


def first_bytes(name: str, until: int = 1024, **kw: object) -> RunFigures:
    """The first `until` bytes held (Traefik 3.3.2's compress picking an encoding), then every frame on time; a
    stream shorter than that held to its end."""
    w = writes(name)
    size = s.SCHEDULES[name].frame_bytes
    n = next((k + 1 for k in range(len(w)) if (k + 1) * size >= until), len(w))
    groups = [list(range(n)), *[[k] for k in range(n, len(w))]]
    at = [w[n - 1] + 0.5, *[w[k] + 0.5 for k in range(n, len(w))]]
    return run_of(name, groups, at, **kw)  # type: ignore[arg-type]


def grown(identity: Model, compressed: Model | None = None, **kw: object) -> tuple[Verdict, list[RunFigures]]:
    """What measure.diagnose_series does, with models for the network: the first runs, then the runs classify()
    wants, until it wants none. Identity runs follow `identity`, the compressed ones `compressed` (default the
    same)."""
    comp = compressed or identity

    def measured(name: str) -> RunFigures:
        return comp(name) if name in s.COMPRESSED else identity(name, **kw)

    runs = [measured(r.name) for r in s.plan(True)]
    verdict = classify(runs)
    for _ in range(4):
        if not verdict.wants:
            break
        runs += [measured(name) for name in verdict.wants]
        verdict = classify(runs)
    assert not verdict.wants, verdict
    return verdict, runs


# --- shapes -----------------------------------------------------------------------------------------------------


def test_shapes_of_the_models() -> None:
    assert streaming(s.BASE).seen().kind is Kind.STREAMS
    assert whole(s.BASE).seen().kind is Kind.WHOLE
    assert timer(s.BASE).seen().kind is Kind.BURSTS
    assert threshold(s.BASE).seen().kind is Kind.BURSTS
    assert first_bytes(s.BASE_LONG).seen().kind is Kind.FIRST_HELD
    assert run_of(s.BASE, [[0], [1]], [151, 201]).seen().kind is Kind.TOO_SHORT


def test_every_frame_alone_but_late_is_held_not_streaming() -> None:
    """fpr 1.00 is not enough: a timer shorter than the interval delivers each frame alone, each one late."""
    late = streaming(s.SLOW, late=40.0)
    assert late.fpr == 1.0
    assert late.seen().kind is Kind.LATE


# --- causes -----------------------------------------------------------------------------------------------------


def test_streams_in_the_first_runs() -> None:
    v, runs = grown(streaming)
    assert v.cause is Cause.STREAMS
    assert not v.held
    assert [r.name for r in runs] == [s.BASE, s.SLOW, s.LARGE, s.BROWSER]


def test_a_short_whole_response_grows_the_series_before_it_is_named() -> None:
    """Every 12-frame stream held to its end: a stream of the bound tells whether it is the whole response."""
    first = [whole(r.name) for r in s.plan(True)]
    v = classify(first)
    assert v.cause is Cause.UNSURE
    assert v.wants == (s.LONG,)
    v, _ = grown(whole)
    assert v.cause is Cause.WHOLE_RESPONSE
    assert not v.at_least
    assert "whole response" in v.summary


def test_a_buffer_of_16_kib_is_a_threshold_not_the_whole_response() -> None:
    """The hand-written Node proxy: 12 frames never reach 16 KiB, a longer stream shows its bursts."""
    v, _ = grown(threshold, quantum=16 * 1024)
    assert v.cause is Cause.BYTE_QUANTIZED
    assert v.size_bytes == pytest.approx(16 * 1024, rel=0.1)
    assert "whole" not in v.summary


def test_nginx_stock_4k_buffers_are_bursts_on_a_long_stream() -> None:
    v, _ = grown(threshold, quantum=4096)
    assert v.cause is Cause.BYTE_QUANTIZED
    assert v.size_bytes == pytest.approx(4096, rel=0.25)


def test_time_quantized_reports_the_period_and_what_it_usually_is() -> None:
    v, _ = grown(timer)
    assert v.cause is Cause.TIME_QUANTIZED
    assert v.period_ms == pytest.approx(200, abs=1)
    assert v.timer is not None
    assert "200-250 ms" in v.timer


def test_nagle_period() -> None:
    v, _ = grown(timer, hold=40.0)
    assert v.cause is Cause.TIME_QUANTIZED
    assert v.period_ms == pytest.approx(40, abs=1)
    assert v.timer is not None
    assert "Nagle" in v.timer


def test_byte_quantized_reports_the_size() -> None:
    v, _ = grown(threshold, quantum=300)
    assert v.cause is Cause.BYTE_QUANTIZED
    assert v.size_bytes == 300


def test_compression_without_a_flush_names_the_encoding_and_says_at_least() -> None:
    v, runs = grown(streaming, lambda name: whole(name, encoding="zstd"))
    assert v.cause is Cause.COMPRESSION_HOLD
    assert v.held
    assert v.encoding == "zstd"
    assert s.BROWSER_LONG in {r.name for r in runs}  # the compressed answer grew before it was named


def test_compression_that_holds_the_first_kib_is_named_not_unsure() -> None:
    """Traefik 3.3.2's compress: 720 B never reach its ~1 KiB; the series grows until they do."""
    v, _ = grown(streaming, lambda name: first_bytes(name, encoding="br"))
    assert v.cause is Cause.COMPRESSION_HOLD
    assert v.shape is Kind.FIRST_HELD
    assert v.size_bytes == pytest.approx(1024, rel=0.1)
    assert v.encoding == "br"


def test_compression_with_a_flush_streams() -> None:
    v, _ = grown(streaming, lambda name: streaming(name, encoding="gzip"))
    assert v.cause is Cause.STREAMS
    assert any("compressed (gzip) and flushed" in n for n in v.notes)


def test_first_bytes_held_in_every_run() -> None:
    v, _ = grown(first_bytes, until=600)
    assert v.cause is Cause.FIRST_HOLD
    assert v.held


def test_a_head_held_until_the_first_frame_with_no_token_late_streams_with_a_note() -> None:
    """nginx with an HTTP/1.1 upstream: a note, exit 0; never the fix that caused it again."""
    v, _ = grown(streaming, ttfb=s.TTFT_MS + 0.5)
    assert v.cause is Cause.STREAMS
    assert not v.held
    assert any("head waited for the first frame" in n for n in v.notes)


def test_head_sent_at_once_has_no_note() -> None:
    v, _ = grown(streaming, ttfb=2.0)
    assert v.cause is Cause.STREAMS
    assert not any("head" in n for n in v.notes)


def held_head_after_early_hints(name: str, **kw: object) -> RunFigures:
    """A path that answers `103 Early Hints` at once and holds the 200 until the first frame: TTFB is the 103's."""
    return dataclasses.replace(streaming(name, ttfb=1.0), head_ms=s.TTFT_MS + 0.5)


def test_a_head_held_behind_an_early_103_is_a_held_head() -> None:
    """The head rules read the final head's time, not the first byte's (a 1xx is not the head)."""
    v, _ = grown(held_head_after_early_hints)
    assert v.cause is Cause.STREAMS
    assert any("head waited for the first frame (it came at 150 ms" in n for n in v.notes), v.notes


def test_a_late_103_before_a_head_sent_at_once_is_no_held_head() -> None:
    v, _ = grown(lambda name, **kw: dataclasses.replace(streaming(name, ttfb=s.TTFT_MS + 0.5), head_ms=2.0))
    assert not any("head" in n for n in v.notes)


def test_unpaced_the_head_with_the_first_frame_is_read_from_the_final_head() -> None:
    at = [300.0 + 10 * k for k in range(8)]
    with_first = dataclasses.replace(unpaced([[k] for k in range(8)], at, [60] * 8), ttfb_ms=1.0, ttft_ms=300.0)
    assert not any("head came with the first frame" in n for n in classify([with_first]).notes)  # head unknown: TTFB
    held = dataclasses.replace(with_first, head_ms=299.5)
    assert any("head came with the first frame" in n for n in classify([held]).notes)
    assert not any("head came" in n for n in classify([dataclasses.replace(held, head_ms=1.0)]).notes)


# --- disagreeing signals: unsure ----------------------------------------------------------------------------------


def test_unsure_when_base_streams_but_another_run_holds() -> None:
    runs = [streaming(r.name) for r in s.plan(True)]
    runs[1] = timer(s.SLOW)
    v = classify(runs)
    assert v.cause is Cause.UNSURE
    assert not v.held


def test_unsure_when_the_browser_run_holds_without_compression() -> None:
    v, _ = grown(streaming, lambda name: whole(name, encoding="identity"))
    assert v.cause is Cause.UNSURE
    assert "without any compression" in v.summary


def test_unsure_with_too_few_frames() -> None:
    runs = [streaming(r.name) for r in s.plan(True)]
    runs[0] = run_of(s.BASE, [[0], [1]], [151, 201])
    assert classify(runs).cause is Cause.UNSURE


def test_held_identity_stays_the_cause_when_compressed_answers_are_held_too() -> None:
    v, _ = grown(whole)
    assert v.cause is Cause.WHOLE_RESPONSE
    assert any("compressed (gzip) answers are held too" in n for n in v.notes)


# --- without a paced stub (any endpoint) ----------------------------------------------------------------------------


def unpaced(groups: list[list[int]], at: list[float], sizes: list[int]) -> RunFigures:
    return RunFigures("base", sum(len(g) for g in groups), tuple(len(g) for g in groups), tuple(sizes), tuple(at))


def test_unpaced_streams_and_whole() -> None:
    assert classify([unpaced([[k] for k in range(8)], [10.0 * k for k in range(8)], [60] * 8)]).cause is Cause.STREAMS
    v = classify([unpaced([list(range(8))], [900.0], [480])])
    assert v.cause is Cause.WHOLE_RESPONSE
    assert v.at_least
    assert "holds at least 480 B" in v.summary


def test_unpaced_regular_gaps_and_varying_bytes_is_a_timer() -> None:
    groups = [[0, 1], [2, 3, 4], [5], [6, 7, 8, 9], [10, 11], [12]]
    v = classify([unpaced(groups, [200.0, 400.0, 601.0, 800.0, 1001.0, 1100.0], [120, 300, 60, 400, 150, 60])])
    assert v.cause is Cause.TIME_QUANTIZED
    assert v.period_ms == pytest.approx(200, abs=2)


def test_unpaced_regular_bytes_and_varying_gaps_is_a_threshold() -> None:
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12]]
    v = classify([unpaced(groups, [100.0, 180.0, 420.0, 500.0, 900.0], [300, 300, 300, 300, 60])])
    assert v.cause is Cause.BYTE_QUANTIZED
    assert v.size_bytes == 300


def test_unpaced_both_regular_says_one_pacing_cannot_tell_not_irregular() -> None:
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12]]
    v = classify([unpaced(groups, [200.0, 400.0, 600.0, 800.0, 900.0], [300, 300, 300, 300, 60])])
    assert v.cause is Cause.UNSURE
    assert "look alike" in v.summary
    assert "neither" not in v.summary


def test_unpaced_irregular_bursts_are_unsure() -> None:
    groups = [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9, 10], [11]]
    v = classify([unpaced(groups, [100.0, 180.0, 420.0, 500.0, 900.0], [100, 300, 120, 400, 60])])
    assert v.cause is Cause.UNSURE
    assert "neither" in v.summary


def test_classify_needs_the_base_run() -> None:
    with pytest.raises(ValueError, match="base"):
        classify([streaming(s.SLOW)])


@pytest.mark.parametrize(
    ("period", "word"), [(10, "short"), (40, "Nagle"), (100, "100 ms"), (200, "200-250"), (900, "long")]
)
def test_timer_kind(period: float, word: str) -> None:
    assert word in timer_kind(period)


def test_verdict_json_says_held() -> None:
    doc = grown(timer)[0].to_json()
    assert doc["cause"] == "time_quantized"
    assert doc["held"] is True
    assert doc["period_ms"] == pytest.approx(200, abs=1)


def test_a_check_is_asked_first_and_its_verdict_stands() -> None:
    """The hook another diagnose module names a cause through (classify.Check): asked before the rules."""
    runs = [streaming(r.name) for r in s.plan(True)]
    asked: list[int] = []

    def cut(found: object, evidence: tuple[str, ...]) -> Verdict | None:
        asked.append(len(evidence))
        return Verdict(Cause.UNSURE, "unsure: cut short", evidence)

    assert classify(runs, [lambda runs, ev: None, cut]).summary == "unsure: cut short"
    assert asked == [len(runs)]
    assert classify(runs, [lambda runs, ev: None]).cause is Cause.STREAMS


def test_least_held_keeps_one_repeat_of_each_run_the_one_a_busy_host_delayed_least() -> None:
    """Load only adds delay: of a run's repeats, streaming beats late beats whole, a shorter hold beats a longer
    one; a cut or too-short repeat is kept only when nothing better came. The names keep their first order."""
    late = streaming(s.SLOW, late=25.0)  # every frame 25 ms late: LATE, as a loaded client reads them
    cut = dataclasses.replace(streaming(s.BASE), end=StreamEnd(EndKind.CUT_SILENT, BodyEnd.CLOSE, 1, 1))
    short = run_of(s.LARGE, [[0]], [200.0])
    runs = [whole(s.BASE), late, cut, streaming(s.SLOW, late=3.0), streaming(s.SLOW, late=1.0), short]
    assert late.seen().kind is Kind.LATE
    kept = least_held(runs, lambda r: r)
    assert [r.name for r in kept] == [s.BASE, s.SLOW, s.LARGE]
    assert kept[0] is runs[0]  # the cut repeat streamed, but a cut is no better evidence than a whole stream
    assert kept[1] is runs[4]
    assert kept[2] is short  # nothing better came


# --- repeats: a hold in some of them ------------------------------------------------------------------------------


def passes(*models: Model, grown_by: Model = timer) -> list[RunFigures]:
    """The series measured once per model, in order (as measure.diagnose_series repeats it): every run name a
    steady `grown_by` series grows to, each pass's runs made by its model."""
    _, runs = grown(grown_by)
    return [model(r.name) for model in models for r in runs]


def loaded(name: str) -> RunFigures:
    """A streaming run a busy host hit once: frames 4-8 read together 30 ms after the last one's write (the client
    was off the CPU), every other frame alone and on time: a modest burst."""
    w = writes(name)
    groups = [[0], [1], [2], [3], [4, 5, 6, 7, 8], *[[k] for k in range(9, len(w))]]
    at = [w[0] + 1, w[1] + 1, w[2] + 1, w[3] + 1, w[8] + 30.0, *[w[k] + 1 for k in range(9, len(w))]]
    return run_of(name, groups, at)


def loaded_base(name: str) -> RunFigures:
    return loaded(name) if name == s.BASE else streaming(name)


def exit_code(verdict: Verdict, runs: list[RunFigures]) -> int:
    return diagnosis("http://127.0.0.1:9/v1", True, runs, verdict, []).exit_code


def test_repeats_that_all_stream_stream() -> None:
    runs = passes(streaming, streaming, streaming)
    assert not disagree(runs)
    assert intermittent(runs) is None
    assert classify(least_held(runs, lambda r: r)).cause is Cause.STREAMS


def test_repeats_that_all_hold_stay_the_steady_hold() -> None:
    runs = passes(timer, timer, timer)
    assert not disagree(runs)
    assert intermittent(runs) is None  # the run set agrees: the least-held runs tell, as with one pass
    steady = classify(least_held(runs, lambda r: r))
    assert steady.cause is Cause.TIME_QUANTIZED
    assert steady.held_runs is None


def test_one_held_repeat_of_three_with_a_modest_burst_is_a_busy_host_not_a_hold() -> None:
    runs = passes(loaded_base, streaming, streaming)
    assert loaded(s.BASE).seen().kind is Kind.BURSTS  # held, as one repeat: the outlier is read as a hold
    assert disagree(runs)  # measure.py measures again while this is so (bounded)
    assert intermittent(runs) is None
    assert classify(least_held(runs, lambda r: r)).cause is Cause.STREAMS


@pytest.mark.parametrize("order", [(timer, streaming, timer), (streaming, timer, timer), (timer, timer, streaming)])
def test_a_hold_in_two_of_three_repeats_is_named_intermittent_with_its_cause_and_exit_16(
    order: tuple[Model, Model, Model],
) -> None:
    runs = passes(*order)
    assert classify(least_held(runs, lambda r: r)).cause is Cause.STREAMS  # what the least-held rule alone said
    verdict = intermittent(runs)
    assert verdict is not None
    assert verdict.cause is Cause.TIME_QUANTIZED
    assert verdict.held
    assert verdict.summary.startswith("intermittent: holds in 2 of 3 runs (base); holds frames on a timer")
    assert verdict.held_runs == (2, 3)
    assert verdict.to_json()["intermittent"] == {"held_runs": 2, "runs": 3}
    assert verdict.period_ms == pytest.approx(200.0, abs=20)
    assert generic_fix(verdict) is not None  # the fix line, as for a steady hold
    assert exit_code(verdict, most_held(runs, lambda r: r)) == 16
    assert any("base 2 of 3" in line for line in verdict.evidence)


def test_a_path_that_buffers_only_sometimes_is_an_intermittent_whole_response_hold() -> None:
    runs = passes(whole, streaming, whole, grown_by=whole)
    verdict = intermittent(runs)
    assert verdict is not None
    assert verdict.cause is Cause.WHOLE_RESPONSE
    assert "holds in 2 of 3 runs" in verdict.summary
    assert exit_code(verdict, runs) == 16


def test_an_intermittent_hold_in_one_run_name_only_names_its_cause_from_that_run() -> None:
    """base held in 2 of 3 repeats, every other run always streamed (no proof against it): base's held repeat
    alone names the cause, or, where one run cannot tell a rule, the answer is unsure naming the share (exit 17)."""

    def base_whole(name: str) -> RunFigures:
        return whole(name) if name == s.BASE else streaming(name)

    runs = passes(base_whole, streaming, base_whole)
    verdict = intermittent(runs)
    assert verdict is not None
    assert verdict.cause is Cause.WHOLE_RESPONSE
    assert verdict.at_least
    assert verdict.summary.startswith("intermittent: holds in 2 of 3 runs (base); holds at least")

    def base_timer(name: str) -> RunFigures:
        return timer(name) if name == s.BASE else streaming(name)

    unsure = intermittent(passes(base_timer, streaming, base_timer))
    assert unsure is not None
    assert unsure.cause is Cause.UNSURE
    assert unsure.summary.startswith("unsure: holds in 2 of 3 runs (base)")


def test_most_held_keeps_the_most_held_uncut_repeat_of_each_run() -> None:
    cut = dataclasses.replace(whole(s.BASE), end=StreamEnd(EndKind.CUT_SILENT, BodyEnd.CLOSE, 1, 1))
    short = run_of(s.SLOW, [[0]], [200.0])
    runs = [streaming(s.BASE), cut, timer(s.BASE), short, streaming(s.SLOW)]
    kept = most_held(runs, lambda r: r)
    assert [r.name for r in kept] == [s.BASE, s.SLOW]
    assert kept[0] is runs[2]  # bursts beat streaming; a cut stream is its own finding, not a hold
    assert kept[1] is runs[4]  # a too-short repeat shows no shape


def test_one_held_repeat_of_two_is_not_yet_a_share() -> None:
    """Half the repeats, but one stream: measure.py measures again before it counts (CLEAR_HELD)."""
    runs = passes(timer, streaming)
    assert disagree(runs)
    assert intermittent(runs) is None


def test_two_held_repeats_of_five_are_not_a_clear_share() -> None:
    """Twice, but under half the repeats (CLEAR_SHARE): a host loaded twice is no share a user feels as a path's."""
    runs = passes(timer, streaming, streaming, timer, streaming)
    assert intermittent(runs) is None
    assert intermittent(passes(timer, streaming, streaming, timer, timer)) is not None  # 3 of 5


def test_every_frame_late_in_two_of_three_repeats_is_not_counted_as_a_hold() -> None:
    """Each frame alone but 25 ms late is what a busy host makes of a streaming path: not an intermittent hold."""

    def base_late(name: str) -> RunFigures:
        return streaming(name, late=25.0) if name == s.BASE else streaming(name)

    assert base_late(s.BASE).seen().kind is Kind.LATE
    runs = passes(base_late, streaming, base_late)
    assert not disagree(runs)
    assert intermittent(runs) is None


def test_a_stream_held_whole_is_never_a_busy_hosts_outlier() -> None:
    """A path that buffers every third stream: each run held whole in one repeat of three. A busy host delays a
    stream by tens of ms; a whole response held past HOST_DELAY_MS (base: its 550 ms span) is the path's, and the
    series' count of held streams is said."""
    _, runs = grown(timer)
    names = [r.name for r in runs]
    series = [
        (whole if (p * len(names) + k) % 3 == 2 else streaming)(name) for p in range(3) for k, name in enumerate(names)
    ]
    counted = shares(series)
    assert all(sh.held <= 1 for sh in counted)  # no run's own share is clear: each was 1 of 3 (or 0)
    verdict = intermittent(series)
    assert verdict is not None
    assert verdict.cause is Cause.WHOLE_RESPONSE
    held = sum(sh.held for sh in counted)
    assert verdict.summary.startswith(f"intermittent: holds in {held} of {len(series)} streams ({held} of them whole")
    assert verdict.held_runs == (held, len(series))
    assert exit_code(verdict, most_held(series, lambda r: r)) == 16
    # a modest burst in one repeat is still a busy host's (the rule above it stays)
    assert intermittent(passes(loaded_base, streaming, streaming)) is None


def test_holds_are_counted_across_the_series() -> None:
    """No run held in a clear share of its own repeats, yet half the series' streams were held, one run twice:
    a path that holds some streams, whichever run they fall on."""
    base = [timer(s.BASE), streaming(s.BASE), streaming(s.BASE), timer(s.BASE), streaming(s.BASE)]  # 2 of 5
    large = [timer(s.LARGE), streaming(s.LARGE)]  # 1 of 2
    slow = [timer(s.SLOW)]  # 1 of 1 (grown late, measured once)
    runs = [*base, *large, *slow]
    assert not any(sh.clear for sh in shares(runs))
    verdict = intermittent(runs)
    assert verdict is not None
    assert verdict.held
    assert verdict.summary.startswith("intermittent: holds in 4 of 8 streams (base 2 of 5, large 1 of 2, slow 1 of 1)")
    assert intermittent(passes(timer, streaming)) is None  # one pass held, one not: measured again before it counts
