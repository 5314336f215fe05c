"""Naming a cut: which limit ended the stream (a silence before the first byte, a silence mid-stream, the total),
its measured value, and what lifts it: the config line of the proxy's long_streams variant in the catalogue (one
source: the line the catalogue renders and tests), or, where the limit sits in something the user cannot
configure, "send keep-alives more often than every N s" (an idle limit) or where a total limit is set.

CLOUD_LIMITS: the documented defaults of the load balancers and CDNs people put in front (docs/findings.md shows
the same table): a measured limit near one of them points there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tokenpath.diagnose.classify import Cause, RunFigures, Verdict
from tokenpath.diagnose.limits import LimitFound, Measure, PathLimits
from tokenpath.errors import ProxyError, UsageError
from tokenpath.proxies import lookup
from tokenpath.proxies.timeouts import LONG_STREAMS
from tokenpath.wire.ending import StreamEnd


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


def lift_line(proxy: str) -> str | None:
    """The catalogue's line that lifts `proxy`'s stream limits (its long_streams variant), None when it has none.
    `proxy` as a path is labelled: NAME or NAME:VARIANT."""
    try:
        return lookup(proxy.partition(":")[0]).variant(LONG_STREAMS).line or None
    except (ProxyError, UsageError):
        return None


def name_cut(found: LimitFound, proxy: str | None = None) -> CutName | None:
    """The limit behind a measured cut and its fix; None when the measure found no limit."""
    if found.shortest_cut_s is None:
        return None
    limit = LIMIT_OF[found.measure]
    name = proxy.partition(":")[0] if proxy else None
    line = lift_line(name) if name else None
    if line is not None:
        fix = f"{name}: {line}"
    elif limit.idle:
        every = found.longest_survived_s if found.longest_survived_s is not None else found.shortest_cut_s
        fix = (
            f"send keep-alives more often than every {every:g} s (the format's own: SSE comments, Anthropic "
            "ping), or raise the idle timeout where it is set"
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


def name_end(end: StreamEnd, proxy: str | None = None) -> CutName | None:
    """One observed cut named from its own timing (the hook diagnose's verdict calls on a stream it saw cut): no
    byte before it, an idle limit before the first byte; a long silence before it, an idle limit mid-stream;
    bytes until the moment it came, a total limit. The value is the one cut seen (nothing is known to survive);
    `tokenpath timeouts` brackets it. None for a stream that was not cut. One observation cannot see through a
    proxy that buffers: it hands over the held bytes with the cut (stock nginx at 60 s), which reads as a total
    limit here; the survey's silences of different lengths tell the two apart."""
    if not end.cut or end.at_ns is None:
        return None
    at_s = end.at_ns / 1e9
    if end.since_last_byte_ns is None:
        measure, value_s = Measure.FIRST_BYTE, at_s
    elif end.since_last_byte_ns >= IDLE_SHARE * end.at_ns:
        measure, value_s = Measure.MID_STREAM, end.since_last_byte_ns / 1e9
    else:
        measure, value_s = Measure.TOTAL, at_s
    return name_cut(LimitFound(measure, None, round(value_s, 3), end, 1), proxy)


def cut_check(runs: Sequence[RunFigures], evidence: tuple[str, ...]) -> Verdict | None:
    """diagnose's check (classify.Check, cli/diagnose.py CHECKS): the first run the path cut is the verdict, its
    limit named from its own timing (name_end); the report adds the fix for the proxy it recognised. None when
    every run came to its end."""
    for run in runs:
        named = name_end(run.end) if run.end is not None else None
        if run.end is not None and named is not None:
            summary = f"cuts the stream: {named.limit.value} limit, cut at {named.cut_s:g} s ({run.name} run)"
            return Verdict(Cause.CUT, summary, (*evidence, f"{run.name}: {run.end.describe()}"), end=run.end)
    return None


def path_cuts(path: PathLimits, proxy: str | None = None) -> list[CutName]:
    """Every limit the survey found on one path, named. A silence cut only past what a total limit lets through is
    the total's cut (Envoy's 15 s route timeout ends a 16 s silence too): not named as an idle limit."""
    total = path.limit(Measure.TOTAL)
    total_s = total.longest_survived_s if total is not None and total.limited else None
    named = []
    for found in path.limits:
        explained = found.measure is not Measure.TOTAL and total_s is not None and (found.shortest_cut_s or 0) > total_s
        if not explained and (name := name_cut(found, proxy)) is not None:
            named.append(name)
    return named


def cut_lines(results: list[PathLimits], proxies: Mapping[str, str]) -> list[str]:
    """After the survey's table: each path's cuts, named, with their fix (`proxies`: URL -> catalogue name)."""
    lines = []
    for path in results:
        proxy = proxies.get(path.target)
        label = f"{proxy} ({path.target})" if proxy else path.target
        lines += [f"{label}: {named.describe()}" for named in path_cuts(path, proxy)]
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
        return name, url
    return None, text
