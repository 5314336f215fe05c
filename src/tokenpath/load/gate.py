"""`load --fail-on`: a CI gate on a load run, as k6 thresholds are, with the monitor's rule syntax (monitor/rules.py).

    --fail-on 'added_ttft_p99>5ms,frames_lost>0'

Each rule is checked on every row (target x level) but the direct path's, which is the floor the others are measured
against (a run with only the direct path checks it). A rule nothing was measured for is breached, as in the monitor:
a gate that opens when every stream failed is no gate. The process exits 14 (RuleBreached) after the table.

| metric | what | unit |
|---|---|---|
| added_ttft_pNN | percentile NN of the TTFT the path added (open loop: counted from the schedule) | ms or s |
| frames_lost, frames_out_of_order | content frames missing / out of place, over every stream | - |
| errors, unjoined, audit_failed | streams that failed / could not be joined / missed the stub's schedule | - |
| cpu_cores, rss_mb | the proxy's mean CPU (cores) and RSS (MB); rows without a process are skipped | - |
| error_rate, exclusion_share | failed streams / started; streams excluded from the figures / started | share or % |
"""

from __future__ import annotations

from dataclasses import dataclass

from hdrh.histogram import HdrHistogram

from tokenpath.errors import RuleBreached
from tokenpath.monitor.rules import MetricSet, Rule, parse_rules
from tokenpath.results.model import LoadResults, LoadRow

LOAD_METRICS = MetricSet(
    timed=("added_ttft",),
    plain=("frames_lost", "frames_out_of_order", "errors", "unjoined", "audit_failed", "cpu_cores", "rss_mb"),
    share=("error_rate", "exclusion_share"),
)
OPTIONAL = ("cpu_cores", "rss_mb")  # no process to sample (the direct path, an external --target): not applicable
# Counted over the streams that completed: with none, 0 lost frames is not a measurement (every stream failed, or
# none ran) and the rule has no value, so it breaches.
PER_COMPLETED_STREAM = ("frames_lost", "frames_out_of_order", "audit_failed", "unjoined")


def parse_load_rules(text: str) -> tuple[Rule, ...]:
    return parse_rules(text, LOAD_METRICS)


@dataclass(frozen=True, slots=True)
class LoadBreach:
    rule: Rule
    target: str
    level: str
    value: float | None

    def line(self) -> str:
        return f"{self.rule.text} breached on {self.target} @ {self.level}: {self.rule.shown(self.value)}"


def row_value(rule: Rule, row: LoadRow) -> float | None:
    """The rule's metric on one row, in the rule's units (seconds for times, a share for shares)."""
    if rule.base == "added_ttft":
        encoded = row.histogram_corrected or row.histogram
        if encoded is None or rule.percentile is None:
            return None
        hist = HdrHistogram.decode(encoded)
        return float(hist.get_value_at_percentile(rule.percentile)) / 1e6 if hist.get_total_count() else None
    if rule.base == "error_rate":
        total = row.streams_total if row.streams_total is not None else row.streams + row.errors
        return row.errors / total if total else None
    if rule.base in PER_COMPLETED_STREAM and not row.streams:
        return None
    value = getattr(row, rule.base)
    return None if value is None else float(value)


def check(rules: tuple[Rule, ...], results: LoadResults) -> list[LoadBreach]:
    rows = [r for r in results.levels if r.target != "direct"] or list(results.levels)
    if not rows:  # interrupted before a row was measured: nothing passed the gate
        return [LoadBreach(rule, "every target", "every level", None) for rule in rules]
    breaches = []
    for rule in rules:
        for row in rows:
            value = row_value(rule, row)
            if value is None and rule.base in OPTIONAL:
                continue
            if rule.breached(value):
                breaches.append(LoadBreach(rule, row.target, row.level_label, value))
    return breaches


def finish(breaches: list[LoadBreach]) -> None:
    """Raises RuleBreached (exit 14) naming every breach; the caller has shown the table already."""
    if breaches:
        lines = [b.line() for b in breaches]
        raise RuleBreached(lines[0] + "".join(f"\n  also: {line}" for line in lines[1:]))
