"""Rows, floors and verdicts from synthetic runs whose figures are known exactly."""

from __future__ import annotations

from tokenpath.audit import AuditVerdict
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.rows import Evidence, Floor, build_row, ttft_evidence, undecided
from tokenpath.experiment.spec import Condition, PathSpec
from tokenpath.probe.metrics import RunMetrics
from tokenpath.report.tables import seen_as
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd

COND = Condition(50.0, 60, "loopback", False)


def record(fpr: float, added: float, frames: int = 40, passed: bool = True, burst: int = 1) -> RunRecord:
    arrivals = int(frames / fpr)
    metrics = RunMetrics("s", 200, frames, arrivals, fpr, 0.3, 20 + added, {}, {burst: arrivals}, 2000.0)
    audit = AuditVerdict("s", "complete", frames, 10.0, 0.0, 0.0, 0.0, 0, passed)
    r = RunRecord("p", "s", metrics=metrics, path_added_ttft_ms=added, audit=audit)
    r.arrivals = [(i * 50.0 * burst, burst) for i in range(arrivals)]
    return r


def test_direct_floor_and_a_streaming_path_within_it() -> None:
    direct = [record(1.0, 0.10), record(1.0, 0.12), record(1.02, 0.11)]
    floor = Floor.from_direct(direct)
    assert floor is not None
    assert floor.fpr == 1.02
    row = build_row(PathSpec("nginx", "http_1_1"), COND, [record(1.0, 0.2)] * 3, floor)
    assert row.within_floor is True
    assert row.verdict.startswith("streams")
    assert row.added_ttft_ms_median == 0.2 - 0.11


def test_coalescing_path_gets_bursts_and_late_first_token() -> None:
    floor = Floor.from_direct([record(1.0, 0.1)])
    row = build_row(PathSpec("haproxy"), COND, [record(5.0, 200.0, burst=5)] * 3, floor)
    assert row.within_floor is False
    assert row.modal_burst == 5
    assert row.modal_burst_gap_ms == 250.0
    assert row.verdict == "coalesces: bursts of 5, first token +200 ms"


def test_buffering_path() -> None:
    floor = Floor.from_direct([record(1.0, 0.1)])
    row = build_row(PathSpec("buffer"), COND, [record(40.0, 1950.0, burst=40)] * 2, floor)
    assert row.verdict.startswith("buffers the whole response")


def test_exclusions_are_counted_and_kept_out_of_the_figures() -> None:
    floor = Floor.from_direct([record(1.0, 0.1)])
    runs = [record(1.0, 0.1), record(9.0, 500.0, passed=False), RunRecord("p", "x", error="connection reset")]
    row = build_row(PathSpec("nginx"), COND, runs, floor)
    assert (row.runs, row.excluded) == (3, 2)
    assert row.exclusions == {"stub audit failed": 1, "probe failed": 1}
    assert row.fpr_median == 1.0
    assert [r.included for r in row.raw] == [True, False, False]


def test_no_valid_runs() -> None:
    row = build_row(PathSpec("nginx"), COND, [RunRecord("p", "x", error="refused")], None)
    assert row.verdict == "no valid runs"
    assert row.fpr_median is None


ENDPOINT_COND = Condition(0.0, 0, "loopback", False, endpoint="endpoint https://api.example.com")


def endpoint_record(fpr: float, ttft: float, vs_direct: float | None, error: str | None = None) -> RunRecord:
    metrics = None if error else RunMetrics("s", 200, 40, int(40 / fpr), fpr, ttft, ttft, {}, {}, 2000.0)
    return RunRecord("p", "s", metrics=metrics, path_added_ttft_ms=vs_direct, error=error, audited=False)


