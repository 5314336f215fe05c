"""`tokenpath timeouts`: each path's limits on a token stream, found by bisection (diagnose/bisect.py) with the
stub behind the path making the silences and the long totals (its per-request keys):

- first_byte: the longest silence before any byte (`head_at: first-token` with a long `ttft_ms`);
- mid_stream: the longest silence after the first token (`pause_ms` after `pause_after: 1`);
- total: the longest stream of steady tokens (tokens x `interval_ms`);
- keep-alives: whether the format's keep-alive (`heartbeat_ms`) during a silence twice the mid-stream limit lets it
  through, i.e. whether they reset the path's idle timer. Measured, never assumed; not tried for a format the stub
  has no keep-alive for (Bedrock's event stream, Ollama's NDJSON).

In any API format and over HTTP/1.1 or HTTP/2 (h2c) to the path (limitprobe.Client): a silence is the stub's
silence in that format's shape, and a proxy's HTTP/2 side may time a stream apart from its HTTP/1.1 side.

Each try's end is read by diagnose's rule for what is not a path's cut (wire/ending.py origin_end): the origin's own
error event, or an error status after the stub sent its head, is the origin's failure, and the survey refuses the
path in one line rather than name a limit (a status before the head is a timer's: nginx's 504 at its
proxy_read_timeout). A limit is called firm only once the values that bracket it were tried again and did the same
(the one came through, the other was cut near the same time); cuts no one limit explains (a cut sooner than a
silence that came through, a value that came through once and was cut once) make that measure `inconsistent`, with
no limit named (bisect.py).

Every probe of every path and measure waits at once (asyncio): waiting costs no CPU, so a survey takes about the
longer of --max (the first round tries it: a path without a limit holds it that long) and three times its longest
limit (the first round's cut brackets each limit, the second tries both sides of it, the third confirms them), plus
twice its mid-stream limit for the keep-alive try; not the sum over paths. A path that holds a stream instead of
cutting it gives no cut's timing to bracket by: its first round waits the client's guard (guard_s: 1.25 x --max +
10 s), and each later round its longest try and a little more (held_guard_s), halving blind: up to about twice --max
more (--max 15 through a relay that holds at 4 s idle: 67 s).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from tokenpath.diagnose.bisect import Bisection
from tokenpath.diagnose.limitprobe import Client, Outcome, Target, run_stream
from tokenpath.errors import HTTPStatusError, PeerError, UsageError
from tokenpath.stub.config import MAX_STREAM_SECONDS, MAX_TOKENS
from tokenpath.stub.formats import FORMATS
from tokenpath.wire.apis import SPECS, Api
from tokenpath.wire.ending import BodyEnd, StreamEnd, origin_end
from tokenpath.wire.httpversion import HttpVersion

T = TypeVar("T")

MAX_TARGETS = 32  # x 3 measures x 3 tries a round: ~300 streams open at once, well inside one process's files
DEFAULT_MIN_S = 1.0
DEFAULT_MAX_S = 300.0  # above every stock idle limit in the catalogue but Squid's 15 min, and Envoy's 5 min idle
DEFAULT_RESOLUTION_S = 1.0
TOTAL_INTERVAL_MS = 250.0  # the `total` streams' pacing at most: steady, never silent long enough for an idle limit
KEEPALIVE_TOTAL_SHARE = 0.8  # the keep-alive try stays this far inside a total limit, so that it cannot be the cut
KEEPALIVE_FRACTION = 4  # keep-alives every quarter of the measured idle limit
PACED_SHARE = 0.9  # a whole stream shorter than this share of what it asked for was not paced by a stub
GUARD_MARGIN_S = 10.0  # the client waits this much past a stream's own length before it calls it held
HELD_GUARD_SHARE = 0.1  # once the path held one try, the next are held past their length and this share of it,
HELD_GUARD_MIN_S = 1.0  # and at least this


class Measure(StrEnum):
    FIRST_BYTE = "first_byte"
    MID_STREAM = "mid_stream"
    TOTAL = "total"

    @property
    def words(self) -> str:
        return _WORDS[self]


_WORDS = {
    Measure.FIRST_BYTE: "silence before the first byte",
    Measure.MID_STREAM: "silence mid-stream",
    Measure.TOTAL: "total length",
}


@dataclass(frozen=True, slots=True)
class SurveyConfig:
    targets: tuple[str, ...]
    min_s: float = DEFAULT_MIN_S
    max_s: float = DEFAULT_MAX_S
    resolution_s: float = DEFAULT_RESOLUTION_S
    measures: tuple[Measure, ...] = tuple(Measure)
    keepalives: bool | None = None  # None: tried where the format has a keep-alive; True: required
    api: Api = Api.OPENAI
    http_version: HttpVersion = HttpVersion.HTTP11
    model: str = "tokenpath-stub"

    @property
    def client(self) -> Client:
        return Client(self.api, self.http_version, self.model)

    @property
    def tries_keepalives(self) -> bool:
        return self.keepalives is not False and FORMATS[self.api].heartbeat is not None

    def __post_init__(self) -> None:
        self.client  # noqa: B018 - checks the HTTP version
        if self.keepalives and FORMATS[self.api].heartbeat is None:
            raise UsageError(f"--keepalives: --api {self.api.value}: {FORMATS[self.api].no_heartbeat}")
        if not self.targets:
            raise UsageError("no TARGET: name at least one path's URL")
        if len(self.targets) > MAX_TARGETS:
            raise UsageError(f"{len(self.targets)} targets: at most {MAX_TARGETS} in one survey")
        if not math.isfinite(self.max_s):  # inf passed `min < max` and overflowed the longest try's pacing
            raise UsageError(f"--max ({self.max_s}) must be a finite number of seconds")
        if not 0 < self.min_s < self.max_s:
            raise UsageError(f"--min ({self.min_s}) must be above 0 and below --max ({self.max_s})")
        if not 0 < self.resolution_s < self.max_s - self.min_s:
            raise UsageError(f"--resolution ({self.resolution_s}) must be above 0 and below --max - --min")
        for url in self.targets:
            Target.parse(url)
        self.check_stub_bounds()

    def check_stub_bounds(self) -> None:
        """What the survey asks of the stub within what it answers (stub/config.py): a stream past its limits is an
        HTTP 400 on every try, which would read as the path's doing. The longest try is --max; a total's tokens
        grow with --max over its pacing, fine for --resolution."""
        if SPECS[self.api].websocket_only:
            raise UsageError(
                f"--api {self.api.value}: a WebSocket-only API has no HTTP token stream for the survey to time (the "
                "stub answers its route 426 Upgrade Required); survey an SSE or NDJSON format"
            )
        tries = {measure: pacing(measure, self.max_s, resolution_s=self.resolution_s) for measure in self.measures}
        longest_s = max((stream_s(keys) for keys in tries.values()), default=0.0)
        if longest_s > MAX_STREAM_SECONDS:
            raise UsageError(
                f"--max {self.max_s:g}: its longest try would run {longest_s:g} s, past the stub's "
                f"{MAX_STREAM_SECONDS:g} s a stream (MAX_STREAM_SECONDS); at most --max "
                f"{MAX_STREAM_SECONDS - (longest_s - self.max_s):g}"
            )
        for measure, keys in tries.items():
            if keys["tokens"] > MAX_TOKENS:
                raise UsageError(
                    f"--max {self.max_s:g} --resolution {self.resolution_s:g}: the {measure.words} try would ask for "
                    f"{keys['tokens']} tokens, past the stub's {MAX_TOKENS} a stream (MAX_TOKENS); raise --resolution "
                    "or lower --max"
                )


@dataclass(frozen=True, slots=True)
class LimitFound:
    measure: Measure
    longest_survived_s: float | None  # None: not even --min came through
    shortest_cut_s: float | None  # None: --max came through (no limit up to it)
    cut: StreamEnd | None  # how the shortest cut ended (None: held past the client's guard, or no cut)
    tries: int
    # Why no one limit explains the cuts (bisect.py's Bisection.inconsistent, in the report's words): no limit named.
    inconsistent: str | None = None
    confirmed: bool = False  # the bracketing values were tried again and did the same (a limit, or below --min)

    @property
    def limited(self) -> bool:
        return self.shortest_cut_s is not None and self.inconsistent is None

    def describe(self, max_s: float, min_s: float) -> str:
        if self.inconsistent is not None:
            return f"inconsistent: {self.inconsistent}"
        if self.shortest_cut_s is None:
            return f"none up to {max_s:g} s"
        if self.longest_survived_s is None:
            return f"below {min_s:g} s"
        how = f" ({self.cut.kind.value})" if self.cut else " (held)"
        return f"{self.longest_survived_s:g} s survived, {self.shortest_cut_s:g} s cut{how}"

    def to_json(self) -> dict[str, Any]:
        return {
            "measure": self.measure.value,
            "longest_survived_s": self.longest_survived_s,
            "shortest_cut_s": self.shortest_cut_s,
            "cut": self.cut.to_json() if self.cut else None,
            "tries": self.tries,
            "inconsistent": self.inconsistent,
            "confirmed": self.confirmed,
        }


@dataclass(frozen=True, slots=True)
class PathLimits:
    target: str
    limits: tuple[LimitFound, ...]
    keepalives_reset_idle: bool | None  # None: not measured (no mid-stream limit, --no-keepalives, none in the format)
    keepalive_every_s: float | None = None

    def limit(self, measure: Measure) -> LimitFound | None:
        return next((found for found in self.limits if found.measure is measure), None)

    def explained_by_total(self, found: LimitFound) -> bool:
        """A silence cut only past what this path's total limit lets through is the total's cut (Envoy's 15 s route
        timeout ends a 16 s silence too), no idle limit of its own. The one rule: the table (table_rows), the JSON
        (to_json) and the named cuts (cuts.path_cuts) all apply it."""
        if found.measure is Measure.TOTAL or found.inconsistent is not None:
            return False
        total = self.limit(Measure.TOTAL)
        total_s = total.longest_survived_s if total is not None and total.limited else None
        return total_s is not None and (found.shortest_cut_s or 0) > total_s

    @property
    def inconsistent(self) -> list[LimitFound]:
        """The measures whose cuts no one limit explains."""
        return [found for found in self.limits if found.inconsistent is not None]

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "limits": [
                found.to_json() | {"explained_by_total": self.explained_by_total(found)} for found in self.limits
            ],
            "keepalives_reset_idle": self.keepalives_reset_idle,
            "keepalive_every_s": self.keepalive_every_s,
        }


OnTry = Callable[[str, str, float, Outcome], None]  # target, what was tried, the value, what came of it


def pacing(
    measure: Measure, value_s: float, heartbeat_ms: float | None = None, resolution_s: float = DEFAULT_RESOLUTION_S
) -> dict[str, Any]:
    """The stub's per-request keys for one try (a total's pacing fine enough for the resolution)."""
    ms = round(value_s * 1000)
    if measure is Measure.FIRST_BYTE:
        return {"head_at": "first-token", "ttft_ms": ms, "tokens": 2, "interval_ms": 10}
    if measure is Measure.MID_STREAM:
        keys: dict[str, Any] = {"ttft_ms": 0, "tokens": 3, "interval_ms": 10, "pause_ms": ms, "pause_after": 1}
        return keys | ({"heartbeat_ms": heartbeat_ms} if heartbeat_ms else {})
    interval_ms = min(TOTAL_INTERVAL_MS, max(10.0, resolution_s * 1000 / 4))
    tokens = max(2, round(ms / interval_ms) - 1)  # the stream lasts (tokens + 1) intervals: [DONE] one after
    return {"ttft_ms": 0, "tokens": tokens, "interval_ms": interval_ms}


def stream_s(keys: Mapping[str, Any]) -> float:
    """How long the stub paces one try's stream (its stream_ms: ttft_ms + tokens x interval_ms + pause_ms), seconds."""
    ms = float(keys.get("ttft_ms", 0) + keys["tokens"] * keys["interval_ms"] + keys.get("pause_ms", 0))
    return round(ms / 1000, 3)


