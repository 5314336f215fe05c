"""The timeouts survey's rules for what is no firm limit (diagnose/bisect.py, diagnose/limits.py): cuts no one limit
explains (a cut sooner than a silence that came through, bounds that invert, a value cut again at another time) make
the measure inconsistent, shown as such and exit 17; a limit is called firm only once its bracketing values were
tried again; the origin's own error event, or a status once the head came, refuses the path (diagnose's one rule,
wire/ending.py origin_end); a path that holds streams gets short guards after its first held try."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.diagnose import cuts, limits
from tokenpath.diagnose.bisect import Bisection
from tokenpath.diagnose.cuts import cut_lines, path_cuts
from tokenpath.diagnose.limitprobe import Client, Outcome, Target
from tokenpath.diagnose.limits import (
    LimitFound,
    Measure,
    PathLimits,
    SurveyConfig,
    find_limit,
    guard_s,
    held_guard_s,
    keepalive_silence_s,
    table_rows,
)
from tokenpath.errors import DiagnosisUnsure, HTTPStatusError, PeerError
from tokenpath.wire import ending
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd

URL = "http://127.0.0.1:9"
CFG = SurveyConfig((URL,), min_s=1, max_s=15, resolution_s=1)


def complete(at_s: float) -> Outcome:
    return Outcome(StreamEnd(EndKind.COMPLETE, BodyEnd.CHUNKED, round(at_s * 1e9), 0))


def truncated(at_s: float) -> Outcome:
    return Outcome(StreamEnd(EndKind.CUT_ERROR, BodyEnd.TRUNCATED, round(at_s * 1e9), None))


Script = Callable[[float, Mapping[str, Any], float], Outcome]


def scripted(monkeypatch: pytest.MonkeyPatch, script: Script) -> list[tuple[float, float]]:
    """run_stream replaced by `script(silence or total asked, pacing, guard)`; returns (value, guard) per try."""
    asked: list[tuple[float, float]] = []

    async def run_stream(target: Target, pacing: Mapping[str, Any], guard: float, client: Client) -> Outcome:
        await asyncio.sleep(0)
        value = (pacing.get("pause_ms") or pacing.get("ttft_ms") or 0) / 1000 or limits.stream_s(pacing)
        asked.append((value, guard))
        return script(value, pacing, guard)

    monkeypatch.setattr(limits, "run_stream", run_stream)
    monkeypatch.setattr(limits, "check_paced", lambda *args: None)
    return asked


def find(measure: Measure) -> LimitFound:
    return asyncio.run(find_limit(Target.parse(URL), measure, CFG, lambda *args: None))


# --- cuts no one limit explains ------------------------------------------------------------------------------------


def test_a_cut_sooner_than_a_silence_that_came_through_is_inconsistent() -> None:
    """The reviewer's flaky relay: 15 s cut after 6.5 s, then 8 s came through: no one limit cut at 6.5 s."""
    search = Bisection(1.0, 15.0, 1.0)
    search.record(15.0, False, 6.54)
    search.record(1.0, True)
    search.end_round()
    assert not search.done  # one cut, at 6.54 s: a limit there, so far
    for value in search.next_values():
        search.record(value, True)  # 6.04, 7.04 and the even one: all came through
    search.end_round()
    why = search.inconsistent
    assert why is not None
    assert "6.54" in why
    assert search.done


def test_bounds_that_invert_are_inconsistent_not_done_as_a_bracket() -> None:
    """15 s of silence came through while 1 s was cut (after 0.167 s): `high - low <= resolution` held, so the
    search stopped and called it a limit."""
    search = Bisection(1.0, 15.0, 1.0)
    search.record(15.0, True)
    search.record(1.0, False, 0.167)
    search.end_round()
    assert search.done
    assert search.inconsistent == "a cut came after 0.167 s, yet 15 s came through"
    assert not search.confirmed


def bracketed_at_6_s() -> Bisection:
    """A search of 1-15 s through a path that cuts at 6 s, after the rounds that bracket the limit (not confirmed)."""
    search = Bisection(1.0, 15.0, 1.0)
    search.record(15.0, False, 6.0)
    search.record(1.0, True)
    search.end_round()
    for value in search.next_values():
        search.record(value, value <= 6.0, None if value <= 6.0 else 6.0)
    search.end_round()
    return search


