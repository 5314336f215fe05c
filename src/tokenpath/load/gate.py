"""`load --fail-on`: a CI gate on a load run, as k6 thresholds are, with the monitor's rule syntax (monitor/rules.py).

    --fail-on 'added_ttft_p99>5ms,frames_lost>0'

Each rule is checked on every row (target x level) but the direct path's, which is the floor the others are measured
against (a run with only the direct path checks it). A rule nothing was measured for is breached, as in the monitor:
a gate that opens when every stream failed is no gate. The process exits 14 (RuleBreached) after the table.

A target whose every stream failed is a finding, shown in the table with why (as in `matrix`, and as k6 exits 0 without
thresholds): the gate is what fails a run on it. The direct path's streams all failing is not: the stub or the client
failed, no target has a floor to be judged by, and the run exits 20 (InstrumentError) before the rules are read, as a
matrix whose direct path kept no run does (`refuse_no_floor`).

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

from tokenpath.errors import InstrumentError, RuleBreached
from tokenpath.monitor.rules import MetricSet, Rule, parse_rules
from tokenpath.progress import one_line
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


def failed_floor(results: LoadResults) -> list[LoadRow]:
    """The direct path's rows that kept no stream for the figures while some failed (errors, the stub's audit,
    unjoined: the last two are among `streams`, which counts every stream that ended, so `kept` says what the
    figures hold). A window too short for one whole stream kept none either, but failed none, and is the
    configuration's, not a failure."""
    return [
        r
        for r in results.levels
        if r.target == "direct" and not _kept(r) and r.errors + r.audit_failed + r.unjoined > 0
    ]


def _kept(row: LoadRow) -> int:
    return row.kept if row.kept is not None else row.streams  # files before `kept`: streams was what it held


def _why(row: LoadRow) -> str:
    started = row.streams_total if row.streams_total is not None else row.errors
    named = row.errors + row.audit_failed + row.unjoined  # `excluded` is every stream not kept, these among them
    counts = {"failed": row.errors, "missed the stub's schedule": row.audit_failed, "unjoined": row.unjoined,
              "left out of the figures": max(0, (row.excluded or 0) - named)}  # fmt: skip
    lost = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    sample = f"; e.g. {one_line(row.error_samples[0])}" if row.error_samples else ""
    return (
        f"{row.target} @ {row.level_label}: no stream kept of {started} started"
        + (f" ({lost})" if lost else "")
        + sample
    )


def _listed(rows: list[LoadRow]) -> str:
    lines = [_why(r) for r in rows]
    return lines[0] + "".join(f"\n  also: {line}" for line in lines[1:])


def refuse_no_floor(results: LoadResults) -> None:
    """Raises InstrumentError (exit 20) when the direct path's streams failed at a level and it kept none: the stub
    or the client failed, and nothing through a target there can be told from it (as `matrix` ends,
    cli/common.end_matrix)."""
    rows = failed_floor(results)
    if rows:
        raise InstrumentError(f"the direct path failed, so no target can be judged: {_listed(rows)}")
