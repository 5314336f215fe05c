"""Naming a cut: which limit ended the stream (a silence before the first byte, a silence mid-stream, the total),
its measured value, and what lifts it: the config line of the proxy's long_streams variant in the catalogue (one
source: the line the catalogue renders and tests), or, where the limit sits in something the user cannot
configure, "send keep-alives more often than every N s" (an idle limit) or where a total limit is set.

CLOUD_LIMITS: the documented defaults of the load balancers and CDNs people put in front (docs/findings.md shows
the same table): a measured limit near one of them points there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from itertools import pairwise
from typing import Any

from tokenpath.diagnose.classify import Cause, RunFigures, Share, Verdict, classify
from tokenpath.diagnose.limits import LimitFound, Measure, PathLimits
from tokenpath.errors import ProxyError, UsageError
from tokenpath.proxies import lookup
from tokenpath.proxies.timeouts import LONG_STREAMS
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd, origin_end


class Limit(StrEnum):
    IDLE_BEFORE_FIRST_BYTE = "idle before the first byte"
    IDLE_MID_STREAM = "idle mid-stream"
    TOTAL = "total"

    @property
    def idle(self) -> bool:
        return self is not Limit.TOTAL


LIMIT_OF = {
    Measure.FIRST_BYTE: Limit.IDLE_BEFORE_FIRST_BYTE,
    Measure.MID_STREAM: Limit.IDLE_MID_STREAM,
    Measure.TOTAL: Limit.TOTAL,
}


@dataclass(frozen=True, slots=True)
class CloudLimit:
    """One provider's documented default, as its page states it."""

    where: str
    limit: Limit
    default_s: float
    setting: str  # where a user changes it, or that they cannot
    source: str


CLOUD_LIMITS = (
    CloudLimit(
        "AWS Application Load Balancer",
        Limit.IDLE_MID_STREAM,
        60,
        "idle_timeout.timeout_seconds, 1-4000 s (HTTP/2 PINGs do not reset it)",
        "https://docs.aws.amazon.com/elasticloadbalancing/latest/application/application-load-balancers.html",
    ),
    CloudLimit(
        "Cloudflare (proxied), Proxy Read Timeout",
        Limit.IDLE_MID_STREAM,
        120,
        "Enterprise plans only (zone setting proxy_read_timeout); older pages and many threads say 100 s",
        "https://developers.cloudflare.com/fundamentals/reference/connection-limits/",
    ),
    CloudLimit(
        "Google Cloud external Application Load Balancer, backend service timeout",
        Limit.TOTAL,
        30,
        "the backend service's timeoutSec (the whole response, except WebSockets)",
        "https://cloud.google.com/load-balancing/docs/backend-service#timeout-setting",
    ),
    CloudLimit(
        "Azure Front Door, origin response timeout",
        Limit.IDLE_BEFORE_FIRST_BYTE,
        60,
        "originResponseTimeoutSeconds, 16-240 s",
        "https://learn.microsoft.com/azure/frontdoor/front-door-faq",
    ),
    CloudLimit(
        "Azure Application Gateway, request time-out",
        Limit.IDLE_BEFORE_FIRST_BYTE,
        20,
        "the backend settings' request time-out, 1-86400 s",
        "https://learn.microsoft.com/azure/application-gateway/configuration-http-settings",
    ),
)


@dataclass(frozen=True, slots=True)
class CutName:
    limit: Limit
    survived_s: float | None  # the longest that came through (None: not even the shortest tried)
    cut_s: float
    fix: str

    def describe(self) -> str:
        survived = f", {self.survived_s:g} s survived" if self.survived_s is not None else ""
        return f"{self.limit.value} limit: cut at {self.cut_s:g} s{survived}; fix: {self.fix}"


# The catalogue entries whose long_streams line lifts a total limit (the whole response, whatever its pacing): Envoy's
# `route: {timeout: 0s}`, the gateway's `total_timeout_s`, Traefik's entry point `writeTimeout`, Varnish's
# `send_timeout`. Every other line lifts idle timers only (nginx's proxy_read_timeout, HAProxy's timeout
# server/client, Apache's ProxyTimeout, Caddy's read_timeout...: each counts a silence), which a total limit is not.
LIFTS_TOTAL = frozenset({"envoy", "gateway", "traefik", "varnish"})


