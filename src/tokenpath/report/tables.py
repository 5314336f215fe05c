"""Renderings of matrix results: Markdown table, CSV, and the terminal (rich)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from rich.table import Table

from tokenpath.axes import AXES, BY_FIELD, Axis, Column
from tokenpath.diagnose.shape import Kind, Seen, of_arrivals, typical
from tokenpath.progress import escaped, styled
from tokenpath.report import md
from tokenpath.results.model import (
    UNDECIDED_VERDICT,
    Drift,
    ExclusionShare,
    MatrixResults,
    MatrixRow,
    Paired,
    condition_label,
    exclusion_shares,
)
from tokenpath.wire.ending import EndKind

__all__ = ["condition_label", "exclusion_shares"]  # the rules live with the model; tables render them

# The CSV's condition columns: these first, as they always were, then every other axis (tokenpath.axes) in its order.
CSV_AXES = ("interval_ms", "frame_bytes", "link", "tls", "stub_headers", "endpoint", "api", "accept_encoding")
ROW_KEYS = (
    "proxy",
    "variant",
    *CSV_AXES,
    "content_encoding",
    *(a.field for a in AXES if a.field not in CSV_AXES),
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
    "ends",  # runs by how their stream ended (complete, cut_error, cut_silent): a cut run is excluded, and counted
    "fallback_ms_median",  # over WebSocket on a path that did not carry it: the client's fallback to SSE, its cost
)
# Against a real origin (issue 37), after the row's own figures: which origin behaviour made the verdict and the
# plain row it was judged against; a started origin's paired runs and the origin's own pace in the condition.
ORIGIN_KEYS: dict[str, Callable[[MatrixRow], Any]] = {
    "attribution": lambda r: r.attribution.words if r.attribution else None,
    "attribution_credited": lambda r: "; ".join(r.attribution.credited) if r.attribution else None,
    "attribution_baseline": lambda r: r.attribution.baseline if r.attribution else None,
    "pairs_kept": lambda r: r.pairing.kept if r.pairing else None,
    "pairs_excluded": lambda r: r.pairing.excluded if r.pairing else None,
    "pairs_excluded_because": lambda r: dict(r.pairing.reasons) if r.pairing else None,
    "paired_added_ttft_ms": lambda r: r.pairing.added_ttft_ms if r.pairing else None,
    "paired_added_ttft_ms_low": lambda r: r.pairing.added_ttft_ms_low if r.pairing else None,
    "paired_added_ttft_ms_high": lambda r: r.pairing.added_ttft_ms_high if r.pairing else None,
    "paired_added_gap_ms": lambda r: r.pairing.added_gap_ms if r.pairing else None,
    "origin_ttft_ms": lambda r: r.pairing.origin_ttft_ms if r.pairing else None,
    "origin_gap_ms": lambda r: r.pairing.origin_gap_ms if r.pairing else None,
}


def side_by_side(rows: Sequence[MatrixRow]) -> list[MatrixRow]:
    """The rows in measured order, except that a proxy's versions (`traefik`, `traefik@3.3.2`, `traefik@3.7.15`)
    stand next to each other in each condition and variant, oldest release first: a regression between versions
    is read across adjacent lines."""
    first: dict[tuple[object, str, str], int] = {}
    for i, row in enumerate(rows):
        first.setdefault((row.condition, row.proxy.partition("@")[0], row.variant), i)

    def key(item: tuple[int, MatrixRow]) -> tuple[int, tuple[int, ...], int]:
        i, row = item
        base, _, version = row.proxy.partition("@")
        release = tuple(int(part) for part in version.split(".") if part.isdigit())  # () = the catalogue's own
        return first[(row.condition, base, row.variant)], release, i

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
    if row.condition.endpoint:  # no stub write to compare with: the direct stream of the same round
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


TableColumn = tuple[str, Callable[[MatrixRow], str]]


def varying_columns(rows: Sequence[MatrixRow]) -> list[TableColumn]:
    """The axes' columns (tokenpath.axes: the format, the client's HTTP version, the encoding, what the stub sent)
    where the rows move them off their defaults (the format: where the rows differ in it), then the figures only
    some rows have. `asked -> answered` puts the request's Accept-Encoding beside the
    Content-Encoding the path chose."""
    conditions = [r.condition for r in rows]
    out: list[TableColumn] = []
    for column, axes in _axis_columns():
        values = {tuple(getattr(c, a.field) for a in axes) for c in conditions}
        off = tuple(a.default for a in axes)
        if (len(values) > 1) if column.varies else any(v != off for v in values):
            out.append((column.header, _axis_cell(column, axes)))
    if any(r.first_token_ms_median is not None for r in rows):
        out.append(("first-token ms (reasoning or content; TTFT is content)", lambda r: _fmt(r.first_token_ms_median)))
    if any((r.after_first_delay_ms_p99 or 0) >= AFTER_FIRST_SHOWN_MS for r in rows):  # issue 24 §6
        out.append(("added delay after the first token ms (p50 / p99)", _after_first))
    if any(r.fallback_ms_median is not None for r in rows):  # issue 38: WebSocket not carried, SSE after N upgrades
        out.append(
            ("WebSocket fallback ms (first upgrade -> first token over SSE)", lambda r: _fmt(r.fallback_ms_median))
        )
    if any(kind != EndKind.COMPLETE for r in rows for kind in r.ends):  # issue 36: a path that cuts streams
        out.append(("ends (runs by how their stream ended; a cut one is excluded)", ends_cell))
    return out


def ends_cell(row: MatrixRow) -> str:
    """`3/3 complete`, or each kind seen: `1 complete, 2 cut_silent` (wire/ending.py's order)."""
    ends = row.ends
    if not ends:
        return "-"
    if set(ends) == {EndKind.COMPLETE.value}:
        return f"{ends[EndKind.COMPLETE.value]}/{row.runs} complete"
    return ", ".join(f"{ends[kind.value]} {kind.value}" for kind in EndKind if ends.get(kind.value))


def _axis_columns() -> list[tuple[Column, list[Axis[Any]]]]:
    """Each column the axes fill, with its axes, in AXES' order."""
    columns: dict[Column, list[Axis[Any]]] = {}
    for axis in AXES:
        if axis.column is not None:
            columns.setdefault(axis.column, []).append(axis)
    return list(columns.items())


def _axis_cell(column: Column, axes: list[Axis[Any]]) -> Callable[[MatrixRow], str]:
    """What each of the column's axes says of a row's condition ("-": nothing), and the row's answer to it."""

    def cell(row: MatrixRow) -> str:
        cond = row.condition
        text = " ".join(t for a in axes if a.cell is not None and a.applies(cond) and (t := a.cell(cond))) or "-"
        return f"{text} -> {getattr(row, column.answered_by)}" if column.answered_by else text

    return cell


# The after-first-token column appears once some path adds this much to a later frame: below it every row reads
# ~0 on one host and the column would only widen the table.
AFTER_FIRST_SHOWN_MS = 1.0


def _after_first(row: MatrixRow) -> str:
    if row.after_first_delay_ms_p50 is None or row.after_first_delay_ms_p99 is None:
        return "-"
    return f"{row.after_first_delay_ms_p50:.1f} / {row.after_first_delay_ms_p99:.1f}"


def headers_for(rows: Sequence[MatrixRow]) -> list[str]:
    """HEADERS, with the varying columns after the condition."""
    return [*HEADERS[:2], *(name for name, _ in varying_columns(rows)), *HEADERS[2:]]


def cells_for(row: MatrixRow, columns: Sequence[TableColumn]) -> list[str]:
    base = cells(row)
    return [*base[:2], *(value(row) for _, value in columns), *base[2:]]


def describe_share(share: ExclusionShare) -> str:
    return f"{share.excluded} of {share.runs} runs excluded ({100 * share.share:.1f} %)"


def describe_drift(drift: Drift) -> str:
    if not drift.writes or drift.p50 is None or drift.p99 is None or drift.max is None:
        return "not measured (no write log joined)"
    return f"p50 {drift.p50:.3f} / p99 {drift.p99:.3f} / max {drift.max:.3f} ms over {drift.writes} writes"


def describe_origin_pace(p: Paired) -> str:
    """A started origin's own pace over a condition's direct streams (experiment/pairs.py), apart from the paths'."""
    if p.origin_ttft_ms is None:
        return f"the origin itself, over {p.directs} direct streams: no first token"
    said = (
        f"the origin itself, over {p.directs} direct streams: TTFT {p.origin_ttft_ms:.1f} ms "
        f"{_interval(p.origin_ttft_ms_low, p.origin_ttft_ms_high)}"
    )
    return said + (f", gap {p.origin_gap_ms:.1f} ms" if p.origin_gap_ms is not None else "")


def _interval(low: float | None, high: float | None) -> str:
    """`[low, high]`; a bound the file does not know is `n/a`, never an invented 0.0."""
    return f"[{'n/a' if low is None else f'{low:.1f}'}, {'n/a' if high is None else f'{high:.1f}'}]"


def describe_pairing(label: str, p: Paired) -> str:
    """What a path added over its kept pairs, with the median's interval at its own level."""
    said = f"{label}: {p.kept} pairs kept, {p.excluded} excluded"
    if p.added_ttft_ms is not None:
        interval = _interval(p.added_ttft_ms_low, p.added_ttft_ms_high)
        level = "level n/a" if p.confidence is None else f"{100 * p.confidence:.0f} %"
        said += f"; added TTFT {p.added_ttft_ms:+.1f} ms {interval} ({level})"
    if p.added_gap_ms is not None:
        said += f", added gap {p.added_gap_ms:+.1f} ms"
    return said


def pairing_lines(rows: Sequence[MatrixRow]) -> list[str]:
    """Per condition against a started origin: its own pace, then each paired path's figures and why pairs were
    excluded (from the rows: what the run printed as it went)."""
    by_condition: dict[object, list[MatrixRow]] = {}
    for row in rows:
        if row.pairing is not None:
            by_condition.setdefault(row.condition, []).append(row)
    lines = []
    for paired_rows in by_condition.values():
        first = paired_rows[0]
        assert first.pairing is not None
        lines.append(f"{condition_label(first)}: {describe_origin_pace(first.pairing)}")
        for row in paired_rows:
            assert row.pairing is not None
            why = ", ".join(f"{n} x {reason}" for reason, n in row.pairing.reasons.items())
            lines.append(
                f"{condition_label(row)}: {describe_pairing(row.path_label, row.pairing)}"
                + (f" (excluded: {why})" if why else "")
            )
    return lines


def attribution_lines(rows: Sequence[MatrixRow]) -> list[str]:
    """Each row whose verdict its origin's behaviour made (experiment/attribution.py decided it), and the plain row
    it was judged against."""
    return [
        f"{row.path_label} ({a.origin}): {a.words}; judged against {a.baseline}"
        for row in rows
        if (a := row.attribution) is not None
    ]


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
    lines = [md.heading(title(results)), ""]
    measured = (
        f"Measured {prov.created} on {prov.host.hostname} (kernel {prov.host.kernel}, "
        f"{prov.host.cpus} CPUs), tokenpath {prov.tool.version}."
    )
    lines.append(md.cell(measured))
    lines.append(md.cell(f"Exclusion rule, declared before the run: {results.experiment['exclusion']['rule']}."))
    note = endpoint_note(results)
    if note:
        lines.append(f"**{md.cell(note)}** Certification and the controls ran on the stub.")
    for where, drift in results.certification.emitter_drift_ms.items():
        lines.append(f"Emitter drift during certification ({md.cell(where)}): {describe_drift(drift)}.")
    lines += ["", "Exclusions per condition:"]
    lines += [f"- {md.line(s.label)}: {describe_share(s)}" for s in results.exclusion_shares]
    lines.append("")
    headers, columns = headers_for(results.rows), varying_columns(results.rows)
    lines.append(md.row(headers))
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    for row in side_by_side(results.rows):
        lines.append(md.row(cells_for(row, columns)))
    lines += _origin_sections(results.rows)
    lines += _variant_lines(results)
    if results.skipped:
        lines += ["", "Not measured:"] + [f"- {md.line(s.path)}: {md.cell(s.reason)}" for s in results.skipped]
    lines += ["", "Versions: " + ", ".join(md.cell(f"{n} {p.version}") for n, p in results.proxies.items())]
    if results.interrupted:
        lines += ["", "**Interrupted**: rows with fewer runs than planned are partial."]
    return "\n".join(lines) + "\n"


ATTRIBUTION_TITLE = "Which origin behaviour made a verdict (against the same path with a plain origin)"
PAIRING_TITLE = "Against the started origin: paired runs (each path's run between two direct streams)"


def _origin_sections(rows: Sequence[MatrixRow]) -> list[str]:
    out = []
    for title_line, found in ((ATTRIBUTION_TITLE, attribution_lines(rows)), (PAIRING_TITLE, pairing_lines(rows))):
        if found:
            out += ["", f"{title_line}:", *(f"- {md.line(line)}" for line in found)]
    return out


def _variant_lines(results: MatrixResults) -> list[str]:
    """Each measured variant's config line (proxies/ Variant.line), so a row's fix can be copied from the table."""
    lines = [
        f"- {md.line(name)} ({md.cell(variant)}): {md.code(info['line'])}"
        for name, proxy in results.proxies.items()
        for variant, info in proxy.variants.items()
        if info.get("line")
    ]
    return ["", "Config lines of the variants:", *lines] if lines else []


def csv_text(results: MatrixResults) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow((*ROW_KEYS, *ORIGIN_KEYS))
    for row in results.rows:
        origin = [_csv_value(value(row)) for value in ORIGIN_KEYS.values()]
        writer.writerow([*(_csv_value(_row_value(row, k)) for k in ROW_KEYS), *origin])
    return buf.getvalue()


def _row_value(row: MatrixRow, key: str) -> Any:
    """A row's figure, or its condition's value of an axis (as the row's JSON holds it)."""
    axis = BY_FIELD.get(key)
    return axis.to_json(getattr(row.condition, key)) if axis is not None else getattr(row, key)


assert set(ROW_KEYS) <= {f.name for f in fields(MatrixRow)} | set(BY_FIELD), "a CSV column names no row field"


def _csv_value(value: Any) -> Any:
    if isinstance(value, dict | Mapping):
        return csv_cell("; ".join(f"{k}: {v}" for k, v in value.items()))
    return csv_cell(value)


# A spreadsheet opening results.csv runs a text cell that begins with one of these as a formula (OWASP, "CSV
# Injection"): a proxy's name or a verdict comes from an experiment file or a results.json.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """One CSV cell: a number (a negative figure too) and an empty cell as they are; text that would begin a formula
    behind a single quote (OWASP's rule), so the spreadsheet shows it as the text it is."""
    if value is None or isinstance(value, int | float):
        return value
    text = value if isinstance(value, str) else str(value)  # a str enum is its value, as the writer writes it
    return "'" + text if text.startswith(FORMULA_STARTS) else value


def row_shape(row: MatrixRow) -> Seen | None:
    """What the row's included runs show together (diagnose/shape.py), None without arrivals."""
    frame_bytes = row.condition.frame_bytes or None
    return typical([of_arrivals(r.arrivals, r.writes_ms, frame_bytes) for r in row.raw if r.included and r.arrivals])


def seen_as(row: MatrixRow) -> str:
    """The verdict in two words, for narrow tables: the runs' shape as diagnose names it (diagnose/shape.py, one
    classifier for both), e.g. "holds the first 1020 B" for a held start that then streams."""
    if row.fpr_median is None:
        return row.verdict
    if row.within_floor:
        return "streams"
    if row.within_floor is None and row.verdict.startswith(UNDECIDED_VERDICT):
        return "streams, TTFT undecided"  # never "late": the host's load could not be told from a delay
    shown = row_shape(row)
    if shown is not None and shown.kind not in (Kind.TOO_SHORT, Kind.STREAMS):
        return shown.label()
    if (row.arrivals_median or 0) <= 1:
        return "buffers all"
    if row.fpr_median > 1.05:
        return f"bursts of {row.modal_burst}"
    return "late"


# What the terminal table's short headers mean (the README's "Words" section has each word in full). What "+TTFT"
# subtracts depends on the rows' origin: the stub's write log, or, against a real endpoint that keeps none, the
# direct streams measured beside the path's.
ADDED_TTFT_WORDS = {
    "stub": "the first token's arrival - the stub's write of it, less direct's",
    "paired": "the path's TTFT - the mean of the two direct streams' around it (a started origin keeps no write log)",
    "round": "the path's TTFT - the direct stream's of the same round (a real endpoint keeps no write log)",
}
ADDED_TTFT_ROWS = {"stub": "rows on the stub", "paired": "rows on the started origin", "round": "rows on the endpoint"}


def added_ttft_kind(row: MatrixRow, results: MatrixResults) -> str:
    """How a row's added TTFT was computed: a key of ADDED_TTFT_WORDS."""
    if not row.condition.endpoint:
        return "stub"
    upstream = results.experiment.get("upstream")
    started = isinstance(upstream, dict) and bool(upstream.get("kind"))
    return "paired" if row.pairing is not None or started else "round"


def added_ttft_words(results: MatrixResults) -> str:
    """What these rows' added TTFT is, as it was computed (each kind, when the rows mix them)."""
    kinds = list(dict.fromkeys(added_ttft_kind(r, results) for r in results.rows)) or ["stub"]
    if len(kinds) == 1:
        return ADDED_TTFT_WORDS[kinds[0]]
    return "; ".join(f"{ADDED_TTFT_ROWS[k]}, {ADDED_TTFT_WORDS[k]}" for k in kinds)


def column_words(results: MatrixResults) -> str:
    """The legend under the terminal table, its +TTFT said as it was computed for these rows."""
    added = added_ttft_words(results)
    return (
        f"fpr: frames per read (1.00 streams); +TTFT ms: added TTFT, {added} (median; p90 beside it); "
        "kept: runs kept / measured (README: Words)"
    )


def rich_table(results: MatrixResults) -> Table:
    """Narrow enough for an 80-column terminal; table.md has every column. Names, labels and verdicts are shown as
    their text (progress.escaped): they come from an experiment file, the flags or a results.json."""
    certified = results.certification.passed
    note = endpoint_note(results)
    caption = "\n".join(escaped(line) for line in filter(None, [note, column_words(results)]))
    heading = "bold" if certified else "bold red"
    table = Table(title=escaped(title(results)), title_style=heading, caption=caption)
    columns = varying_columns(results.rows)
    names = [name.split(" ")[0] for name, _ in columns]  # narrow: "api", "encoding"
    for header in ("path", "condition", *names, "fpr", "+TTFT ms", "p90", "kept", "seen as"):
        table.add_column(header, justify="right" if header in ("fpr", "+TTFT ms", "p90", "kept") else "left")
    for row in side_by_side(results.rows):
        style = "green" if row.within_floor else ("yellow" if row.within_floor is False else "red")
        path = row.proxy if row.variant == "stock" else f"{row.proxy} {row.variant}"
        cond = row.condition
        link = {"loopback": "lo", "veth": "veth"}.get(cond.link, cond.link) + (" tls" if cond.tls else "")
        link += " +hdr" if cond.stub_headers else ""
        size = f"{cond.frame_bytes}B" if cond.frame_bytes else "own"
        paced = "endpoint" if cond.endpoint else f"{size}/{cond.interval_ms:g}ms"
        figures = (_fmt(row.fpr_median, 2), _fmt(row.added_ttft_ms_median), _fmt(row.added_ttft_ms_p90))
        shown = [path, f"{paced} {link}", *(value(row) for _, value in columns), *figures, f"{row.kept}/{row.runs}"]
        table.add_row(*map(escaped, shown), styled(seen_as(row), style))
    return table