def test_against_an_endpoint_runs_are_kept_without_an_audit_and_the_floor_is_directs_own_spread() -> None:
    direct = [endpoint_record(1.0, t, 0.0) for t in (300.0, 320.0, 310.0, 400.0)]
    assert all(r.included for r in direct)  # no audit exists; only a failed probe excludes
    floor = Floor.from_direct_endpoint(direct)
    assert floor is not None
    assert floor.added_ttft_ms == 0.0
    assert floor.ttft_spread_ms == 400.0 - 300.0  # the range of the endpoint's own TTFT: its noise
    within = build_row(PathSpec("nginx"), ENDPOINT_COND, [endpoint_record(1.0, 330, 20.0)] * 3, floor)
    assert within.within_floor is True
    assert within.condition.endpoint == "endpoint https://api.example.com"
    held = [endpoint_record(6.0, 900, 580.0), endpoint_record(6.0, 910, 600.0), endpoint_record(1, 0, None, "boom")]
    row = build_row(PathSpec("haproxy"), ENDPOINT_COND, held, floor)
    assert (row.runs, row.excluded, row.exclusions) == (3, 1, {"probe failed": 1})
    assert row.added_ttft_ms_median == 590.0  # the same-round differences, not a stub write
    assert row.within_floor is False
    assert row.verdict.startswith("coalesces")


def test_an_endpoint_row_a_few_ms_over_a_three_run_floor_is_not_called_late() -> None:
    """Issue 21: three direct streams of 300, 303 and 303 ms made a floor of 0.0 (p90 - p50 is max - median), and
    a path +2-3 ms in the same rounds was "streams, but late". Direct's own TTFT varied by 3 ms: that is the noise."""
    direct = [endpoint_record(1.0, t, 0.0) for t in (300.0, 303.0, 303.0)]
    floor = Floor.from_direct_endpoint(direct)
    assert floor is not None
    assert floor.ttft_spread_ms == 3.0
    row = build_row(PathSpec("nginx"), ENDPOINT_COND, [endpoint_record(1.0, 305, d) for d in (2.0, 2.5, 3.0)], floor)
    assert row.within_floor is True
    assert row.verdict == "streams (within the direct floor)"
    late = build_row(PathSpec("nginx"), ENDPOINT_COND, [endpoint_record(1.0, 350, d) for d in (40, 45, 50)], floor)
    assert late.within_floor is False
    assert late.verdict == "streams, but late, first token +45 ms"


def test_a_late_median_whose_runs_overlap_the_floor_is_not_distinguishable() -> None:
    """As `report --compare` decides: a difference counts only where the ranges do not overlap. The median is
    beyond the floor's spread, but the fastest run is inside it."""
    floor = Floor.from_direct([record(1.0, 0.1), record(1.0, 0.1), record(1.0, 0.1)])
    assert floor is not None
    assert floor.ttft_spread_ms == 0.0
    row = build_row(PathSpec("nginx"), COND, [record(1.0, 0.5), record(1.0, 2.6), record(1.0, 3.1)], floor)
    assert row.within_floor is True
    assert row.verdict.startswith("streams (not distinguishable from the direct floor: first token +2 ms")
    late = build_row(PathSpec("nginx"), COND, [record(1.0, 2.5), record(1.0, 2.6), record(1.0, 3.1)], floor)
    assert late.within_floor is False
    assert late.verdict == "streams, but late, first token +2 ms"


def test_a_held_start_then_streaming_is_named_as_diagnose_names_it() -> None:
    """Issue 35: Traefik 3.3.2's compress, the first 17 frames held to +852 ms, then each alone: not "bursts of 1"
    (diagnose/shape.py, one classifier for the matrix and diagnose)."""
    floor = Floor.from_direct([record(1.0, 0.1)])
    held = record(60 / 44, 852.0, frames=60)
    held.writes_ms = [50.0 * k for k in range(60)]
    held.arrivals = [(852.0, 17), *((50.0 * k + 0.5, 1) for k in range(17, 60))]
    row = build_row(PathSpec("traefik", "compress"), COND, [held] * 3, floor)
    assert row.verdict == "holds the first 1020 B, then streams, first token +852 ms"


def cut(r: RunRecord, kind: EndKind) -> RunRecord:
    r.end = StreamEnd(kind, BodyEnd.CLOSE if kind is EndKind.CUT_SILENT else BodyEnd.RESET, 61_000_000, 60_000_000)
    return r


