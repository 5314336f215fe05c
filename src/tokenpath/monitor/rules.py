"""`--fail-on` rules for `tokenpath monitor --once`: a deploy pipeline's gate.

    --fail-on 'added_ttft_p95>50ms,fpr>1.5'

A rule is METRIC OP VALUE[UNIT], rules are separated by commas, and each is checked on every target it applies to.
A rule that cannot be checked because nothing was measured (every probe failed) counts as breached: a gate that
opens when the endpoint is down is no gate.

| metric | what | unit |
|---|---|---|
| ttft_pNN, ttfb_pNN | percentile NN (1-100) of the probes via the path | ms (default) or s |
| added_ttft_pNN | percentile of (via - direct) per cycle; targets with a `direct_url` only | ms or s |
| gap_pNN | percentile of the time between arrivals, over every probe via the path | ms or s |
| fpr, fpr_max | median / largest frames per read via the path | - |
| coalescing | modal burst via the path (frames most arrivals carried) | - |
| failure_rate | failed probes / probes, both routes | share (0.1) or % (10%) |
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from tokenpath.errors import UsageError

_RULE = re.compile(r"^\s*([a-z_]+?)(?:_p(\d{1,3}(?:\.\d+)?))?\s*(>=|<=|>|<)\s*([0-9]*\.?[0-9]+)\s*(ms|s|%)?\s*$")
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
TIMED = ("ttft", "ttfb", "added_ttft", "gap")  # take a percentile and a time unit
PLAIN = ("fpr", "fpr_max", "coalescing")
SHARE = ("failure_rate",)


@dataclass(frozen=True, slots=True)
class MetricSet:
    """The metrics one gate knows (the monitor's above; `load --fail-on` has its own): timed ones take a percentile
    and a time unit, plain ones a bare number, shares 0.1 or 10%."""

    timed: tuple[str, ...]
    plain: tuple[str, ...] = ()
    share: tuple[str, ...] = ()
    example: str = ""  # a rule of this gate's, for the messages; default: its first timed metric's p95 > 50 ms

    @property
    def known(self) -> str:
        return ", ".join([*(f"{t}_pNN" for t in self.timed), *self.plain, *self.share])

    @property
    def sample(self) -> str:
        """A rule this gate takes, as a message's example (never another gate's metric)."""
        if self.example:
            return self.example
        if self.timed:
            return f"{self.timed[0]}_p95>50ms"
        return f"{self.plain[0]}>0" if self.plain else f"{self.share[0]}>10%"


MONITOR_METRICS = MetricSet(TIMED, PLAIN, SHARE, example="ttft_p95>2s")


@dataclass(frozen=True, slots=True)
class Rule:
    text: str  # as the user wrote it, for the message
    metric: str  # e.g. "added_ttft_p95", "fpr"
    op: str
    threshold: float  # seconds for times, a share for failure_rate
    base: str = ""  # the metric without its percentile: "added_ttft", "fpr"
    percentile: float | None = None  # for the TIMED metrics
    share: bool = False  # a share (shown in %)

    def breached(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return True  # nothing measured
        return _OPS[self.op](value, self.threshold)

    def shown(self, value: float | None) -> str:
        if value is None or math.isnan(value):
            return "nothing measured"
        if self.percentile is not None:  # only timed metrics take one
            return f"{value * 1000:.1f} ms"
        if self.share or self.base in SHARE:
            return f"{value * 100:.1f} %"
        return f"{value:.2f}"


def parse_rules(text: str, metrics: MetricSet = MONITOR_METRICS) -> tuple[Rule, ...]:
    rules = []
    for part in (p for p in text.split(",") if p.strip()):
        m = _RULE.match(part)
        if not m:
            raise UsageError(f"`fail_on` {part.strip()!r}: expected METRIC>VALUE, e.g. {metrics.sample}")
        base, pct, op, number, unit = m.groups()
        value = float(number)
        if base in metrics.timed:
            if pct is None or not 0 < float(pct) <= 100:
                raise UsageError(f"`fail_on` {part.strip()!r}: {base} takes a percentile, e.g. {base}_p95")
            if unit == "%":
                raise UsageError(f"`fail_on` {part.strip()!r}: a time is in ms or s")
            threshold = value if unit == "s" else value / 1000
            metric = f"{base}_p{pct}"
        elif base in metrics.plain or base in metrics.share:
            if pct is not None:
                raise UsageError(f"`fail_on` {part.strip()!r}: {base} takes no percentile")
            if base in metrics.plain and unit:
                raise UsageError(f"`fail_on` {part.strip()!r}: {base} is a plain number (no unit)")
            if base in metrics.share and unit in ("ms", "s"):
                raise UsageError(f"`fail_on` {part.strip()!r}: a share is 0.1 or 10%")
            if base in metrics.share and unit is None and value > 1:  # 10 would be 1000 %: a gate that never fires
                raise UsageError(
                    f"`fail_on` {part.strip()!r}: a share is at most 1; write {number}% or {value / 100:g}"
                )
            if base in metrics.share and unit == "%" and value > 100:
                raise UsageError(f"`fail_on` {part.strip()!r}: a share is at most 100%")
            threshold = value / 100 if unit == "%" else value
            metric = base
        else:
            raise UsageError(f"`fail_on` {part.strip()!r}: unknown metric {base!r}; known: {metrics.known}")
        share = base in metrics.share
        rules.append(Rule(part.strip(), metric, op, threshold, base, float(pct) if pct else None, share))
    if not rules:
        raise UsageError(f"`fail_on` is empty: give at least one rule, e.g. '{metrics.sample}'")
    return tuple(rules)
