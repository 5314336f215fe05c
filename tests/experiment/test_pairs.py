"""Paired runs against an origin with no audit log (experiment/pairs.py), on injected figures: no origin, no clock."""

from __future__ import annotations

import math

import pytest

from tokenpath.experiment.pairs import (
    OTHER_TOKENS,
    UNPAIRED,
    UNSTABLE,
    bracketed,
    median_interval,
    origin_jitter,
    pair,
    pair_bound_ms,
    paired,
    path_figures,
    streams_per_condition,
    summary,
)
from tokenpath.probe.metrics import RunMetrics


def run(ttft: float | None, frames: int = 10, gap: float = 10.0, longest: float = 20.0) -> RunMetrics:
    gaps = {"p50": gap, "p90": gap, "max": longest}
    return RunMetrics("s", 200, frames, frames, 1.0, ttft, ttft, gaps, {1: frames}, None)


def test_a_path_adds_what_it_takes_beyond_the_mean_of_the_directs_around_it() -> None:
    # The origin drifts from 100 to 110 ms across the round: the path's 130 is 25 over their mean, not 30 or 20.
    p = pair(run(130.0, gap=14.0, longest=50.0), run(100.0, gap=10.0), run(110.0, gap=12.0))
    assert p.excluded_because is None
    assert p.added_ttft_ms == pytest.approx(25.0)
    assert p.added_gap_ms == pytest.approx(3.0)
    assert p.added_max_gap_ms == pytest.approx(30.0)


def test_directs_that_disagree_beyond_the_bound_exclude_the_run() -> None:
    assert pair_bound_ms(40.0) == 25.0  # the floor
    assert pair_bound_ms(400.0) == 100.0  # a quarter of a slow origin's TTFT
    kept = pair(run(420.0), run(350.0), run(450.0))  # 100 apart, bound 100: kept
    assert kept.excluded_because is None
    p = pair(run(420.0), run(300.0), run(450.0))  # 150 apart, bound 93.75: the origin's pace moved
    assert p.excluded_because is not None
    assert p.excluded_because.startswith(UNSTABLE)
    assert p.added_ttft_ms is None


def test_a_failed_direct_or_another_token_count_excludes_the_run() -> None:
    no_pair = pair(run(120.0), None, run(100.0)).excluded_because
    assert no_pair is not None
    assert no_pair.startswith(UNPAIRED)
    untimed = pair(run(120.0), run(None), run(100.0)).excluded_because
    assert untimed is not None
    assert untimed.startswith(UNPAIRED)
    other = pair(run(120.0, frames=11), run(100.0), run(100.0)).excluded_because
    assert other is not None
    assert other.startswith(OTHER_TOKENS)
    directs_differ = pair(run(120.0), run(100.0, frames=9), run(100.0)).excluded_because
    assert directs_differ is not None
    assert directs_differ.startswith(OTHER_TOKENS)


def test_the_median_interval_is_exact_order_statistics() -> None:
    # n = 3: only min..max, at 1 - 2/8 = 75 %.
    three = median_interval([5.0, 1.0, 3.0])
    assert three is not None
    assert (three.low, three.high) == (1.0, 5.0)
    assert three.confidence == pytest.approx(0.75)
    # n = 9: x(2)..x(8) covers 1 - 2 * (1 + 9) / 512 = 96.1 %; x(3)..x(7) only 82 %.
    nine = median_interval([float(v) for v in range(1, 10)])
    assert nine is not None
    assert (nine.low, nine.high) == (2.0, 8.0)
    assert nine.confidence == pytest.approx(1 - 20 / 512)
    assert median_interval([]) is None
    one = median_interval([7.0])
    assert one is not None
    assert (one.low, one.high, one.confidence) == (7.0, 7.0, 0.0)


def test_the_origins_jitter_is_reported_apart_from_what_paths_add() -> None:
    # A direct stream with no first token still has its gaps between arrivals (10 ms here).
    directs = [run(100.0, gap=10.0), run(140.0, gap=12.0), run(120.0, gap=11.0), run(None, gap=10.0)]
    assert origin_jitter(directs) == {
        "origin_ttft_ms": 120.0,
        "origin_ttft_ms_low": 100.0,
        "origin_ttft_ms_high": 140.0,
        "origin_gap_ms": 10.5,
        "origin_gap_ms_low": 10.0,
        "origin_gap_ms_high": 12.0,
    }