def test_a_cut_run_is_excluded_by_its_kind_and_counted_never_averaged() -> None:
    floor = Floor.from_direct([record(1.0, 0.1), cut(record(9.0, 0.0), EndKind.CUT_SILENT)])
    assert floor is not None
    assert floor.fpr == 1.0  # the direct run that was cut is no part of the floor
    whole = record(1.0, 0.2)
    whole.end = StreamEnd(EndKind.COMPLETE, BodyEnd.CHUNKED, 2_000_000, 0)
    # A silent cut passes the stub's audit (the stub wrote everything; the path dropped the end): still excluded.
    runs = [whole, cut(record(3.0, 900.0), EndKind.CUT_SILENT), cut(record(1.0, 0.2), EndKind.CUT_ERROR)]
    row = build_row(PathSpec("nginx"), COND, runs, floor)
    assert (row.runs, row.excluded) == (3, 2)
    assert row.exclusions == {"cut_silent": 1, "cut_error": 1}
    assert row.ends == {"complete": 1, "cut_silent": 1, "cut_error": 1}
    assert row.fpr_median == 1.0
    assert row.added_ttft_ms_median == 0.2 - 0.1  # the cut run's 900 ms never averaged in
    assert [r.included for r in row.raw] == [True, False, False]
    assert row.raw[1].end == runs[1].end
    assert row.raw[1].excluded_because is not None
    assert row.raw[1].excluded_because.startswith("cut_silent: cut_silent (close)")


def _ws_record(fallback_ms: float | None, fell_back: bool = True, upgraded: bool = False) -> RunRecord:
    from dataclasses import replace

    from tokenpath.probe.wsfigures import WsFigures

    r = record(1.0, 0.2)
    assert r.metrics is not None
    ws = WsFigures(upgraded, 101 if upgraded else 405, 0.8, attempts=3, fell_back=fell_back, fallback_ms=fallback_ms)
    r.metrics = replace(r.metrics, ws=ws)
    return r


def test_a_websocket_row_the_path_did_not_carry_says_what_the_fallback_cost() -> None:
    """Every run refused and fell back to SSE (probe/wsfallback.py): the row is "not carried", with the median cost
    from the first upgrade to the first content event; the runs stay out of the figures (they were SSE streams)."""
    floor = Floor.from_direct([record(1.0, 0.1)])
    ws_cond = Condition(50.0, 60, "loopback", False, transport="websocket")
    row = build_row(PathSpec("nginx"), ws_cond, [_ws_record(900.0), _ws_record(1000.0), _ws_record(5000.0)], floor)
    assert row.fallback_ms_median == 1000.0
    assert row.verdict == "WebSocket not carried: SSE after 3 upgrades, 1,000 ms to the first token"
    assert (row.runs, row.excluded) == (3, 3)
    assert row.exclusions == {"WebSocket upgrade not carried": 3}
    assert row.to_json()["fallback_ms_median"] == 1000.0
    no_policy = build_row(PathSpec("nginx"), ws_cond, [_ws_record(None, fell_back=False)] * 2, floor)
    assert no_policy.verdict == "WebSocket not carried"
    assert no_policy.fallback_ms_median is None
    carried = build_row(PathSpec("nginx", "websocket"), ws_cond, [_ws_record(None, False, upgraded=True)] * 2, floor)
    assert carried.fallback_ms_median is None
    assert carried.excluded == 0
    from tokenpath.report.tables import ROW_KEYS, varying_columns

    columns = dict(varying_columns([row, carried]))
    header = "WebSocket fallback ms (first upgrade -> first token over SSE)"
    assert columns[header](row) == "1000.0"
    assert columns[header](carried) == "-"
    assert header not in dict(varying_columns([carried]))  # shown only where a fallback ran
    assert "fallback_ms_median" in ROW_KEYS  # and in the CSV


# Figures measured with two CPU burners beside the known-facts matrix (tests/e2e/test_matrix.py): a streaming
# path's added TTFT on a loaded 2-core host is ~0.2 ms in a quiet moment and 6-14 ms in a loaded one.
QUIET_DIRECT = (0.16, 0.2, 0.21)
LOADED_PATH = (6.42, 11.21, 13.95)


def test_a_streaming_path_hit_by_load_in_every_round_is_never_called_late() -> None:
    """The defect: direct's three runs fell in quiet moments, the proxy's three in loaded ones (it has one more
    process to be scheduled), and the row read "streams, but late". The path's own spread (median over fastest,
    4.8 ms) is larger than its fastest run's distance past the floor: the rounds cannot tell load from a delay."""
    floor = Floor.from_direct([record(1.0, a) for a in QUIET_DIRECT])
    assert floor is not None
    row = build_row(PathSpec("nginx", "proxy_buffering_off"), COND, [record(1.0, a) for a in LOADED_PATH], floor)
    assert row.within_floor is None  # undecided: the runner measures more rounds (runner.MAX_EXTRA_ROUNDS)
    assert undecided(row, floor)
    assert "not told apart from the direct floor" in row.verdict
    assert "late" not in row.verdict


