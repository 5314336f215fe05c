"""`monitor --once`'s terminal table: one row per target and route."""

from __future__ import annotations

from rich.table import Table

from tokenpath.monitor.runner import TargetSummary
from tokenpath.stats import median, percentile


def _ms(values: list[float], p: float) -> str:
    return f"{percentile(sorted(values), p) * 1000:.1f}" if values else "-"


def summary_table(summaries: list[TargetSummary]) -> Table:
    table = Table(title="tokenpath monitor --once")
    for col in ("target", "route", "probes", "failed", "TTFB p50 ms", "TTFT p50 ms", "TTFT p95 ms", "fpr",
                "coalescing", "added TTFT p50 ms", "added p95 ms"):  # fmt: skip
        table.add_column(col, justify="right")
    for s in summaries:
        for route, r in s.routes.items():
            failed = str(r.failures) + (f" ({', '.join(f'{k} {v}' for k, v in sorted(r.reasons.items()))})"
                                        if r.reasons else "")  # fmt: skip
            modal = r.bursts.modal()
            added = s.added_s if route == "via" and "direct" in s.routes else []
            table.add_row(
                s.name, route, str(r.probes), failed, _ms(r.ttfb_s, 50), _ms(r.ttft_s, 50), _ms(r.ttft_s, 95),
                f"{median(r.fpr):.2f}" if r.fpr else "-", "-" if modal is None else str(modal),
                _ms(added, 50), _ms(added, 95),
            )  # fmt: skip
    return table