def test_a_paths_figures_count_only_its_kept_pairs() -> None:
    pairs = [
        pair(run(110.0), run(100.0), run(100.0)),
        pair(run(130.0), run(100.0), run(100.0)),
        pair(run(120.0), run(100.0), run(100.0)),
        pair(run(999.0), run(100.0), run(500.0)),  # excluded: its directs disagree
    ]
    figures = path_figures(pairs)
    assert figures["pairs"] == 3.0
    assert figures["added_ttft_ms"] == 20.0
    assert (figures["added_ttft_ms_low"], figures["added_ttft_ms_high"]) == (10.0, 30.0)
    assert figures["confidence"] == pytest.approx(0.75)
    assert path_figures([pairs[-1]]) == {"pairs": 0.0}
    assert not any(math.isnan(v) for v in figures.values())


def test_a_round_brackets_every_path_with_direct_streams() -> None:
    assert bracketed(["direct", "nginx", "haproxy"]) == ["direct", "nginx", "direct", "haproxy", "direct"]
    assert bracketed(["nginx"]) == ["direct", "nginx", "direct"]


def test_a_conditions_summary_says_the_origins_pace_apart_from_each_paths() -> None:
    directs = [run(100.0, gap=10.0), run(110.0, gap=12.0), run(120.0, gap=11.0)]
    nginx = [pair(run(130.0, gap=12.0), directs[0], directs[1]), pair(run(140.0, gap=12.0), directs[1], directs[2])]
    held = [pair(run(900.0), directs[0], run(400.0))]
    assert summary(directs, {"nginx": nginx, "haproxy": held}) == [
        "the origin itself, over 3 direct streams: TTFT 110.0 ms [100.0, 120.0], gap 11.0 ms",
        "nginx: 2 pairs kept, 0 excluded; added TTFT +25.0 ms [25.0, 25.0] (50 %), added gap +0.8 ms",
        "haproxy: 0 pairs kept, 1 excluded",
    ]


def test_a_paths_pairs_are_stored_with_their_reasons_and_the_origins_own_pace() -> None:
    directs = [run(100.0, gap=10.0), run(110.0, gap=12.0), run(120.0, gap=11.0), run(400.0, gap=11.0)]
    pairs = [
        pair(run(130.0, gap=12.0), directs[0], directs[1]),
        pair(run(140.0, gap=12.0), directs[1], directs[2]),
        pair(run(900.0), directs[2], directs[3]),  # the origin's pace moved
        pair(run(130.0, frames=9), directs[0], directs[1]),  # another number of tokens
        pair(run(130.0), directs[0], None),  # a direct stream failed
    ]
    got = paired(directs, pairs)
    assert (got.kept, got.excluded, got.directs) == (2, 3, 4)
    assert got.reasons == {UNSTABLE: 1, OTHER_TOKENS: 1, UNPAIRED: 1}
    assert got.added_ttft_ms == pytest.approx(25.0)
    assert (got.origin_ttft_ms, got.origin_ttft_ms_low, got.origin_ttft_ms_high) == (115.0, 100.0, 400.0)
    assert got.origin_gap_ms == pytest.approx(11.0)
    nothing = paired([], [])
    assert (nothing.kept, nothing.excluded, nothing.added_ttft_ms, nothing.origin_ttft_ms) == (0, 0, None, None)


def test_a_paired_condition_measures_direct_once_more_per_round_than_every_other_path() -> None:
    # examples/origins/llama-server.toml: direct + 5 paths, 10 runs, in 2 formats: 220 streams, not the 120 a round
    # of one stream per path counts ([151/120] was printed).
    paths = ["direct", "nginx", "nginx (ignore_x_accel)", "nginx (proxy_buffering_off)", "haproxy", "gateway"]
    assert 2 * streams_per_condition(paths, 10, paired=True) == 220
    assert streams_per_condition(paths, 10, paired=False) == 60
