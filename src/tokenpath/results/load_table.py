"""The load results as the first article shows them: one row per concurrency level, figures per target."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def rich_table(doc: dict[str, Any]) -> Table:
    table = Table(title="tokenpath load: TTFT added by the path (ms), proxy CPU (cores) and RSS (MB)")
    for col in ("streams", "target", "p50", "p99", "p99.9", "CPU", "RSS", "n", "notes"):
        table.add_column(col, justify="left" if col in ("target", "notes") else "right")
    for row in doc["levels"]:
        added = row["added_ttft_ms"]
        notes = ", ".join(w["kind"] for w in row["warnings"])
        if row["frames_lost"] or row["frames_out_of_order"]:
            notes = ", ".join(
                filter(None, [notes, f"{row['frames_lost']} lost/{row['frames_out_of_order']} reordered"])
            )
        if row["errors"]:
            notes = ", ".join(filter(None, [notes, f"{row['errors']} errors"]))
        style = "yellow" if row["unreliable"] else ""
        table.add_row(
            str(row["concurrency"]), row["target"], _ms(added["p50"]), _ms(added["p99"]), _ms(added["p999"]),
            "-" if row["cpu_cores"] is None else f"{row['cpu_cores']:.2f}",
            "-" if row["rss_mb"] is None else f"{row['rss_mb']:.0f}", str(row["streams"]),
            f"[{style}]{notes}[/]" if style else notes,
        )  # fmt: skip
    return table


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| streams | target | p50 ms | p99 ms | p99.9 ms | CPU cores | RSS MB | streams measured | warnings |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for row in doc["levels"]:
        added = row["added_ttft_ms"]
        cpu = "-" if row["cpu_cores"] is None else f"{row['cpu_cores']:.2f}"
        rss = "-" if row["rss_mb"] is None else f"{row['rss_mb']:.0f}"
        warn = "; ".join(f"{w['kind']}: {w['message']}" for w in row["warnings"]) or "-"
        lines.append(f"| {row['concurrency']} | {row['target']} | {_ms(added['p50'])} | {_ms(added['p99'])} | "
                     f"{_ms(added['p999'])} | {cpu} | {rss} | {row['streams']} | {warn} |")  # fmt: skip
    return "\n".join(lines) + "\n"
