"""The probe's terminal table: one row per stream, from the document `summarize` returns."""

from __future__ import annotations

from rich.table import Table

from tokenpath.probe.metrics import ProbeResults


def fmt(value: object, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def probe_table(results: ProbeResults) -> Table:
    table = Table(title=f"tokenpath probe {results.url}")
    for col in (
        "run",
        "status",
        "frames",
        "arrivals",
        "fpr",
        "TTFB ms",
        "TTFT ms",
        "gap p50",
        "gap p90",
        "gap max",
        "bursts (size x count)",
        "total ms",
    ):
        table.add_column(col, justify="right")
    for i, r in enumerate(results.runs, 1):
        gaps = r.gaps_ms
        table.add_row(
            str(i),
            str(r.status),
            str(r.frames),
            str(r.arrivals),
            fmt(r.frames_per_read, 2),
            fmt(r.ttfb_ms),
            fmt(r.ttft_ms),
            fmt(gaps.get("p50")),
            fmt(gaps.get("p90")),
            fmt(gaps.get("max")),
            " ".join(f"{k}x{v}" for k, v in sorted(r.bursts.items())),
            fmt(r.total_ms),
        )
    notes = [f"run {i}: {r.ttft_note}" for i, r in enumerate(results.runs, 1) if r.ttft_note]
    if notes:
        table.caption = "\n".join(notes)  # why a run has no TTFT (another API format, or no content at all)
    return table