def test_the_host_moving_the_direct_path_widens_what_a_path_must_exceed() -> None:
    """Direct's own runs 0.2 and 7.5 ms apart (one round loaded): a path +9.5 ms in every round, 1 ms past the
    floor's noise, is within what the host did to a stream with no proxy in it: undecided, never late. On a quiet
    host the same path is late."""
    loaded = Floor.from_direct([record(1.0, a) for a in (0.2, 0.2, 7.5)])
    quiet = Floor.from_direct([record(1.0, a) for a in (0.2, 0.2, 0.25)])
    assert loaded is not None
    assert quiet is not None
    assert abs(loaded.ttft_range_ms - 7.3) < 1e-9
    runs = [record(1.0, a) for a in (9.5, 9.6, 9.8)]
    assert ttft_evidence([a - loaded.added_ttft_ms for a in (9.5, 9.6, 9.8)], loaded) is Evidence.AMBIGUOUS
    assert build_row(PathSpec("nginx"), COND, runs, loaded).within_floor is None
    late = build_row(PathSpec("nginx"), COND, runs, quiet)
    assert late.within_floor is False
    assert late.verdict.startswith("streams, but late")


def test_a_real_delay_is_beyond_however_loaded_one_of_its_rounds() -> None:
    """A path that adds 40 ms adds it to every run, its fastest too: one loaded round (+15 ms more) widens its
    spread, not enough to hide the delay. The rule's three answers on injected figures."""
    floor = Floor.from_direct([record(1.0, a) for a in (0.2, 0.2, 0.3)])
    assert floor is not None
    assert ttft_evidence([40.0, 40.5, 55.0], floor) is Evidence.BEYOND
    assert ttft_evidence([0.9, 6.0, 12.0], floor) is Evidence.WITHIN  # a fastest run inside the noise
    assert ttft_evidence([3.0, 9.0, 12.0], floor) is Evidence.AMBIGUOUS  # 3 ms past it, its runs 6 ms apart
    assert ttft_evidence([3.0, 3.2, 12.0], floor) is Evidence.BEYOND  # two runs agree: the third was the load


def test_an_undecided_row_is_never_shown_as_late() -> None:
    floor = Floor.from_direct([record(1.0, a) for a in QUIET_DIRECT])
    row = build_row(PathSpec("nginx", "proxy_buffering_off"), COND, [record(1.0, a) for a in LOADED_PATH], floor)
    assert seen_as(row) == "streams, TTFT undecided"


def delayed(added: float, host_delay: float) -> RunRecord:
    """A streaming run in which the stub's own timers were up to `host_delay` ms late (its write log's drift)."""
    r = record(1.0, added)
    r.drift_ms = [0.05, host_delay, 0.1]
    return r


def test_a_run_is_judged_net_of_the_delay_the_host_gave_the_stub_in_it() -> None:
    """CI's failure (timed lane, three matrices on two cores): HAProxy over TLS, which streams, read "late" because
    both its runs were hit by 1-3 ms of scheduling delay (one more process to wake) while direct's were not. The
    stub's timers were as late in the same runs: that much is the host's."""
    floor = Floor.from_direct([delayed(0.14, 0.1), delayed(0.20, 0.1)])
    assert floor is not None
    runs = [delayed(2.6, 2.5), delayed(3.1, 3.0)]
    row = build_row(PathSpec("haproxy"), COND, runs, floor)
    assert row.within_floor is True
    assert row.added_ttft_ms_median is not None
    assert row.added_ttft_ms_median > 2.0  # the figures stay as measured
    assert "net of the host's delay in it" in row.verdict
    # Judged on the raw figures (the rule ignored) the same runs read late:
    raw = sorted(r.path_added_ttft_ms - floor.added_ttft_ms for r in runs if r.path_added_ttft_ms is not None)
    assert ttft_evidence(raw, floor) is Evidence.BEYOND


