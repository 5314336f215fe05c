"""Renderings of matrix results: Markdown table, CSV, and the terminal (rich)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from rich.table import Table

from tokenpath.probe.client import BROWSER_ACCEPT_ENCODING
from tokenpath.results.model import (
    DEFAULT_H2_WINDOW,
    HTTP11,
    IDENTITY,
    Drift,
    ExclusionShare,
    MatrixResults,
    MatrixRow,
    before_first_token_label,
    condition_label,
    exclusion_shares,
)

__all__ = ["condition_label", "exclusion_shares"]  # the rules live with the model; tables render them

ROW_KEYS = (
    "proxy",
    "variant",
    "interval_ms",
    "frame_bytes",
    "link",
    "tls",
    "stub_headers",
    "endpoint",
    "api",
    "accept_encoding",
    "content_encoding",
    "http_version",
    "h2_window",
    "runs",
    "excluded",
    "fpr_median",
    "fpr_min",
    "fpr_max",
    "ttft_ms_median",
    "added_ttft_ms_median",
    "added_ttft_ms_p90",
    "modal_burst",
    "modal_burst_gap_ms",
    "within_floor",
    "verdict",
)


def side_by_side(rows: Sequence[MatrixRow]) -> list[MatrixRow]:
    """The rows in measured order, except that a proxy's versions (`traefik`, `traefik@3.3.2`, `traefik@3.7.15`)
    stand next to each other in each condition and variant, oldest release first: a regression between versions
    is read across adjacent lines."""
    first: dict[tuple[str, str, str], int] = {}
    for i, row in enumerate(rows):
        first.setdefault((condition_label(row), row.proxy.partition("@")[0], row.variant), i)

    def key(item: tuple[int, MatrixRow]) -> tuple[int, tuple[int, ...], int]:
        i, row = item
        base, _, version = row.proxy.partition("@")
        release = tuple(int(part) for part in version.split(".") if part.isdigit())  # () = the catalogue's own
        return first[(condition_label(row), base, row.variant)], release, i

    return [row for _, row in sorted(enumerate(rows), key=key)]


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def cells(row: MatrixRow) -> list[str]:
    spread = f"{_fmt(row.fpr_min, 2)}-{_fmt(row.fpr_max, 2)}"
    added = f"{_fmt(row.added_ttft_ms_median)} / {_fmt(row.added_ttft_ms_p90)}"
    if row.endpoint:  # no stub write to compare with: the direct stream of the same round
        added += " vs direct"
    burst = f"{_fmt(row.modal_burst)} / {_fmt(row.modal_burst_gap_ms)}"
    return [
        row.path_label,
        condition_label(row),
        _fmt(row.fpr_median, 2),
        spread,
        _fmt(row.ttft_ms_median),
        added,
        burst,
        f"{row.kept}/{row.runs}",
        row.verdict,
    ]


HEADERS = (
    "path",
    "condition",
    "fpr",
    "fpr range",
    "TTFT ms",
    "added TTFT ms (p50 / p90)",
    "burst / gap ms",
    "runs kept",
    "verdict",
)


Column = tuple[str, Callable[[MatrixRow], str]]


def _asked(value: str) -> str:
    return "browser" if value == BROWSER_ACCEPT_ENCODING else value


def varying_columns(rows: Sequence[MatrixRow]) -> list[Column]:
    """The format and the encoding as columns of their own, where the rows vary them (or ask for compression):
    `asked -> answered` puts the request's Accept-Encoding beside the Content-Encoding the path chose."""
    out: list[Column] = []
    if len({r.api for r in rows}) > 1:
        out.append(("api", lambda r: r.api))
    if any(r.http_version != HTTP11 for r in rows):  # issue 25: the client's HTTP version
        out.append(("HTTP (client)", _http))
    if any(r.accept_encoding != IDENTITY for r in rows):
        out.append(("encoding (asked -> answered)", lambda r: f"{_asked(r.accept_encoding)} -> {r.content_encoding}"))
    if any(before_first_token_label(r) for r in rows):  # issue 24 §4: what the stub sent around the first token
        out.append(("pre-token (stub sent before the first token)", _pre_token))
    if any(r.first_token_ms_median is not None for r in rows):
        out.append(("first-token ms (reasoning or content; TTFT is content)", lambda r: _fmt(r.first_token_ms_median)))
    if any((r.after_first_delay_ms_p99 or 0) >= AFTER_FIRST_SHOWN_MS for r in rows):  # issue 24 §6
        out.append(("added delay after the first token ms (p50 / p99)", _after_first))
    return out