def lift_line(proxy: str) -> str | None:
    """The catalogue's line that lifts `proxy`'s stream limits (its long_streams variant), None when it has none.
    `proxy` as a path is labelled: NAME or NAME:VARIANT."""
    try:
        return lookup(proxy.partition(":")[0]).variant(LONG_STREAMS).line or None
    except (ProxyError, UsageError):
        return None


def name_cut(found: LimitFound, proxy: str | None = None, keepalives_reset_idle: bool | None = None) -> CutName | None:
    """The limit behind a measured cut and its fix; None when the measure found no limit. `keepalives_reset_idle`
    as the survey measured it on the mid-stream idle timer (PathLimits): False, the format's keep-alives did not
    let a longer silence through, so a mid-stream limit's fix does not offer them; None, not measured."""
    if found.shortest_cut_s is None or found.inconsistent is not None:
        return None  # no limit, or cuts no one limit explains (the survey's `inconsistent`): none to name
    limit = LIMIT_OF[found.measure]
    name = proxy.partition(":")[0] if proxy else None
    line = lift_line(name) if name and (limit.idle or name in LIFTS_TOTAL) else None
    every = found.longest_survived_s if found.longest_survived_s is not None else found.shortest_cut_s
    if limit is Limit.IDLE_MID_STREAM and keepalives_reset_idle is False:
        raise_it = f"{name}: {line}" if line is not None else "raise the idle timeout where it is set"
        fix = (
            "the format's keep-alives do not reset this path's idle timer (measured): only raising the idle timeout "
            f"({raise_it}) or sending data events more often than every {every:g} s helps"
        )
    elif line is not None:
        fix = f"{name}: {line}"
    elif limit.idle:
        fix = (
            f"send keep-alives more often than every {every:g} s (the format's own: SSE comments, Anthropic "
            "ping), or raise the idle timeout where it is set"
        )
    elif name and lift_line(name) is not None:  # its line lifts idle timers: the total is set elsewhere
        fix = (
            f"{name}'s stream timeouts count silences and do not lift a total limit: it is set elsewhere on the path "
            "(a load balancer, a CDN, the client's own timeout); keep-alives do not help a total limit: raise it "
            "where it is set, or keep each response shorter"
        )
    else:
        fix = "keep-alives do not help a total limit: raise it where it is set, or keep each response shorter"
    nearby = [c.where for c in CLOUD_LIMITS if c.limit is limit and _near(found, c.default_s)]
    if nearby and line is None:
        fix += f" (the documented default of {', '.join(nearby)})"
    return CutName(limit, found.longest_survived_s, found.shortest_cut_s, fix)


def _near(found: LimitFound, default_s: float) -> bool:
    """The default lies between what survived and what was cut, give or take 5 % (one cut seen: within 5 % of it)."""
    cut = found.shortest_cut_s or 0.0
    low = (found.longest_survived_s if found.longest_survived_s is not None else cut) * 0.95
    high = cut * 1.05
    return low <= default_s <= high


IDLE_SHARE = 0.5  # a cut that came after a silence this large a share of the stream's time was an idle timer's
# The shortest limit named from one cut. No proxy, load balancer or CDN ships a total limit near a second (the
# catalogue's and CLOUD_LIMITS' are 15 s and up), and one that short would end every LLM answer in its first
# sentence: a stream that ended sooner was broken (a reset, the origin's own end), not timed out. An idle limit
# under half a second would fire between two tokens of any slow model.
MIN_TOTAL_S = 1.0
MIN_IDLE_S = 0.5