def test_a_real_delay_stays_late_however_late_the_stubs_timers_were() -> None:
    floor = Floor.from_direct([delayed(0.14, 0.1), delayed(0.20, 0.1), delayed(0.18, 0.1)])
    assert floor is not None
    row = build_row(PathSpec("haproxy"), COND, [delayed(40.0, 3.0), delayed(41.0, 2.0), delayed(40.5, 4.0)], floor)
    assert row.within_floor is False
    assert row.verdict.startswith("streams, but late, first token +40 ms")


def test_a_direct_round_the_host_slowed_does_not_widen_the_floor_for_every_round() -> None:
    """The floor's range was max - min of direct's raw runs, so one loaded direct round (7.5 ms, the stub's timers
    7.3 ms late in it) left a path 9 ms late undecided for the whole condition. Net of each run's host delay the
    range is direct's own."""
    slowed = Floor.from_direct([delayed(0.2, 0.05), delayed(0.2, 0.05), delayed(7.5, 7.3)])
    assert slowed is not None
    assert slowed.ttft_range_ms < 0.2
    row = build_row(PathSpec("nginx"), COND, [record(1.0, a) for a in (9.5, 9.6, 9.8)], slowed)
    assert row.within_floor is False


def test_the_host_delay_of_a_run_is_its_worst_write_lateness_never_negative() -> None:
    r = record(1.0, 0.1)
    assert r.host_delay_ms == 0.0  # no write log (an endpoint): nothing netted
    r.drift_ms = [-0.2, -0.1]
    assert r.host_delay_ms == 0.0
    r.drift_ms = [0.1, 4.2, 0.3]
    assert r.host_delay_ms == 4.2


def paced(arrivals: list[int], interval: float, host_delay: float) -> RunRecord:
    """A run whose stub wrote a frame every `interval` ms (its timers up to `host_delay` ms late) and whose client
    read them in arrivals of these sizes."""
    frames = sum(arrivals)
    r = record(frames / len(arrivals), 0.2, frames=frames, burst=max(arrivals))
    r.writes_ms = [k * interval for k in range(frames)]
    r.drift_ms = [0.1, host_delay]
    r.arrivals, k = [], 0
    for n in arrivals:
        r.arrivals.append((r.writes_ms[k + n - 1], n))
        k += n
    return r


def test_frames_a_late_wake_joined_are_not_a_proxy_coalescing() -> None:
    """CI's failure (timed lane): the pass relay, one more process to wake, read two frames written 15 ms apart
    together once per run when the host delayed it 16 ms: fpr 1.14 over direct's 1.00, "coalesces: bursts of 1".
    The stub's timers were as late in those runs."""
    floor = Floor.from_direct([paced([1] * 8, 15, 0.2), paced([1] * 8, 15, 0.3)])
    assert floor is not None
    runs = [paced([1, 1, 2, 1, 1, 1, 1], 15, 16.0), paced([1, 2, 1, 1, 1, 1, 1], 15, 17.0)]
    assert runs[0].frames_per_read_net == 1.0
    row = build_row(PathSpec("pass"), COND, runs, floor)
    assert row.fpr_median is not None
    assert row.fpr_median > 1.1  # the figure stays as measured
    assert row.within_floor is True
    assert row.verdict.startswith("streams")


def test_a_hold_joins_frames_written_further_apart_than_the_host_delayed_anything() -> None:
    """A cork relay's bursts of 4 frames 50 ms apart are its hold however loaded the host (its timers 20 ms late)."""
    floor = Floor.from_direct([paced([1] * 8, 50, 0.2)])
    cork = paced([4, 4], 50, 20.0)
    assert cork.frames_per_read_net == 4.0
    row = build_row(PathSpec("cork"), COND, [cork, cork], floor)
    assert row.within_floor is False
    assert row.verdict.startswith("coalesces: bursts of 4")


def test_frames_per_read_are_as_measured_without_a_host_delay_or_a_matching_write_log() -> None:
    quiet = paced([1, 2, 1], 15, 0.0)
    assert quiet.frames_per_read_net == quiet.metrics.frames_per_read if quiet.metrics else False
    unmatched = paced([1, 2, 1], 15, 16.0)
    unmatched.writes_ms = unmatched.writes_ms[:2]  # fewer writes than frames: no join to judge by
    assert unmatched.frames_per_read_net == unmatched.metrics.frames_per_read if unmatched.metrics else False