def _http(row: MatrixRow) -> str:
    """The client's HTTP version, and over HTTP/2 its windows when not the default."""
    if row.http_version == HTTP11 or row.h2_window == DEFAULT_H2_WINDOW:
        return row.http_version
    return f"{row.http_version} (window {row.h2_window})"


# The after-first-token column appears once some path adds this much to a later frame: below it every row reads
# ~0 on one host and the column would only widen the table.
AFTER_FIRST_SHOWN_MS = 1.0


def _after_first(row: MatrixRow) -> str:
    if row.after_first_delay_ms_p50 is None or row.after_first_delay_ms_p99 is None:
        return "-"
    return f"{row.after_first_delay_ms_p50:.1f} / {row.after_first_delay_ms_p99:.1f}"


def _pre_token(row: MatrixRow) -> str:
    """Compact: `hb 15000ms r8 fe 16384B head@token`, or "-"."""
    parts = [f"hb {row.heartbeat_ms:g}ms"] if row.heartbeat_ms else []
    parts += [f"r{row.reasoning_tokens}"] if row.reasoning_tokens else []
    parts += [f"fe {row.first_event_bytes}B"] if row.first_event_bytes else []
    parts += ["head@token"] if row.head_at != "start" else []
    return " ".join(parts) or "-"


def headers_for(rows: Sequence[MatrixRow]) -> list[str]:
    """HEADERS, with the varying columns after the condition."""
    return [*HEADERS[:2], *(name for name, _ in varying_columns(rows)), *HEADERS[2:]]


def cells_for(row: MatrixRow, columns: Sequence[Column]) -> list[str]:
    base = cells(row)
    return [*base[:2], *(value(row) for _, value in columns), *base[2:]]


def describe_share(share: ExclusionShare) -> str:
    return f"{share.excluded} of {share.runs} runs excluded ({100 * share.share:.1f} %)"


def describe_drift(drift: Drift) -> str:
    if not drift.writes or drift.p50 is None or drift.p99 is None or drift.max is None:
        return "not measured (no write log joined)"
    return f"p50 {drift.p50:.3f} / p99 {drift.p99:.3f} / max {drift.max:.3f} ms over {drift.writes} writes"


def endpoint_note(results: MatrixResults) -> str | None:
    """What rows against a real endpoint can and cannot say (experiment/endpoint.py), when there are any."""
    upstream = results.experiment.get("upstream")
    if not isinstance(upstream, dict):
        return None
    return f"Upstream {upstream.get('origin')} (model {upstream.get('model')}): {upstream.get('note')}."


def title(results: MatrixResults) -> str:
    prefix = "" if results.certification.passed else "UNCERTIFIED: "
    name = str(results.experiment["name"]).removeprefix(f"{results.kind}: ")  # sweeps are named "sweep: ..."
    return f"{prefix}tokenpath {results.kind}: {name}"


