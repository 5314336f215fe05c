"""Renderings of a matrix results document: Markdown table, CSV, and the terminal (rich)."""

from __future__ import annotations

import csv
import io
from typing import Any

from rich.table import Table

ROW_KEYS = (
    "proxy", "variant", "interval_ms", "frame_bytes", "link", "tls", "stub_headers", "runs", "excluded",
    "fpr_median", "fpr_min", "fpr_max", "added_ttft_ms_median", "added_ttft_ms_p90", "modal_burst",
    "modal_burst_gap_ms", "within_floor", "verdict",
)  # fmt: skip


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def cells(row: dict[str, Any]) -> list[str]:
    path = row["proxy"] if row["variant"] == "stock" else f"{row['proxy']} ({row['variant']})"
    condition = condition_label(row)
    spread = f"{_fmt(row.get('fpr_min'), 2)}-{_fmt(row.get('fpr_max'), 2)}"
    added = f"{_fmt(row.get('added_ttft_ms_median'))} / {_fmt(row.get('added_ttft_ms_p90'))}"
    burst = f"{_fmt(row.get('modal_burst'))} / {_fmt(row.get('modal_burst_gap_ms'))}"
    return [
        path, condition, _fmt(row.get("fpr_median"), 2), spread, added, burst,
        f"{row['runs'] - row['excluded']}/{row['runs']}", row["verdict"],
    ]  # fmt: skip


HEADERS = (
    "path", "condition", "fpr", "fpr range", "added TTFT ms (p50 / p90)", "burst / gap ms", "runs kept",
    "verdict",
)  # fmt: skip


def condition_label(row: dict[str, Any]) -> str:
    """One condition in words; the same for a Condition, a row and a floor (they are matched by it)."""
    label = f"{row['frame_bytes']} B @ {row['interval_ms']:g} ms, {row['link']}{', tls' if row['tls'] else ''}"
    headers = row.get("stub_headers") or {}
    if headers:
        label += ", stub sends " + "; ".join(f"{k}: {v}" for k, v in headers.items())
    return label


def exclusion_shares(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs kept of runs made, per condition and overall: seed 003 publishes "1.7 % to 11.7 % per condition"."""
    by_condition: dict[str, list[int]] = {}
    for row in doc["rows"]:
        counts = by_condition.setdefault(condition_label(row), [0, 0])
        counts[0] += row["excluded"]
        counts[1] += row["runs"]
    by_condition["all"] = [sum(e for e, _ in by_condition.values()), sum(n for _, n in by_condition.values())]
    return [
        {"condition": c, "excluded": e, "runs": n, "share": e / n if n else 0.0} for c, (e, n) in by_condition.items()
    ]


def describe_share(share: dict[str, Any]) -> str:
    return f"{share['excluded']} of {share['runs']} runs excluded ({100 * share['share']:.1f} %)"


def describe_drift(drift: dict[str, Any]) -> str:
    if not drift.get("writes"):
        return "not measured (no write log joined)"
    return f"p50 {drift['p50']:.3f} / p99 {drift['p99']:.3f} / max {drift['max']:.3f} ms over {drift['writes']} writes"


def title(doc: dict[str, Any]) -> str:
    cert = doc.get("certification", {})
    prefix = "" if cert.get("passed") else "UNCERTIFIED: "
    name = doc["experiment"]["name"].removeprefix(f"{doc['kind']}: ")  # sweeps are named "sweep: ..."
    return f"{prefix}tokenpath {doc['kind']}: {name}"


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"# {title(doc)}", ""]
    lines.append(f"Measured {doc['created']} on {doc['host']['hostname']} (kernel {doc['host']['kernel']}, "
                 f"{doc['host']['cpus']} CPUs), tokenpath {doc['tool']['version']}.")  # fmt: skip
    lines.append(f"Exclusion rule, declared before the run: {doc['experiment']['exclusion']['rule']}.")
    for where, drift in doc.get("certification", {}).get("emitter_drift_ms", {}).items():
        lines.append(f"Emitter drift during certification ({where}): {describe_drift(drift)}.")
    lines += ["", "Exclusions per condition:"]
    lines += [f"- {s['condition']}: {describe_share(s)}" for s in exclusion_shares(doc)]
    lines.append("")
    lines.append("| " + " | ".join(HEADERS) + " |")
    lines.append("|" + "|".join("---" for _ in HEADERS) + "|")
    for row in doc["rows"]:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(row)) + " |")
    if doc.get("skipped"):
        lines += ["", "Not measured:"] + [f"- {s['path']}: {s['reason']}" for s in doc["skipped"]]
    lines += ["", "Versions: " + ", ".join(f"{n} {p['version']}" for n, p in doc.get("proxies", {}).items())]
    if doc.get("interrupted"):
        lines += ["", "**Interrupted**: rows with fewer runs than planned are partial."]
    return "\n".join(lines) + "\n"


def csv_text(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(ROW_KEYS)
    for row in doc["rows"]:
        writer.writerow([_csv_value(row.get(k)) for k in ROW_KEYS])
    return buf.getvalue()


def _csv_value(value: Any) -> Any:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v}" for k, v in value.items())
    return value


def seen_as(row: dict[str, Any]) -> str:
    """The verdict in two words, for narrow tables."""
    if row.get("fpr_median") is None:
        return str(row["verdict"])
    if row.get("within_floor"):
        return "streams"
    if (row.get("arrivals_median") or 0) <= 1:
        return "buffers all"
    if row["fpr_median"] > 1.05:
        return f"bursts of {row.get('modal_burst')}"
    return "late"


def rich_table(doc: dict[str, Any]) -> Table:
    """Narrow enough for an 80-column terminal; table.md has every column."""
    certified = doc["certification"].get("passed")
    table = Table(title=title(doc), title_style="bold" if certified else "bold red")
    for header in ("path", "condition", "fpr", "+TTFT ms", "p90", "kept", "seen as"):
        table.add_column(header, justify="left" if header in ("path", "condition", "seen as") else "right")
    for row in doc["rows"]:
        style = "green" if row.get("within_floor") else ("yellow" if row.get("within_floor") is False else "red")
        path = row["proxy"] if row["variant"] == "stock" else f"{row['proxy']} {row['variant']}"
        link = {"loopback": "lo", "veth": "veth"}[row["link"]] + (" tls" if row["tls"] else "")
        link += " +hdr" if row.get("stub_headers") else ""
        table.add_row(
            path, f"{row['frame_bytes']}B/{row['interval_ms']:g}ms {link}", _fmt(row.get("fpr_median"), 2),
            _fmt(row.get("added_ttft_ms_median")), _fmt(row.get("added_ttft_ms_p90")),
            f"{row['runs'] - row['excluded']}/{row['runs']}", f"[{style}]{seen_as(row)}[/]",
        )  # fmt: skip
    return table
