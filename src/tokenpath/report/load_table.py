"""The load results as the first article shows them: one row per level, figures per target.

Open loop: the percentiles count from each stream's scheduled start (corrected for coordinated omission); the
uncorrected p99 and the dispatch lag are shown beside them."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from rich.table import Table

from tokenpath.progress import escaped, styled
from tokenpath.report import md
from tokenpath.report.tables import csv_cell
from tokenpath.results.model import (
    DEFAULT_API,
    HTTP11,
    IDENTITY,
    LoadResults,
    LoadRow,
    MedianAndTail,
    Percentiles,
)
from tokenpath.wire.ending import EndKind


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _ms2(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def any_http2(rows: Sequence[LoadRow]) -> bool:
    """The HTTP/2 columns are shown when any row was measured over HTTP/2."""
    return any(r.http_version != HTTP11 for r in rows)


def http2_cells(row: LoadRow) -> list[str]:
    """The client's HTTP version (and streams per connection, connections), flow-control stalls (streams stalled
    of streams, p99 stall ms per stream) and DATA frames per read: '-' where they do not apply (HTTP/1.1)."""
    if row.http_version == HTTP11:
        return [HTTP11, "-", "-"]
    dfr = "-" if row.data_frames_per_read is None else f"{row.data_frames_per_read:.2f}"
    if row.handshake_ms is not None:  # HTTP/3: a QUIC connection per stream, its handshake apart from TTFT
        hs = row.handshake_ms
        return [f"{row.http_version}, 1/conn, handshake {_ms(hs.p50)}/{_ms(hs.p99)} ms", "-", dfr]
    shape = f"{row.http_version}, {row.streams_per_connection or 1}/conn"
    if row.connections is not None:
        shape += f", {row.connections} conns"
    stalls = row.flow_control_stalls
    stall = "-" if stalls is None else f"{stalls.stalled_streams}/{stalls.streams}, {_ms(stalls.stall_ms_p99)}"
    return [shape, stall, dfr]


def any_websocket(rows: Sequence[LoadRow]) -> bool:
    """The WebSocket columns are shown when any row was carried over WebSocket (load --transport websocket)."""
    return any(r.websocket is not None for r in rows)


def websocket_cells(row: LoadRow) -> list[str]:
    """Upgrades: 101s of streams, their time p50/p99 and what came instead of 101; messages per read."""
    ws = row.websocket
    if ws is None:
        return ["-", "-"]
    tried = ws.upgraded + sum(ws.not_upgraded.values())
    cell = f"{ws.upgraded}/{tried} 101"
    if ws.upgraded:
        cell += f", {_ms2(ws.upgrade_ms_p50)}/{_ms2(ws.upgrade_ms_p99)}"  # a local upgrade takes tens of µs
    if ws.not_upgraded:
        cell += ", not upgraded: " + ", ".join(
            f"{n} x {'no answer' if status == '0' else 'HTTP ' + status}" for status, n in ws.not_upgraded.items()
        )
    per_read = "-" if ws.messages_per_read is None else f"{ws.messages_per_read:.2f}"
    return [cell, per_read]


def any_cut(rows: Sequence[LoadRow]) -> bool:
    """The ends column is shown when a stream of any level did not end complete (issue 36: a path that cuts)."""
    return any(kind != EndKind.COMPLETE for r in rows for kind in r.ends)


def ends_cell(row: LoadRow) -> str:
    """Streams by how they ended (wire/ending.py: complete, cut_error, cut_silent), as the results hold them; "-"
    for results that classified no end (before schema 8)."""
    if not row.ends:
        return "-"
    return ", ".join(f"{row.ends[kind.value]} {kind.value}" for kind in EndKind if row.ends.get(kind.value))


def figures(row: LoadRow, http2: bool = False, cut: bool = False, websocket: bool = False) -> list[str]:
    main = row.added_ttft_corrected_ms or row.added_ttft_ms
    cells = [_ms(main.p50), _ms(main.p99), _ms(main.p999)]
    frames = row.added_frame_delay_ms  # after the first token: a path that bunches the rest shows here
    cells.append("-" if frames is None else f"{_ms(frames.p50)}/{_ms(frames.p99)}")
    if row.dispatch_lag_ms is not None:
        cells += [_ms(row.added_ttft_ms.p99), _ms(row.dispatch_lag_ms.p99)]
    cells += [
        "-" if row.cpu_cores is None else f"{row.cpu_cores:.2f}",
        "-" if row.rss_mb is None else f"{row.rss_mb:.0f}",
        kept_cell(row),
    ]
    cells += http2_cells(row) if http2 else []
    cells += websocket_cells(row) if websocket else []
    return cells + ([ends_cell(row)] if cut else [])


def kept_cell(row: LoadRow) -> str:
    """Streams behind the figures, of all started in the window, and the share excluded: always shown."""
    if row.kept is None or row.streams_total is None:  # results of schema 1: only joined streams were counted
        return str(row.streams)
    return f"{row.kept}/{row.streams_total} ({100 * (row.exclusion_share or 0.0):.1f} % excl.)"


HTTP2_HEADERS = ["HTTP", "stalled streams, stall p99 ms", "DATA frames/read"]
ENDS_HEADER = "ends"  # streams by how they ended: shown only when one did not end complete
WEBSOCKET_HEADERS = ["WebSocket upgrades, p50/p99 ms", "messages/read"]


def headers(open_loop: bool, http2: bool = False, cut: bool = False, websocket: bool = False) -> list[str]:
    extra = ["uncorrected p99", "dispatch lag p99"] if open_loop else []
    h2 = HTTP2_HEADERS if http2 else []
    ws = WEBSOCKET_HEADERS if websocket else []
    ends = [ENDS_HEADER] if cut else []
    front = ["level", "target", "p50", "p99", "p99.9", "frame p50/p99", *extra, "CPU", "RSS", "kept/total"]
    return [*front, *h2, *ws, *ends]


def _notes(row: LoadRow) -> str:
    notes = [w.kind for w in row.warnings]
    if row.content_encoding != IDENTITY:  # frames were counted in the decoded stream
        notes.append(f"answered {row.content_encoding}, decoded")
    if row.frames_lost or row.frames_out_of_order:
        notes.append(f"{row.frames_lost} lost/{row.frames_out_of_order} reordered")
    if row.errors:
        notes.append(f"{row.errors} errors")
    return ", ".join(notes)


def rich_table(results: LoadResults) -> Table:
    open_loop = results.open_loop
    title = (
        "tokenpath load: TTFT added by the path (ms), each later frame's added delay (frame), proxy CPU (cores) "
        "and RSS (MB)"
    )
    asked = {(r.api, r.accept_encoding) for r in results.levels}
    conditions = "".join(
        (f", --api {api}" if api != DEFAULT_API else "") + (f", Accept-Encoding: {enc}" if enc != IDENTITY else "")
        for api, enc in sorted(asked)
    )
    table = Table(title=title + (", from the schedule" if open_loop else "") + escaped(conditions))
    http2 = any_http2(results.levels)
    cut = any_cut(results.levels)
    ws = any_websocket(results.levels)
    for col in [*headers(open_loop, http2, cut, ws), "notes"]:
        table.add_column(col, justify="left" if col in ("target", "notes", ENDS_HEADER) else "right")
    for row in results.levels:
        notes = _notes(row)  # a peer's Content-Encoding among them: shown as its text, as the target's name
        cells = [row.level_label, row.target, *figures(row, http2, cut, ws)]
        table.add_row(*map(escaped, cells), styled(notes, "yellow") if notes else "")
    return table


def warning_lines(results: LoadResults) -> list[str]:
    """Each level's warnings with their remedies, as the terminal shows them under the table (rich markup: the
    target's name and the words escaped)."""
    return [
        f"{styled(f'{row.target} @ {row.level_label}: {w.message}', 'yellow')} ({escaped(w.remedy)})"
        for row in results.levels
        for w in row.warnings
    ]


