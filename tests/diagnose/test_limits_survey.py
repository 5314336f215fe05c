"""diagnose/limits.py's survey with the streams scripted (run_stream replaced): every probe of every path and
measure waits at once, each path's limits come out bracketed, and the keep-alive try follows the idle limit."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import pytest

from tokenpath.diagnose import limits
from tokenpath.diagnose.limitprobe import Client, Outcome, Target
from tokenpath.diagnose.limits import Measure, SurveyConfig, survey
from tokenpath.errors import PeerError
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd

IDLE_S = {"http://127.0.0.1:1": 6.0, "http://127.0.0.1:2": 11.0, "http://127.0.0.1:3": None}


class ScriptedPaths:
    """Paths with an idle limit (or none) and no total limit; keep-alives reset their timer."""

    def __init__(self) -> None:
        self.open = 0
        self.most_open = 0

    async def run_stream(
        self, target: Target, pacing: Mapping[str, Any], guard_s: float, client: Client | None = None
    ) -> Outcome:
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        await asyncio.sleep(0.01)  # every try of a round is open together here, whatever its length would be
        self.open -= 1
        silence_s = (pacing.get("pause_ms") or pacing.get("ttft_ms") or 0) / 1000
        limit = IDLE_S[target.url]
        if pacing.get("heartbeat_ms") or limit is None or silence_s <= limit:
            length = max(silence_s, pacing.get("tokens", 0) * pacing.get("interval_ms", 0) / 1000)
            return Outcome(StreamEnd(EndKind.COMPLETE, BodyEnd.CHUNKED, round(length * 1e9), 0))
        return Outcome(StreamEnd(EndKind.CUT_SILENT, BodyEnd.CLOSE, round(limit * 1e9), round(limit * 1e9)))


def test_every_probe_waits_at_once_and_each_limit_is_bracketed(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = ScriptedPaths()
    monkeypatch.setattr(limits, "run_stream", paths.run_stream)
    monkeypatch.setattr(limits, "check_paced", lambda *args: None)  # the scripted lengths are not a stub's
    cfg = SurveyConfig(tuple(IDLE_S), min_s=1, max_s=60, resolution_s=1)
    tried: list[str] = []
    results = asyncio.run(survey(cfg, lambda target, what, value, outcome: tried.append(what)))
    # Round one of every path and measure in one wait: 3 paths x 3 measures x (max, min).
    assert paths.most_open >= 3 * 3 * 2
    by = {r.target: r for r in results}
    for url, limit in IDLE_S.items():
        mid = by[url].limit(Measure.MID_STREAM)
        assert mid is not None
        if limit is None:
            assert mid.shortest_cut_s is None
            assert by[url].keepalives_reset_idle is None
            continue
        assert mid.longest_survived_s is not None
        assert mid.shortest_cut_s is not None
        assert mid.longest_survived_s <= limit < mid.shortest_cut_s <= mid.longest_survived_s + 1
        assert by[url].keepalives_reset_idle is True
        total = by[url].limit(Measure.TOTAL)
        assert total is not None
        assert total.shortest_cut_s is None
    assert tried.count("keepalives") == 2


def always(outcome: Outcome) -> Any:
    async def run_stream(target: Target, pacing: Mapping[str, Any], guard_s: float, client: Any = None) -> Outcome:
        return outcome

    return run_stream


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        (Outcome(StreamEnd(EndKind.CUT_ERROR, BodyEnd.RESET, 300_000_000, None)), "300 ms after the request (reset)"),
        (Outcome(StreamEnd(EndKind.CUT_ERROR, BodyEnd.TRUNCATED, 400_000, None, "garbage")), "(truncated: garbage)"),
        (Outcome(None), "every first_byte try was held past the client's guard"),
    ],
)
def test_a_broken_or_silent_path_is_refused_not_read_as_a_limit_below_min(
    monkeypatch: pytest.MonkeyPatch, outcome: Outcome, said: str
) -> None:
    """A server that answered garbage, reset at once, or sent nothing at all was reported as a path with a first-byte
    limit below --min, a fix line for it, exit 0. A cut before half of --min, or every try held, is refused."""
    monkeypatch.setattr(limits, "run_stream", always(outcome))
    cfg = SurveyConfig(("http://127.0.0.1:1",), min_s=1, max_s=4, resolution_s=1)
    with pytest.raises(PeerError, match=re.escape(said)):
        asyncio.run(limits.find_limit(Target.parse("http://127.0.0.1:1"), Measure.FIRST_BYTE, cfg, lambda *a: None))


def test_the_first_error_cancels_and_awaits_the_other_tries_before_it_is_raised() -> None:
    """asyncio.gather left the other tries running: they failed during asyncio.run's shutdown and printed tracebacks
    before the survey's one-line error (timeouts --http2 against a path that refuses HTTP/2)."""
    ended: list[str] = []

    async def refuses() -> int:
        await asyncio.sleep(0.01)
        raise PeerError("refused")

    async def slow(name: str) -> int:
        try:
            await asyncio.sleep(30)
        finally:
            ended.append(name)
        return 1

    async def main() -> None:
        with pytest.raises(PeerError, match="refused"):
            await limits.all_or_none([slow("a"), refuses(), slow("b")])
        assert sorted(ended) == ["a", "b"]  # cancelled and done before the error came out

    asyncio.run(asyncio.wait_for(main(), 10))
    assert asyncio.run(limits.all_or_none([asyncio.sleep(0, result=n) for n in (1, 2)])) == [1, 2]