def hint_s(end: StreamEnd | None) -> float | None:
    """Where a cut came, from the request: every measure's silence or stream starts there (the mid-stream pause
    after one 10 ms token). Not from the last byte: a proxy that buffers hands the client the held bytes with the
    cut (stock nginx: 0.3 ms before it at 60 s), so the client's own silence says nothing of the proxy's."""
    return end.at_ns / 1e9 if end is not None and end.at_ns is not None else None


def guard_s(value_s: float) -> float:
    return value_s * 1.25 + GUARD_MARGIN_S


def held_guard_s(value_s: float) -> float:
    """The guard of a try once the path held one of the measure's (it holds rather than cuts: a held try costs its
    guard, so each is kept short): the stream's own length and a little more."""
    return value_s + max(HELD_GUARD_MIN_S, value_s * HELD_GUARD_SHARE)


async def find_limit(target: Target, measure: Measure, cfg: SurveyConfig, on_try: OnTry) -> LimitFound:
    search = Bisection(cfg.min_s, cfg.max_s, cfg.resolution_s)
    cuts: dict[float, StreamEnd | None] = {}
    tries = 0
    held = False
    while not search.done:
        values = search.next_values()
        guard = held_guard_s if held else guard_s
        outcomes = await all_or_none(
            run_stream(target, pacing(measure, v, resolution_s=cfg.resolution_s), guard(v), cfg.client) for v in values
        )
        for value, outcome in zip(values, outcomes, strict=True):
            tries += 1
            on_try(target.url, measure.value, value, outcome)
            check_paced(target, value, outcome, cfg.min_s)
            check_origin(target, measure, value, outcome)
            search.record(value, outcome.survived, hint_s(outcome.end))
            held = held or outcome.end is None
            if not outcome.survived:
                cuts[value] = outcome.end
        search.end_round()
    if search.longest_survived_s is None and cuts and all(end is None for end in cuts.values()):
        # nothing ended any try: a path that answers nothing (or never ends) has no limit to read, not one below --min
        raise PeerError(
            f"{target.url}: every {measure.value} try was held past the client's guard (nothing ended it): the path "
            "holds streams; no limit can be read"
        )
    shortest = search.shortest_cut_s
    return LimitFound(
        measure,
        search.longest_survived_s,
        shortest,
        cuts.get(shortest) if shortest else None,
        tries,
        inconsistent=inconsistent_words(search),
        confirmed=search.confirmed,
    )


