"""classify() over synthetic figures: each cause from the runs that show it, and "unsure" wherever the runs
disagree. The figures are made by small models of each behaviour on the series' own schedule (series.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tokenpath.diagnose import classify as c
from tokenpath.diagnose.classify import Cause, RunFigures, Shape, classify, shape, timer_kind
from tokenpath.diagnose.series import FRAMES, LARGE_BYTES, LONG_MS, SHORT_MS, SMALL_BYTES, TTFT_MS

BROWSER = "gzip, deflate, br, zstd"
Release = Callable[[list[float], int], list[list[int]]]  # write times, frame size -> frame indexes per arrival


def writes(interval: float, n: int = FRAMES, ttft: float = TTFT_MS) -> list[float]:
    return [ttft + k * interval for k in range(n)]


def run_of(
    name: str,
    groups: list[list[int]],
    at: list[float],
    interval: float | None,
    size: int,
    *,
    ttfb: float | None = 1.0,
    accept: str | None = None,
    encoding: str = "identity",
    paced: bool = True,
) -> RunFigures:
    """Figures of a run whose frames (indexes) arrived in `groups` at the times `at`."""
    frames = sum(len(g) for g in groups)
    return RunFigures(
        name=name,
        frames=frames,
        bursts=tuple(len(g) for g in groups),
        burst_bytes=tuple(len(g) * size for g in groups),
        arrivals_ms=tuple(at),
        ttfb_ms=ttfb,
        ttft_ms=at[0] if at else None,
        accept_encoding=accept,
        content_encoding=encoding,
        interval_ms=interval if paced else None,
        frame_bytes=size if paced else None,
        stub_ttft_ms=TTFT_MS if paced else None,
    )


def streaming(name: str, interval: float, size: int, late: float = 0.5, **kw: object) -> RunFigures:
    w = writes(interval)
    return run_of(name, [[k] for k in range(len(w))], [t + late for t in w], interval, size, **kw)  # type: ignore[arg-type]


def whole(name: str, interval: float, size: int, **kw: object) -> RunFigures:
    w = writes(interval)
    return run_of(name, [list(range(len(w)))], [w[-1] + 1], interval, size, **kw)  # type: ignore[arg-type]


def timer(name: str, interval: float, size: int, hold: float = 200.0, **kw: object) -> RunFigures:
    """A cork timer started by the first held frame: everything written before it fires goes with it."""
    w = writes(interval)
    groups: list[list[int]] = []
    at: list[float] = []
    k = 0
    while k < len(w):
        fire = w[k] + hold
        group = [j for j in range(k, len(w)) if w[j] <= fire]
        groups.append(group)
        at.append(fire if group[-1] < len(w) - 1 else w[-1] + 1)
        k = group[-1] + 1
    return run_of(name, groups, at, interval, size, **kw)  # type: ignore[arg-type]


def threshold(name: str, interval: float, size: int, quantum: int = 300, **kw: object) -> RunFigures:
    """A byte threshold: frames go once `quantum` bytes are held (the last ones at the end of the response)."""
    w = writes(interval)
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
    return run_of(name, groups, at, interval, size, **kw)  # type: ignore[arg-type]


def first_held(name: str, interval: float, size: int, until: float = 400.0, **kw: object) -> RunFigures:
    """The first event is held until `until`, then everything streams."""
    w = writes(interval)
    first = [k for k in range(len(w)) if w[k] <= until]
    groups = [first, *[[k] for k in range(len(first), len(w))]]
    at = [until, *[w[k] + 0.5 for k in range(len(first), len(w))]]
    return run_of(name, groups, at, interval, size, **kw)  # type: ignore[arg-type]


Model = Callable[..., RunFigures]


def series(model: Model, browser: Model | None = None, **kw: object) -> list[RunFigures]:
    """The paced series (series.plan(True)) where every run follows `model`; the browser run `browser`."""
    b = browser or model
    return [
        model("base", SHORT_MS, SMALL_BYTES, **kw),
        model("slow", LONG_MS, SMALL_BYTES, **kw),
        model("large", SHORT_MS, LARGE_BYTES, **kw),
        b("browser", SHORT_MS, SMALL_BYTES, accept=BROWSER, **({"encoding": "gzip"} if browser else {})),
    ]


# --- shapes -------------------------------------------------------------------------------------------------------


def test_shapes_of_the_models() -> None:
    assert shape(streaming("base", SHORT_MS, 60)) is Shape.STREAMS
    assert shape(whole("base", SHORT_MS, 60)) is Shape.WHOLE
    assert shape(timer("base", SHORT_MS, 60)) is Shape.HELD
    assert shape(threshold("base", SHORT_MS, 60)) is Shape.HELD
    assert shape(first_held("base", SHORT_MS, 60)) is Shape.FIRST_EVENT
    assert shape(run_of("base", [[0], [1]], [151, 201], SHORT_MS, 60)) is Shape.TOO_SHORT


def test_every_frame_alone_but_late_is_held_not_streaming() -> None:
    """fpr 1.00 is not enough: a timer shorter than the interval delivers each frame alone, each one late."""
    late = streaming("base", LONG_MS, 60, late=40.0)
    assert late.fpr == 1.0
    assert shape(late) is Shape.HELD


def test_a_first_frame_late_but_alone_is_a_hiccup_not_a_hold_back() -> None:
    run = streaming("base", SHORT_MS, 60)
    late_first = run_of("base", [[k] for k in range(FRAMES)], [TTFT_MS + 30.0, *run.arrivals_ms[1:]], SHORT_MS, 60)
    assert shape(late_first) is Shape.STREAMS
    held_with_next = run_of("base", [[0, 1], *[[k] for k in range(2, FRAMES)]], [TTFT_MS + 60.0, *run.arrivals_ms[2:]],
                            SHORT_MS, 60)  # fmt: skip
    assert shape(held_with_next) is Shape.FIRST_EVENT


def test_arrivals_are_counted_per_read_not_per_frame() -> None:
    """Five frames in one read are one arrival: fpr from bursts, so a flip to per-frame counting would stream."""
    run = timer("base", SHORT_MS, 60)
    assert run.fpr is not None
    assert run.fpr > c.STREAM_FPR


# --- causes -------------------------------------------------------------------------------------------------------


def test_streams() -> None:
    v = classify(series(streaming))
    assert v.cause is Cause.STREAMS
    assert not v.held
    assert any("did not compress" in n for n in v.notes)


def test_whole_response() -> None:
    v = classify(series(whole))
    assert v.cause is Cause.WHOLE_RESPONSE
    assert v.held


def test_whole_response_names_the_buffer_size_large_frames_show() -> None:
    """nginx: 60 B frames all at the end, 1.2 KB frames in ~4 KB bursts."""
    runs = series(whole)
    runs[2] = threshold("large", SHORT_MS, LARGE_BYTES, quantum=4096)
    v = classify(runs)
    assert v.cause is Cause.WHOLE_RESPONSE
    assert any("4800 B" in n for n in v.notes), v.notes


def test_time_quantized_reports_the_period_and_what_it_usually_is() -> None:
    v = classify(series(timer))
    assert v.cause is Cause.TIME_QUANTIZED
    assert v.period_ms == pytest.approx(200, abs=1)
    assert v.timer is not None
    assert "200-250 ms" in v.timer


def test_nagle_period() -> None:
    v = classify(series(timer, hold=40.0))
    assert v.cause is Cause.TIME_QUANTIZED
    assert v.period_ms == pytest.approx(40, abs=1)
    assert v.timer is not None
    assert "Nagle" in v.timer


def test_byte_quantized_reports_the_size() -> None:
    v = classify(series(threshold, quantum=300))
    assert v.cause is Cause.BYTE_QUANTIZED
    assert v.size_bytes == 300
    assert any("below 1200 B" in n for n in v.notes)  # the large frames passed one by one


def test_compression_without_flush_names_the_encoding() -> None:
    v = classify(series(streaming, browser=whole))
    assert v.cause is Cause.COMPRESSION_HOLD
    assert v.held
    assert v.encoding == "gzip"


def test_compression_with_a_flush_streams() -> None:
    v = classify(series(streaming, browser=streaming))
    assert v.cause is Cause.STREAMS
    assert any("compressed (gzip) and flushed" in n for n in v.notes)


def test_first_event_hold_back() -> None:
    v = classify(series(first_held))
    assert v.cause is Cause.FIRST_EVENT_HOLD
    assert v.held


def test_head_held_until_the_first_frame() -> None:
    v = classify(series(streaming, ttfb=TTFT_MS + 0.5))
    assert v.cause is Cause.HEAD_HELD
    assert v.held


def test_head_sent_at_once_is_not_held() -> None:
    assert classify(series(streaming, ttfb=2.0)).cause is Cause.STREAMS


# --- disagreeing signals: unsure ----------------------------------------------------------------------------------


def test_unsure_when_base_streams_but_another_run_holds() -> None:
    runs = series(streaming)
    runs[1] = timer("slow", LONG_MS, SMALL_BYTES)
    v = classify(runs)
    assert v.cause is Cause.UNSURE
    assert not v.held
    assert "slow held" in v.summary


def test_unsure_when_short_interval_is_whole_but_long_one_streams() -> None:
    runs = series(whole)
    runs[1] = streaming("slow", LONG_MS, SMALL_BYTES)
    assert classify(runs).cause is Cause.UNSURE


def test_unsure_when_neither_hold_nor_bytes_are_kept_across_intervals() -> None:
    """A timer at the short interval and a byte threshold at the long one: no one rule explains both."""
    runs = series(timer)
    runs[1] = threshold("slow", LONG_MS, SMALL_BYTES, quantum=600)
    v = classify(runs)
    assert v.cause is Cause.UNSURE
    assert "neither" in v.summary


def test_unsure_when_both_hold_and_bytes_are_kept() -> None:
    """The long interval's bursts have the short one's bytes and its holds: a timer and a threshold fit alike."""
    runs = series(timer)
    base = runs[0]
    groups, firsts = [], 0
    for burst in base.bursts:
        groups.append(list(range(firsts, firsts + burst)))
        firsts += burst
    at = [TTFT_MS + g[0] * LONG_MS + h for g, h in zip(groups, base.holds_ms(), strict=True)]
    runs[1] = run_of("slow", groups, at, LONG_MS, SMALL_BYTES)
    v = classify(runs)
    assert v.cause is Cause.UNSURE
    assert "both" in v.summary


def test_unsure_when_bursts_at_the_short_interval_but_the_long_one_streams() -> None:
    runs = series(timer)
    runs[1] = streaming("slow", LONG_MS, SMALL_BYTES)
    assert classify(runs).cause is Cause.UNSURE


def test_unsure_when_the_browser_run_holds_without_compression() -> None:
    runs = series(streaming)
    runs[3] = whole("browser", SHORT_MS, SMALL_BYTES, accept=BROWSER)
    v = classify(runs)
    assert v.cause is Cause.UNSURE
    assert "without any compression" in v.summary


def test_unsure_with_too_few_frames() -> None:
    runs = series(streaming)
    runs[0] = run_of("base", [[0], [1]], [151, 201], SHORT_MS, 60)
    assert classify(runs).cause is Cause.UNSURE


def test_held_identity_stays_the_cause_when_compressed_answers_are_held_too() -> None:
    v = classify(series(whole, browser=whole))
    assert v.cause is Cause.WHOLE_RESPONSE
    assert any("compressed (gzip) answers are held too" in n for n in v.notes)


# --- without a paced stub (any endpoint) ----------------------------------------------------------------------------


def unpaced(groups: list[list[int]], at: list[float], sizes: list[int]) -> RunFigures:
    return RunFigures("base", sum(len(g) for g in groups), tuple(len(g) for g in groups), tuple(sizes), tuple(at))


def test_unpaced_streams_and_whole() -> None:
    assert classify([unpaced([[k] for k in range(8)], [10.0 * k for k in range(8)], [60] * 8)]).cause is Cause.STREAMS
    assert classify([unpaced([list(range(8))], [900.0], [480])]).cause is Cause.WHOLE_RESPONSE


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


def test_unpaced_irregular_bursts_are_unsure() -> None:
    groups = [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9, 10], [11]]
    v = classify([unpaced(groups, [100.0, 180.0, 420.0, 500.0, 900.0], [100, 300, 120, 400, 60])])
    assert v.cause is Cause.UNSURE


def test_classify_needs_the_base_run() -> None:
    with pytest.raises(ValueError, match="base"):
        classify([streaming("slow", LONG_MS, 60)])


@pytest.mark.parametrize(
    ("period", "word"), [(10, "short"), (40, "Nagle"), (100, "100 ms"), (200, "200-250"), (900, "long")]
)
def test_timer_kind(period: float, word: str) -> None:
    assert word in timer_kind(period)


def test_verdict_json_says_held() -> None:
    doc = classify(series(timer)).to_json()
    assert doc["cause"] == "time_quantized"
    assert doc["held"] is True
    assert doc["period_ms"] == pytest.approx(200, abs=1)
