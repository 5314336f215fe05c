"""`monitor --once`'s terminal table: one row per target and route."""

from __future__ import annotations

import json

from rich.table import Table

from tokenpath.monitor.runner import Breach, RouteSamples, TargetSummary
from tokenpath.progress import escaped
from tokenpath.stats import median, percentile


def _ms(values: list[float], p: float) -> str:
    ms = _ms_or_none(values, p)
    return "-" if ms is None else f"{ms:.1f}"


def summary_table(summaries: list[TargetSummary]) -> Table:
    table = Table(title="tokenpath monitor --once")
    for col in (
        "target",
        "route",
        "probes",
        "failed",
        "TTFB p50 ms",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "fpr",
        "coalescing",
        "added TTFT p50 ms",
        "added p95 ms",
    ):
        table.add_column(col, justify="right")
    for s in summaries:
        for route, r in s.routes.items():
            failed = str(r.failures) + (
                f" ({', '.join(f'{k} {v}' for k, v in sorted(r.reasons.items()))})" if r.reasons else ""
            )
            modal = r.bursts.modal()
            added = s.added_s if route == "via" and "direct" in s.routes else []
            table.add_row(
                escaped(s.name),  # the config file's name for the target, as typed
                route,
                str(r.probes),
                escaped(failed),  # the failures' reasons
                _ms(r.ttfb_s, 50),
                _ms(r.ttft_s, 50),
                _ms(r.ttft_s, 95),
                f"{median(r.fpr):.2f}" if r.fpr else "-",
                "-" if modal is None else str(modal),
                _ms(added, 50),
                _ms(added, 95),
            )
    return table


def _ms_or_none(values: list[float], p: float) -> float | None:
    return round(percentile(sorted(values), p) * 1000, 3) if values else None


def _route_json(r: RouteSamples, added: list[float] | None) -> dict[str, object]:
    out: dict[str, object] = {
        "probes": r.probes,
        "failures": r.failures,
        "failure_reasons": dict(sorted(r.reasons.items())),
        "ttfb_ms": {"p50": _ms_or_none(r.ttfb_s, 50)},
        "ttft_ms": {"p50": _ms_or_none(r.ttft_s, 50), "p95": _ms_or_none(r.ttft_s, 95)},
        "fpr_median": median(r.fpr) if r.fpr else None,
        "coalescing": r.bursts.modal(),
    }
    if added is not None:
        out["added_ttft_ms"] = {"p50": _ms_or_none(added, 50), "p95": _ms_or_none(added, 95)}
    return out


def summary_json(summaries: list[TargetSummary], breaches: list[Breach]) -> dict[str, object]:
    """`monitor --once --json`: the table's figures per target and route, and the rules breached (the exit code
    says the same: 14 when any was)."""
    targets = [
        {
            "name": s.name,
            "routes": {
                route: _route_json(r, s.added_s if route == "via" and "direct" in s.routes else None)
                for route, r in s.routes.items()
            },
        }
        for s in summaries
    ]
    return {
        "targets": targets,
        "breaches": [
            {"rule": b.rule.text, "target": b.target, "value": b.value, "message": b.line()} for b in breaches
        ],
    }


def summary_document(summaries: list[TargetSummary], breaches: list[Breach]) -> str:
    """`monitor --once --json`'s stdout: summary_json as one JSON document."""
    return json.dumps(summary_json(summaries, breaches), indent=1)