def inconsistent_words(search: Bisection) -> str | None:
    """A measure whose cuts no one limit explains, in the report's words (None: one limit does)."""
    why = search.inconsistent
    if why is None:
        return None
    times = ", ".join("held" if t is None else f"{round(t, 2):g} s" for t in sorted(search.cut_times_s, key=_held_last))
    survived = f"{search.longest_survived_s:g} s survived" if search.longest_survived_s is not None else "none survived"
    return f"the path cut streams at times no one limit explains (cuts at {times}; {survived}; {why})"


def _held_last(hint_s: float | None) -> float:
    return hint_s if hint_s is not None else float("inf")


def check_origin(target: Target, measure: Measure, value_s: float, outcome: Outcome) -> None:
    """An end that is the origin's, not the path's (wire/ending.py origin_end, diagnose's rule): the format's own
    error event, an error status. No limit can be read through it, so the path is refused in one line. Two ends
    that rule takes for the origin's are a timer on the path announcing its cut, and stay cuts: a status to a
    first-byte try, before the stub sent its head (nginx's 504 at proxy_read_timeout; the stub sends every other
    try's head at once), and an error event whose words name a timeout (origin_end leaves it to the path:
    wire/ending.py announced_timeout); the stub behind the path ends no paced stream with either."""
    end = outcome.end
    if end is None or not origin_end(end):
        return
    if end.how is BodyEnd.STATUS and measure is Measure.FIRST_BYTE:
        return
    what = f"{target.url}: the {measure.words} try of {value_s:g} s ended with {end.describe()}"
    why = (
        "the origin's end, not the path's: no limit of the path's can be measured through it (timeouts needs a "
        "tokenpath stub as the path's upstream, which ends no paced stream with an error)"
    )
    if end.how is BodyEnd.STATUS:
        raise HTTPStatusError(f"{what}; {why}")
    raise PeerError(f"{what}; {why}")