def name_end(end: StreamEnd, proxy: str | None = None) -> CutName | None:
    """One observed cut named from its own timing (the hook diagnose's verdict calls on a stream it saw cut): no
    byte before it, an idle limit before the first byte; a long silence before it, an idle limit mid-stream;
    bytes until the moment it came, a total limit. The value is the one cut seen (nothing is known to survive);
    `tokenpath timeouts` brackets it. None for a stream that was not cut, an end that is not the path's
    (origin_end), and a value below what any limit is set to (MIN_TOTAL_S, MIN_IDLE_S): a broken connection, named
    by cut_check without a limit. One observation cannot see through a proxy that buffers: it hands over the held
    bytes with the cut (stock nginx at 60 s), which reads as a total limit here; the survey's silences of different
    lengths tell the two apart."""
    if not end.cut or end.at_ns is None or origin_end(end):
        return None
    at_s = end.at_ns / 1e9
    if end.since_last_byte_ns is None:
        measure, value_s = Measure.FIRST_BYTE, at_s
    elif end.since_last_byte_ns >= IDLE_SHARE * end.at_ns:
        measure, value_s = Measure.MID_STREAM, end.since_last_byte_ns / 1e9
    else:
        measure, value_s = Measure.TOTAL, at_s
    if value_s < (MIN_TOTAL_S if measure is Measure.TOTAL else MIN_IDLE_S):
        return None
    return name_cut(LimitFound(measure, None, round(value_s, 3), end, 1), proxy)


def not_the_paths(run: RunFigures) -> str | None:
    """Why a run's end, not complete, is no cut of the path's (None: it is one, or the run was not cut): the
    origin's own error event, an error status or bytes that broke HTTP, a close before any byte sooner than a
    first-byte limit (a stream that never began), an event stream that ended without a single frame (the origin's
    empty answer), or a body HTTP ended normally (cut_silent) sooner than any limit
    fires (the origin's answer ended without its final event)."""
    end = run.end
    if end is None or not end.cut:
        return None
    if origin_end(end):
        if end.kind is EndKind.CUT_ERROR and end.how.normal:
            return "the origin's own error event ended the stream (the API said it failed, not the path)"
        return f"the peer's error ({end.how.value}), not a cut"
    if end.since_last_byte_ns is None and name_end(end) is None:
        return "the connection closed before any response, too soon for a first-byte limit: the stream never began"
    if end.kind is EndKind.CUT_SILENT and run.frames == 0:
        return "the answer ended with no event at all: the origin's empty answer, not a limit"
    if end.kind is EndKind.CUT_SILENT and name_end(end) is None:
        return "the body ended normally without the format's final event, sooner than any limit fires: the origin's end"
    return None


def path_cut(run: RunFigures) -> bool:
    """The path cut this run: its end is a cut (a reset, a body broken off, a silent end) and no origin's."""
    return run.end is not None and run.end.cut and not_the_paths(run) is None


def _duration_ms(run: RunFigures) -> float:
    return max((*run.arrivals_ms, run.ttfb_ms or 0.0))


def _silences_ms(run: RunFigures, limit: Limit) -> list[float]:
    """An uncut run's silences a timer of this kind counts: the wait for the first byte, or the gaps after it."""
    if limit is Limit.IDLE_BEFORE_FIRST_BYTE:
        return [run.ttfb_ms] if run.ttfb_ms is not None else []
    times = [t for t in (run.ttfb_ms, *run.arrivals_ms) if t is not None]
    return [b - a for a, b in pairwise(times)]


def refuted(named: CutName, runs: Sequence[RunFigures]) -> str | None:
    """What in the uncut runs disproves the limit one cut named (None: nothing): a total limit T is refuted by an
    uncut run that lasted longer than T, an idle limit S by an uncut run's silence of that kind longer than S."""
    limit_ms = named.cut_s * 1000
    for run in runs:
        if run.end is not None:
            continue
        if named.limit is Limit.TOTAL:
            if (lasted := _duration_ms(run)) > limit_ms:
                return f"the {run.name} run lasted {lasted / 1000:.3g} s uncut, longer than a {named.cut_s:g} s total"
        elif (silence := max(_silences_ms(run, named.limit), default=0.0)) > limit_ms:
            return (
                f"the {run.name} run was silent {silence / 1000:.3g} s uncut, longer than a {named.cut_s:g} s "
                f"{named.limit.value} limit"
            )
    return None