def test_a_limit_is_firm_only_once_its_bracketing_values_did_the_same_again() -> None:
    search = bracketed_at_6_s()
    assert search.bracketed
    assert search.inconsistent is None
    assert (search.done, search.confirmed) == (False, False)  # bracketed, not yet confirmed
    again = search.next_values()
    assert again == [search.longest_survived_s, search.shortest_cut_s]
    survived, cut = again
    search.record(survived, True)
    search.record(cut, False, 6.02)  # cut again near the same time
    search.end_round()
    assert (search.done, search.confirmed) == (True, True)


def test_a_value_at_the_limit_may_go_either_way() -> None:
    """Envoy's 3 s total: 3 s came through (3.0017 s), then was cut after 2.998 s when tried again: it sits at the
    limit, one limit explains both, and the bracket does not invert."""
    search = Bisection(0.4, 5.0, 0.4)
    search.record(5.0, False, 3.0)
    search.record(0.4, True)
    search.end_round()
    for value in (2.7, 2.8, 3.0):
        search.record(value, True)
    search.record(3.2, False, 3.0)
    search.end_round()
    assert search.next_values() == [3.0, 3.2]  # the confirming round
    search.record(3.0, False, 2.998)
    search.record(3.2, False, 2.997)
    search.end_round()
    assert search.inconsistent is None
    assert (search.confirmed, search.longest_survived_s, search.shortest_cut_s) == (True, 3.0, 3.2)


def test_a_value_that_came_through_and_was_cut_far_from_its_length_is_inconsistent() -> None:
    search = Bisection(1.0, 15.0, 1.0)
    search.record(15.0, False, 6.0)
    search.record(1.0, True)
    search.record(5.5, True)
    search.record(5.5, False, 6.6)  # 5.5 s of silence cut after 6.6 s: past its own length
    assert search.inconsistent == "5.5 s came through once, and was cut after 6.6 s"


@pytest.mark.parametrize(
    ("survived_again", "cut_again_at"),
    [(False, 4.0), (True, None), (True, 2.0)],
    ids=["survivor cut", "cut one held", "cut one cut elsewhere"],
)
def test_a_confirming_try_that_disagrees_makes_it_inconsistent(
    survived_again: bool, cut_again_at: float | None
) -> None:
    search = bracketed_at_6_s()
    survived, cut = search.next_values()
    search.record(survived, survived_again, None if survived_again else cut_again_at)
    search.record(cut, False, cut_again_at)
    search.end_round()
    assert search.done
    assert not search.confirmed
    assert search.inconsistent is not None


def test_a_flaky_path_is_reported_inconsistent_with_no_limit_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path with no limit that cuts some streams at random times: the measure is inconsistent, in the table, the
    JSON and the cut lines, with no limit or fix named, and no keep-alive try on it."""
    cut_at = iter([6.54, 0.4, 7.62, 3.0, 9.1, 2.2])

    def flaky(value: float, pacing: Mapping[str, Any], guard: float) -> Outcome:
        at = next(cut_at, None)
        return truncated(at) if at is not None and at < value else complete(value)

    scripted(monkeypatch, flaky)
    found = find(Measure.MID_STREAM)
    assert found.inconsistent is not None
    assert found.inconsistent.startswith("the path cut streams at times no one limit explains (cuts at ")
    assert not found.limited
    total = LimitFound(Measure.TOTAL, 15.0, None, None, 2)
    path = PathLimits(URL, (found, total), None)
    header, rows = table_rows([path], SurveyConfig((URL,), measures=(Measure.MID_STREAM, Measure.TOTAL)))
    assert rows[0][header.index("silence mid-stream")].startswith("inconsistent: the path cut streams")
    assert path.to_json()["limits"][0]["inconsistent"] == found.inconsistent
    assert path_cuts(path) == []  # no limit named, no fix
    (line,) = cut_lines([path], {})
    assert "inconsistent" in line
    assert "fix" not in line
    assert "keep-alives more often" not in line
    assert keepalive_silence_s([found, total], CFG) is None


def test_an_inconsistent_measure_exits_17(monkeypatch: pytest.MonkeyPatch) -> None:
    flaky = LimitFound(Measure.MID_STREAM, 15.0, 1.0, None, 2, inconsistent="the path cut streams at times ...")

    async def survey(cfg: SurveyConfig, on_try: Any) -> list[PathLimits]:
        return [PathLimits(url, (flaky,), None) for url in cfg.targets]

    monkeypatch.setattr(limits, "survey", survey)
    out = CliRunner().invoke(app, ["timeouts", URL, "--max", "15"])
    assert out.exit_code == DiagnosisUnsure.exit_code == 17, out.output
    assert "inconsistent" in out.output


def test_a_real_limit_is_confirmed_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def idle_6s(value: float, pacing: Mapping[str, Any], guard: float) -> Outcome:
        return complete(value) if value <= 6.0 else truncated(6.01)

    asked = scripted(monkeypatch, idle_6s)
    found = find(Measure.MID_STREAM)
    assert found.inconsistent is None
    assert found.confirmed
    assert found.longest_survived_s is not None
    assert found.shortest_cut_s is not None
    assert found.longest_survived_s <= 6.0 < found.shortest_cut_s
    assert [v for v, _ in asked].count(found.shortest_cut_s) == 2  # tried again before it was called firm


# --- the origin's end is not the path's -----------------------------------------------------------------------------


def test_diagnose_and_the_survey_read_ends_by_one_rule() -> None:
    assert vars(cuts)["origin_end"] is ending.origin_end  # cuts.py imports the one in wire/ending.py


def origin_after_6s(value: float, pacing: Mapping[str, Any], guard: float) -> Outcome:
    """The reviewer's origin: every stream ends after 6 s, with a 504 before its head or its own error event."""
    if value <= 5.5:
        return complete(value)
    if pacing.get("head_at") == "first-token":
        return Outcome(StreamEnd(EndKind.CUT_ERROR, BodyEnd.STATUS, 6_000_000_000, 0, "HTTP 504 instead of a stream"))
    return Outcome(StreamEnd(EndKind.CUT_ERROR, BodyEnd.CHUNKED, 6_000_000_000, 0))


