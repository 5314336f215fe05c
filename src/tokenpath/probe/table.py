"""The probe's terminal table: one row per stream, from the document `summarize` returns."""

from __future__ import annotations

from rich.table import Table

from tokenpath.probe.metrics import ProbeResults
from tokenpath.probe.trace import H2Figures


def fmt(value: object, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def probe_table(results: ProbeResults) -> Table:
    sent = f", Accept-Encoding: {results.accept_encoding}" if results.accept_encoding is not None else ""
    table = Table(title=f"tokenpath probe {results.url} (--api {results.api.value}{sent})")
    for col in (
        "run",
        "status",
        "encoding",  # the response's Content-Encoding: frames and arrivals are counted in the decoded stream
        "frames",
        "reads",  # every read; under compression a read that only fed the decompressor is not an arrival
        "arrivals",
        "fpr",
        "TTFB ms",
        "TTFT ms",
        "first token ms",  # reasoning or content: equal to TTFT unless a reasoning model thought first
        "gap p50",
        "gap p90",
        "gap max",
        "bursts (size x count)",
        "total ms",
    ):
        table.add_column(col, justify="right")
    joined = any(r.added_ttft_ms is not None or r.added_frame_delay_ms for r in results.runs)
    h2 = [r.h2 for r in results.runs if r.h2 is not None]
    if h2:  # --http2: the stream's DATA frames, and how often its flow-control window held it
        table.title = f"{table.title} over HTTP/2, --h2-window {h2[0].window}"
        table.add_column("DATA frames", justify="right")
        table.add_column("DATA/read", justify="right")
        table.add_column("stalls", justify="right")
        table.add_column("stall ms", justify="right")
    if joined:  # --stub-url: what the path added, from the stub's write log
        table.add_column("added TTFT ms", justify="right")
        table.add_column("frame added p50/p99", justify="right")
    for i, r in enumerate(results.runs, 1):
        gaps = r.gaps_ms
        added = [fmt(r.added_ttft_ms), "/".join(fmt(r.added_frame_delay_ms.get(p)) for p in ("p50", "p99"))]
        table.add_row(
            str(i),
            str(r.status),
            r.content_encoding,
            str(r.frames),
            "-" if r.reads is None else str(r.reads),
            str(r.arrivals),
            fmt(r.frames_per_read, 2),
            fmt(r.ttfb_ms),
            fmt(r.ttft_ms),
            fmt(r.first_token_ms),
            fmt(gaps.get("p50")),
            fmt(gaps.get("p90")),
            fmt(gaps.get("max")),
            " ".join(f"{k}x{v}" for k, v in sorted(r.bursts.items())),
            fmt(r.total_ms),
            *(added if joined else []),
            *(_h2_cells(r.h2) if h2 else []),
        )
    notes = [f"run {i}: {r.ttft_note}" for i, r in enumerate(results.runs, 1) if r.ttft_note]
    notes += [f"run {i}: {r.ws.summary}" for i, r in enumerate(results.runs, 1) if r.ws is not None]
    if notes:
        table.caption = "\n".join(notes)  # why a run has no TTFT (another API format, an error, no content)
    return table


def _h2_cells(h2: H2Figures | None) -> list[str]:
    if h2 is None:
        return ["-"] * 4
    return [str(h2.data_frames), fmt(h2.data_frames_per_read, 2), str(h2.flow_control_stalls), fmt(h2.stall_ms)]