def _words(run: RunFigures, where: str = "") -> str:
    """A cut run's cut, in the summary's words: its limit and value, or the break with no limit named; `where` (the
    run's name, a share of repeats) follows the value."""
    assert run.end is not None
    assert run.end.at_ns is not None
    where = f" ({where})" if where else ""
    named = name_end(run.end)
    if named is not None:
        return f"{named.limit.value} limit, cut at {named.cut_s:g} s{where}"
    broke = "reset" if run.end.how is BodyEnd.RESET else "broken off"
    return (
        f"{broke} at {run.end.at_ns / 1e9:.3g} s{where}, too soon for a limit a path sets (under {MIN_TOTAL_S:g} "
        "s): a broken connection, the path's or the origin's"
    )


def _cut_verdict(runs: Sequence[RunFigures], evidence: tuple[str, ...]) -> Verdict | None:
    """diagnose's check (classify.Check, cli/diagnose.py CHECKS): the first run the path cut (path_cut) is the
    verdict, its limit named from its own timing (name_end; none for a break sooner than any limit), and what the
    uncut runs say against it in a note (refuted); the report adds the fix for the proxy it recognised. An end
    that is not the path's (not_the_paths) is a note on the rules' verdict. None when every run came to its end.
    A cut the uncut runs refute, or the only one of a series, is measured again (measure.py, in_doubt)."""
    cut = [run for run in runs if path_cut(run)]
    others = [
        f"{run.name}: {why} ({run.end.describe()})"
        for run in runs
        if run.end is not None and (why := not_the_paths(run)) is not None
    ]
    if not cut:
        if not others:
            return None
        found = classify(runs)
        return replace(found, notes=(*found.notes, *others))
    run = cut[0]
    assert run.end is not None
    summary = f"cuts the stream: {_words(run, f'{run.name} run')}"
    notes = tuple(others)
    named = name_end(run.end)
    against = refuted(named, runs) if named is not None else None
    if against is not None:
        notes += (f"{against}: not one limit the path sets",)
    return Verdict(Cause.CUT, summary, (*evidence, f"{run.name}: {run.end.describe()}"), notes=notes, end=run.end)


def in_doubt(runs: Sequence[RunFigures]) -> str | None:
    """Why one pass's cut verdict is measured again (None: it stands): the uncut runs refute the limit it named, or
    it is the only cut among runs that came to their end (a transient reset, or a total limit only the longest run
    reaches: the repeats tell)."""
    cut = [run for run in runs if path_cut(run)]
    if not cut:
        return None
    named = name_end(cut[0].end) if cut[0].end is not None else None
    against = refuted(named, runs) if named is not None else None
    if against is not None:
        return f"a cut the other runs refute ({against})"
    if len(cut) == 1 and any(run.end is None for run in runs):
        return f"a cut in one run only ({cut[0].name}), the others whole"
    return None


def cut_shares(runs: Sequence[RunFigures]) -> list[Share]:
    """Per run name, in the order the names first came: how many of its repeats the path cut."""
    cut: dict[str, int] = {}
    count: dict[str, int] = {}
    for run in runs:
        cut[run.name] = cut.get(run.name, 0) + path_cut(run)
        count[run.name] = count.get(run.name, 0) + 1
    return [Share(name, cut[name], count[name]) for name in count]


def repeated_cut(runs: Sequence[RunFigures], read: Verdict) -> Verdict | None:
    """The verdict over repeats of the series when the path cut some repeat (None: it cut none), as holds are
    judged (classify.intermittent): a run cut in a clear share of its repeats (Share.clear: 2 of 3) is the path's
    cut, exit 19, named from its cut repeat; a cut seen once is a transient reset or a limit too rare to tell: the
    least-held runs' verdict `read` stands when it names a hold, with a note, else UNSURE naming the cut."""
    counted = cut_shares(runs)
    if not any(s.held for s in counted):
        return None
    per_run = f"cut repeats per run: {', '.join(s.words() for s in counted)}"
    clear = [s for s in counted if s.clear]
    if clear:
        clearest = max(clear, key=lambda s: s.held / s.runs)
        run = next(r for r in runs if r.name == clearest.name and path_cut(r))
        found = _cut_verdict([run, *(r for r in runs if r.end is None)], read.evidence)
        assert found is not None
        share = f"{clearest.name} run, cut in {clearest.held} of {clearest.runs} repeats"
        return replace(
            found,
            summary=f"cuts the stream: {_words(run, share)}",
            evidence=(*dict.fromkeys(found.evidence), per_run),
        )
    once = next(r for r in runs if path_cut(r))
    assert once.end is not None
    seen = f"{_words(once, f'{once.name} run')}; {once.end.describe()}"
    if read.held:
        note = f"the path cut one stream once ({seen}), not its repeats: a transient reset, or a limit too rare to tell"
        return replace(read, notes=(*read.notes, note, per_run))
    return Verdict(
        Cause.UNSURE,
        f"unsure: the path cut a stream once ({_words(once, f'{once.name} run')}) and not in its repeats: a "
        "transient reset, or a limit too rare to tell",
        (*read.evidence, f"{once.name}: {once.end.describe()}", per_run),
        notes=(*read.notes, f"without that cut the runs read: {read.summary}"),
    )