def markdown(results: LoadResults) -> str:
    http2 = any_http2(results.levels)
    cut = any_cut(results.levels)
    ws = any_websocket(results.levels)
    cols = [*headers(results.open_loop, http2, cut, ws), "warnings"]
    lines = [md.row(cols), "|" + "---:|" * (len(cols) - 1) + "---|"]
    for row in results.levels:
        warn = "; ".join(f"{w.kind}: {w.message}" for w in row.warnings) or "-"
        lines.append(md.row([row.level_label, row.target, *figures(row, http2, cut, ws), warn]))
    return "\n".join(lines) + "\n"


CSV_KEYS = (
    "level",
    "loop",
    "target",
    "streams_total",
    "kept",
    "excluded",
    "exclusion_share",
    "streams",
    "errors",
    "audit_failed",
    "unjoined",
    "frames_lost",
    "frames_out_of_order",
    "cpu_cores",
    "rss_mb",
    "unreliable",
    "api",
    "accept_encoding",
    "content_encoding",
    "http_version",
    "streams_per_connection",
    "connections",
    "data_frames_per_read",
    "transport",
)
STALL_KEYS = ("stalled_streams", "stalls", "stall_ms_p50", "stall_ms_p99")  # flow_control_stalls, flattened


def csv_text(results: LoadResults) -> str:
    """One line per level and target; percentile objects flattened to added_ttft_ms_p50 etc."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    keys = ("added_ttft_ms", "added_ttft_corrected_ms", "floor_ms", "added_frame_delay_ms")
    figures = [(k, p) for k in keys for p in ("p50", "p99", "p999")]
    stall_cols = [f"flow_control_{k}" for k in STALL_KEYS]
    writer.writerow([*CSV_KEYS, *(f"{k}_{p}" for k, p in figures), *stall_cols, "warnings"])
    for row in results.levels:
        flat = [_pct(getattr(row, k), p) for k, p in figures]
        stalls = [getattr(row.flow_control_stalls, k, None) for k in STALL_KEYS]
        cells = [*(getattr(row, k) for k in CSV_KEYS), *flat, *stalls, ";".join(w.kind for w in row.warnings)]
        writer.writerow([csv_cell(c) for c in cells])
    return buf.getvalue()


def _pct(value: Percentiles | MedianAndTail | None, p: str) -> float | None:
    return None if value is None else getattr(value, p, None)  # a floor has no p999