def check_paced(target: Target, value_s: float, outcome: Outcome, min_s: float = DEFAULT_MIN_S) -> None:
    """A stream that came through whole in much less than its silence was not paced by a stub: whatever answers
    ignored the `tokenpath` keys, and every limit would read as none. An error status within half of --min is no
    timer's either (a 404, a 401; a timer's 504 comes at its limit, which --min is below): every limit would read
    as below --min. Say so rather than report either."""
    end = outcome.end
    if end is not None and end.how is BodyEnd.STATUS and end.at_ns is not None and end.at_ns < min_s * 0.5e9:
        raise HTTPStatusError(f"{target.url}: {end.detail} after {end.at_ns / 1e9:.3g} s, no timer's doing")
    if not outcome.survived and end is not None and end.at_ns is not None and end.at_ns < min_s * 0.5e9:
        # The same rule for any other cut: garbage, a reset, a close before the head, a broken frame a few ms in
        # were each read as a limit "below --min", with its fix line and exit 0.
        said = f": {end.detail}" if end.detail else ""
        raise PeerError(
            f"{target.url}: the stream ended {end.at_ns / 1e6:.3g} ms after the request ({end.how.value}{said}), "
            "before half of --min: a broken path, no timer's doing (a timer that short is below what --min looks for)"
        )
    if outcome.survived and end is not None and end.at_ns is not None and end.at_ns < value_s * PACED_SHARE * 1e9:
        raise UsageError(
            f"{target.url}: a stream asked for {value_s:g} s ended whole after {end.at_ns / 1e9:.3g} s: no tokenpath "
            "stub behind this path paces it (timeouts needs one: `tokenpath stub` as the path's upstream)"
        )