class CutCheck:
    """diagnose's check (classify.Check: called with the runs and their evidence, _cut_verdict), with how its
    repeats are judged: measure.diagnose_series (listed below this module, so it does not import it) asks a check
    that has `repeated` whether a cut is in doubt (in_doubt), how many of each run's repeats were cut (shares), and
    for the verdict over the repeats (repeated)."""

    def __call__(self, runs: Sequence[RunFigures], evidence: tuple[str, ...]) -> Verdict | None:
        return _cut_verdict(runs, evidence)

    @staticmethod
    def in_doubt(runs: Sequence[RunFigures]) -> str | None:
        return in_doubt(runs)

    @staticmethod
    def shares(runs: Sequence[RunFigures]) -> list[Share]:
        return cut_shares(runs)

    @staticmethod
    def repeated(runs: Sequence[RunFigures], read: Verdict) -> Verdict | None:
        return repeated_cut(runs, read)


cut_check = CutCheck()


def path_cuts(path: PathLimits, proxy: str | None = None) -> list[CutName]:
    """Every limit the survey found on one path, named, with what the survey measured of its keep-alives. A silence
    cut only past what a total limit lets through is the total's cut (PathLimits.explained_by_total, the rule the
    table and the JSON apply too): not named as an idle limit."""
    named = []
    for found in path.limits:
        if path.explained_by_total(found):
            continue
        if (name := name_cut(found, proxy, path.keepalives_reset_idle)) is not None:
            named.append(name)
    return named


def cut_lines(results: list[PathLimits], proxies: Mapping[str, str]) -> list[str]:
    """After the survey's table: each path's cuts, named, with their fix (`proxies`: URL -> catalogue name); then
    each measure whose cuts no one limit explains (LimitFound.inconsistent), with no limit or fix named."""
    lines = []
    for path in results:
        proxy = proxies.get(path.target)
        label = f"{proxy} ({path.target})" if proxy else path.target
        lines += [f"{label}: {named.describe()}" for named in path_cuts(path, proxy)]
        lines += [
            f"{label}: {found.measure.words}: inconsistent: {found.inconsistent}; no limit named (a flaky path, "
            "or a limit that varies: survey it again, or diagnose it)"
            for found in path.inconsistent
        ]
    return lines


def cuts_json(path: PathLimits, proxy: str | None) -> list[dict[str, Any]]:
    return [
        {"limit": n.limit.value, "survived_s": n.survived_s, "cut_s": n.cut_s, "fix": n.fix}
        for n in path_cuts(path, proxy)
    ]


def split_target(text: str) -> tuple[str | None, str]:
    """`nginx=http://127.0.0.1:8080` -> ("nginx", URL): the catalogue name (NAME or NAME:VARIANT, the path's label)
    picks the fix line; a bare URL: None."""
    name, eq, url = text.partition("=")
    if eq and "://" not in name:
        proxy, _, variant = name.partition(":")
        try:  # a misspelt name was kept as a label and its fix line left out, unsaid
            found = lookup(proxy)
            if variant:
                found.variant(variant)
        except ProxyError as exc:
            raise UsageError(f"{text}: {exc}") from None
        return name, url
    return None, text
