"""The probe's terminal table: one row per stream, from the document `summarize` returns.

Each column is declared once with its header and the cell it shows (COLUMNS), so a header can never sit over
another column's cells, whichever options add columns. The default is compact: it fits 100 terminal columns with
TTFT and frames per read always shown; `--wide` shows every column.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.table import Table

from tokenpath.hostport import redacted
from tokenpath.probe.h3figures import H3Figures
from tokenpath.probe.metrics import ProbeResults, RunMetrics
from tokenpath.probe.trace import H2Figures


def fmt(value: object, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _always(results: ProbeResults) -> bool:
    return True


def _joined(results: ProbeResults) -> bool:
    """--stub-url: what the path added, from the stub's write log."""
    return any(r.added_ttft_ms is not None or r.added_frame_delay_ms for r in results.runs)


def _h2(results: ProbeResults) -> bool:
    """--http2: the stream's DATA frames, and how often its flow-control window held it."""
    return any(r.h2 is not None for r in results.runs)


def _any_cut(results: ProbeResults) -> bool:
    """A stream that did not end complete: the default table shows every run's end (all complete: the caption says)."""
    return any(r.end is None or r.end.cut for r in results.runs)


def _h3(results: ProbeResults) -> bool:
    """--http3: the handshake apart from TTFT, the UDP reads, and how often the QUIC windows held the stream."""
    return any(r.h3 is not None for r in results.runs)


def _h3_cell(cell: Callable[[H3Figures], str]) -> Callable[[RunMetrics], str]:
    return lambda r: "-" if r.h3 is None else cell(r.h3)


def _h2_cell(cell: Callable[[H2Figures], str]) -> Callable[[RunMetrics], str]:
    return lambda r: "-" if r.h2 is None else cell(r.h2)


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    cell: Callable[[RunMetrics], str]
    # In the default table, not only with --wide (a predicate: only for these results, e.g. the end when one was cut).
    compact: bool | Callable[[ProbeResults], bool] = False
    shown: Callable[[ProbeResults], bool] = _always  # whether these results have the column at all
    meaning: str = ""  # the caption's line for a header a reader cannot guess


COLUMNS: tuple[Column, ...] = (
    Column("status", lambda r: str(r.status), compact=True),
    # The response's Content-Encoding: frames and arrivals are counted in the decoded stream.
    Column("encoding", lambda r: r.content_encoding, compact=True),
    Column("frames", lambda r: str(r.frames), compact=True),
    # Every read; under compression a read that only fed the decompressor is not an arrival.
    Column("reads", lambda r: "-" if r.reads is None else str(r.reads)),
    Column("arrivals", lambda r: str(r.arrivals)),
    Column("fpr", lambda r: fmt(r.frames_per_read, 2), compact=True, meaning="fpr: frames per read (1.00 streams)"),
    Column("TTFB", lambda r: fmt(r.ttfb_ms), compact=True),
    Column("TTFT", lambda r: fmt(r.ttft_ms), compact=True),
    # Reasoning or content: equal to TTFT unless a reasoning model thought first.
    Column("first token", lambda r: fmt(r.first_token_ms)),
    Column("gap p50", lambda r: fmt(r.gaps_ms.get("p50"))),
    Column("gap p90", lambda r: fmt(r.gaps_ms.get("p90"))),
    Column("gap max", lambda r: fmt(r.gaps_ms.get("max")), compact=True),
    Column("bursts (size x count)", lambda r: " ".join(f"{k}x{v}" for k, v in sorted(r.bursts.items()))),
    Column("total", lambda r: fmt(r.total_ms)),
    # complete, cut_error or cut_silent (README, "how a stream ends"); a cut's times in the caption
    Column("end", lambda r: r.end.kind.value if r.end is not None else "-", compact=_any_cut),
    Column(
        "added TTFT",
        lambda r: fmt(r.added_ttft_ms),
        compact=True,
        shown=_joined,
        meaning="added TTFT: the first content frame's arrival less the stub's write of it (what the path added)",
    ),
    Column(
        "frame added p50/p99",
        lambda r: "/".join(fmt(r.added_frame_delay_ms.get(p)) for p in ("p50", "p99")),
        shown=_joined,
        meaning="frame added: each later frame's arrival less its write, p50/p99",
    ),
    Column("DATA frames", _h2_cell(lambda h: str(h.data_frames)), compact=True, shown=_h2),
    Column("DATA/read", _h2_cell(lambda h: fmt(h.data_frames_per_read, 2)), shown=_h2),
    Column("stalls", _h2_cell(lambda h: str(h.flow_control_stalls)), shown=_h2),
    Column("stall", _h2_cell(lambda h: fmt(h.stall_ms)), shown=_h2),
    Column(
        "handshake",
        _h3_cell(lambda h: fmt(h.handshake_ms)),
        compact=True,
        shown=_h3,
        meaning="handshake: QUIC + TLS before the request was sent (not in TTFB or TTFT)",
    ),
    Column("UDP reads", _h3_cell(lambda h: str(h.udp_reads)), shown=_h3),
    Column("DATA/read", _h3_cell(lambda h: fmt(h.data_events_per_read, 2)), shown=_h3),
    Column("stalls", _h3_cell(lambda h: str(h.flow_control_stalls)), shown=_h3),
)