@pytest.mark.parametrize("measure", [Measure.MID_STREAM, Measure.TOTAL])
def test_the_origins_error_event_refuses_the_path(monkeypatch: pytest.MonkeyPatch, measure: Measure) -> None:
    scripted(monkeypatch, origin_after_6s)
    with pytest.raises(PeerError, match="the origin's end, not the path's"):
        find(measure)


def test_a_status_after_the_head_refuses_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def status(value: float, pacing: Mapping[str, Any], guard: float) -> Outcome:
        if value <= 5.5:
            return complete(value)
        return Outcome(StreamEnd(EndKind.CUT_ERROR, BodyEnd.STATUS, 6_000_000_000, 0, "HTTP 502 instead of a stream"))

    scripted(monkeypatch, status)
    with pytest.raises(HTTPStatusError, match="HTTP 502"):
        find(Measure.TOTAL)


def test_a_status_before_the_head_stays_a_timers_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """nginx answers 504 at proxy_read_timeout when no head came: the first-byte limit, as before."""
    scripted(monkeypatch, origin_after_6s)
    found = find(Measure.FIRST_BYTE)
    assert found.limited
    assert found.shortest_cut_s is not None
    assert found.shortest_cut_s > 5.5


def test_an_error_event_naming_a_timeout_is_the_paths_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tokenpath gateway ends a stream at its idle timeout with the format's error frame, its code naming the
    timer (tests/e2e/test_timeouts.py's gateway path): a cut, not the origin's end."""
    frame = (
        'the format\'s error frame: {"error":{"message":"...","type":"server_error","code":"upstream_idle_timeout"}}'
    )

    def gateway(value: float, pacing: Mapping[str, Any], guard: float) -> Outcome:
        if value <= 2.0:
            return complete(value)
        return Outcome(StreamEnd(EndKind.CUT_ERROR, BodyEnd.END_STREAM, 2_010_000_000, 2_000_000_000, frame))

    scripted(monkeypatch, gateway)
    found = find(Measure.MID_STREAM)
    assert found.limited
    assert found.confirmed


# --- a path that holds --------------------------------------------------------------------------------------------


def test_once_a_try_is_held_the_next_are_guarded_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path that holds a stream past 4 s instead of cutting it: after the first held round, each try waits its
    own length and a little more, not 1.25 x its length + 10 s."""

    def holds(value: float, pacing: Mapping[str, Any], guard: float) -> Outcome:
        return complete(value) if value <= 4.0 else Outcome(None)

    asked = scripted(monkeypatch, holds)
    found = find(Measure.MID_STREAM)
    assert found.limited
    first = asked[:2]
    assert [g for _, g in first] == [guard_s(v) for v, _ in first]
    assert all(g == held_guard_s(v) < guard_s(v) for v, g in asked[2:])
    assert held_guard_s(15.0) == 16.5