async def survey_path(url: str, cfg: SurveyConfig, on_try: OnTry) -> PathLimits:
    target = Target.parse(url)
    found = await all_or_none(find_limit(target, m, cfg, on_try) for m in cfg.measures)
    silence_s = keepalive_silence_s(found, cfg) if cfg.tries_keepalives else None
    idle = next((f for f in found if f.measure is Measure.MID_STREAM), None)
    if silence_s is None or idle is None or idle.longest_survived_s is None:
        return PathLimits(url, tuple(found), None)
    every_s = round(idle.longest_survived_s / KEEPALIVE_FRACTION, 3)
    keys = pacing(Measure.MID_STREAM, silence_s, heartbeat_ms=round(every_s * 1000))
    outcome = await run_stream(target, keys, guard_s(silence_s), cfg.client)
    on_try(url, "keepalives", silence_s, outcome)
    return PathLimits(url, tuple(found), outcome.survived, every_s)


def keepalive_silence_s(found: list[LimitFound], cfg: SurveyConfig) -> float | None:
    """A silence the idle limit cuts without keep-alives (twice its cut) that no total limit can cut, or None when
    there is none (no idle limit found, or a total limit too close to it to tell the two apart)."""
    by = {f.measure: f for f in found}
    idle = by.get(Measure.MID_STREAM)
    if idle is None or not idle.limited or idle.shortest_cut_s is None or idle.longest_survived_s is None:
        return None
    ceiling = cfg.max_s
    total = by.get(Measure.TOTAL)
    if total is not None and total.shortest_cut_s is not None:
        ceiling = min(ceiling, (total.longest_survived_s or 0.0) * KEEPALIVE_TOTAL_SHARE)
    silence = min(2 * idle.shortest_cut_s, ceiling)
    return round(silence, 3) if silence > idle.shortest_cut_s + cfg.resolution_s else None


async def survey(cfg: SurveyConfig, on_try: OnTry) -> list[PathLimits]:
    """Every target's limits, all probes waiting at once."""
    return await all_or_none(survey_path(url, cfg, on_try) for url in cfg.targets)


async def all_or_none(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Every result, all waiting at once; on the first error the others are cancelled and awaited before it is
    raised. asyncio.gather left them running: they failed later, during asyncio.run's shutdown, and printed
    tracebacks before the survey's one-line error (a path that refuses HTTP/2 refuses every try at once)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


EXPLAINED_BY_TOTAL = "(the total limit)"  # a silence's cell whose cut the total limit explains (explained_by_total)


def table_rows(
    results: list[PathLimits], cfg: SurveyConfig, labels: Mapping[str, str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """The survey's table, one row per path (labelled `labels[url]` where given): its header and its rows. Each row
    says the API format and the HTTP version it was asked in: a proxy may time each apart (its HTTP/2 side, a
    format's route), so a limit read without them is half a fact, wherever the table is shown (terminal, HTML)."""
    header = ["path", "API", "HTTP", *(m.words for m in cfg.measures), "keep-alives reset idle"]
    rows = []
    for path in results:
        cells = [(labels or {}).get(path.target, path.target), cfg.api.value, cfg.http_version.label]
        for measure in cfg.measures:
            found = path.limit(measure)
            if found is None:
                cells.append("-")
            elif path.explained_by_total(found):
                cells.append(EXPLAINED_BY_TOTAL)
            else:
                cells.append(found.describe(cfg.max_s, cfg.min_s))
        reset = path.keepalives_reset_idle
        if reset is not None:
            cells.append(f"{'yes' if reset else 'no'} (every {path.keepalive_every_s:g} s)")
        else:
            cells.append("-" if FORMATS[cfg.api].heartbeat is not None else f"- (none in {cfg.api.value})")
        rows.append(cells)
    return header, rows


def table_lines(results: list[PathLimits], cfg: SurveyConfig, labels: Mapping[str, str] | None = None) -> list[str]:
    """The survey as a plain-text table."""
    header, body = table_rows(results, cfg, labels)
    rows = [header, *body]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def to_json(results: list[PathLimits], cfg: SurveyConfig) -> dict[str, Any]:
    return {
        "schema": "tokenpath.timeouts/1",
        "bounds": {"min_s": cfg.min_s, "max_s": cfg.max_s, "resolution_s": cfg.resolution_s},
        "api": cfg.api.value,
        "http_version": cfg.http_version.value,
        "paths": [path.to_json() for path in results],
    }