def markdown(results: MatrixResults) -> str:
    prov = results.provenance
    lines = [f"# {title(results)}", ""]
    lines.append(
        f"Measured {prov.created} on {prov.host.hostname} (kernel {prov.host.kernel}, "
        f"{prov.host.cpus} CPUs), tokenpath {prov.tool.version}."
    )
    lines.append(f"Exclusion rule, declared before the run: {results.experiment['exclusion']['rule']}.")
    note = endpoint_note(results)
    if note:
        lines.append(f"**{note}** Certification and the controls ran on the stub.")
    for where, drift in results.certification.emitter_drift_ms.items():
        lines.append(f"Emitter drift during certification ({where}): {describe_drift(drift)}.")
    lines += ["", "Exclusions per condition:"]
    lines += [f"- {s.condition}: {describe_share(s)}" for s in results.exclusion_shares]
    lines.append("")
    headers, columns = headers_for(results.rows), varying_columns(results.rows)
    lines.append("| " + " | ".join(headers) + " |")
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    for row in side_by_side(results.rows):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells_for(row, columns)) + " |")
    lines += _variant_lines(results)
    if results.skipped:
        lines += ["", "Not measured:"] + [f"- {s.path}: {s.reason}" for s in results.skipped]
    lines += ["", "Versions: " + ", ".join(f"{n} {p.version}" for n, p in results.proxies.items())]
    if results.interrupted:
        lines += ["", "**Interrupted**: rows with fewer runs than planned are partial."]
    return "\n".join(lines) + "\n"


def _variant_lines(results: MatrixResults) -> list[str]:
    """Each measured variant's config line (proxies/ Variant.line), so a row's fix can be copied from the table."""
    lines = [
        f"- {name} ({variant}): `{info['line']}`"
        for name, proxy in results.proxies.items()
        for variant, info in proxy.variants.items()
        if info.get("line")
    ]
    return ["", "Config lines of the variants:", *lines] if lines else []


def csv_text(results: MatrixResults) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(ROW_KEYS)
    for row in results.rows:
        writer.writerow([_csv_value(getattr(row, k)) for k in ROW_KEYS])
    return buf.getvalue()


assert set(ROW_KEYS) <= {f.name for f in fields(MatrixRow)}, "a CSV column names a field the row does not have"


def _csv_value(value: Any) -> Any:
    if isinstance(value, dict | Mapping):
        return "; ".join(f"{k}: {v}" for k, v in value.items())
    return value


def seen_as(row: MatrixRow) -> str:
    """The verdict in two words, for narrow tables."""
    if row.fpr_median is None:
        return row.verdict
    if row.within_floor:
        return "streams"
    if (row.arrivals_median or 0) <= 1:
        return "buffers all"
    if row.fpr_median > 1.05:
        return f"bursts of {row.modal_burst}"
    return "late"


def rich_table(results: MatrixResults) -> Table:
    """Narrow enough for an 80-column terminal; table.md has every column."""
    certified = results.certification.passed
    note = endpoint_note(results)
    table = Table(title=title(results), title_style="bold" if certified else "bold red", caption=note)
    columns = varying_columns(results.rows)
    names = [name.split(" ")[0] for name, _ in columns]  # narrow: "api", "encoding"
    for header in ("path", "condition", *names, "fpr", "+TTFT ms", "p90", "kept", "seen as"):
        table.add_column(header, justify="right" if header in ("fpr", "+TTFT ms", "p90", "kept") else "left")
    for row in side_by_side(results.rows):
        style = "green" if row.within_floor else ("yellow" if row.within_floor is False else "red")
        path = row.proxy if row.variant == "stock" else f"{row.proxy} {row.variant}"
        link = {"loopback": "lo", "veth": "veth"}.get(row.link, row.link) + (" tls" if row.tls else "")
        link += " +hdr" if row.stub_headers else ""
        size = f"{row.frame_bytes}B" if row.frame_bytes else "own"
        paced = "endpoint" if row.endpoint else f"{size}/{row.interval_ms:g}ms"
        table.add_row(
            path,
            f"{paced} {link}",
            *(value(row) for _, value in columns),
            _fmt(row.fpr_median, 2),
            _fmt(row.added_ttft_ms_median),
            _fmt(row.added_ttft_ms_p90),
            f"{row.kept}/{row.runs}",
            f"[{style}]{seen_as(row)}[/]",
        )
    return table