def columns(results: ProbeResults, wide: bool = False) -> list[Column]:
    """The columns these results show: the compact ones, or every one with `wide`."""
    return [c for c in COLUMNS if c.shown(results) and (wide or _compact(c, results))]


def _compact(column: Column, results: ProbeResults) -> bool:
    return column.compact(results) if callable(column.compact) else column.compact


def probe_table(results: ProbeResults, wide: bool = False) -> Table:
    sent = f", Accept-Encoding: {results.accept_encoding}" if results.accept_encoding is not None else ""
    # user:password@ and the query masked, as the errors show it: a Gemini key sits in `?key=`
    table = Table(title=f"tokenpath probe {redacted(results.url)} (--api {results.api.value}{sent})")
    h2 = next((r.h2 for r in results.runs if r.h2 is not None), None)
    if h2 is not None:
        table.title = f"{table.title} over HTTP/2, --h2-window {h2.window}"
    h3 = next((r.h3 for r in results.runs if r.h3 is not None), None)
    if h3 is not None:
        table.title = f"{table.title} over HTTP/3, --h3-window {h3.window}"
    shown = columns(results, wide)
    table.add_column("run", justify="right", no_wrap=True)
    for column in shown:
        table.add_column(column.header, justify="right", no_wrap=True)
    for i, r in enumerate(results.runs, 1):
        table.add_row(str(i), *(column.cell(r) for column in shown))
    notes = ["times in ms", *(c.meaning for c in shown if c.meaning)]
    notes += [f"run {i}: {r.ttft_note}" for i, r in enumerate(results.runs, 1) if r.ttft_note]
    notes += [f"run {i}: {r.end.describe()}" for i, r in enumerate(results.runs, 1) if r.end is not None and r.end.cut]
    notes += [f"run {i}: {r.ws.summary}" for i, r in enumerate(results.runs, 1) if r.ws is not None]
    notes += [
        f"run {i}: {r.invalid_utf8_frames} frames are not UTF-8, which an event stream always is (a client's decoder "
        "fails on them or replaces them)"
        for i, r in enumerate(results.runs, 1)
        if r.invalid_utf8_frames
    ]
    if results.runs and not _any_cut(results):
        notes.append("every stream ended complete (its format's final event)")
    if not wide and len(shown) < len([c for c in COLUMNS if c.shown(results)]):
        notes.append("--wide: every column (reads, arrivals, first token, gaps, bursts, total)")
    table.caption = "\n".join(notes)  # what a header means, why a run has no TTFT, what --wide adds
    table.min_width = len(str(table.title))  # the title on one line where the terminal allows (rich clamps to it)
    return table
