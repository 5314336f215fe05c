"""The probe's terminal table cannot lie: under every header, that column's own figure, for every combination of
the options that add columns (--stub-url, --http2, --wide); and the compact default fits 100 terminal columns with
every cell whole, TTFT and frames per read always among them (issue 35: `--http2 --stub-url` printed "added TTFT
0" under the h2 headers)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from rich.console import Console

from tokenpath.probe.h3figures import H3Figures
from tokenpath.probe.metrics import RunMetrics, probe_results
from tokenpath.probe.table import probe_table
from tokenpath.probe.trace import H2Figures
from tokenpath.wire.ending import BodyEnd, EndKind, StreamEnd

H2 = H2Figures("browser", 132, 75, 3, 12.5, 0, 80)


def run(joined: bool, h2: bool) -> RunMetrics:
    return RunMetrics(
        stream_id="tp-1",
        status=200,
        frames=132,
        arrivals=75,
        frames_per_read=1.76,
        ttfb_ms=3.25,
        ttft_ms=151.5,
        gaps_ms={"p50": 50.5, "p90": 60.5, "max": 852.5},
        bursts={1: 70, 17: 1},
        total_ms=6650.5,
        first_token_ms=151.5,
        reads=77,
        content_encoding="zstd",
        added_ttft_ms=1.75 if joined else None,
        added_frame_delay_ms={"p50": 0.25, "p99": 9.5} if joined else {},
        http_version="2" if h2 else "1.1",
        h2=H2 if h2 else None,
        end=StreamEnd(EndKind.COMPLETE, BodyEnd.CHUNKED, 6_650_500_000, 0),
    )


# Each header and the cell it must stand over, written out by hand.
EXPECTED = {
    "run": "1",
    "status": "200",
    "encoding": "zstd",
    "frames": "132",
    "reads": "77",
    "arrivals": "75",
    "fpr": "1.76",
    "TTFB": "3.2",
    "TTFT": "151.5",
    "first token": "151.5",
    "gap p50": "50.5",
    "gap p90": "60.5",
    "gap max": "852.5",
    "bursts (size x count)": "1x70 17x1",
    "total": "6650.5",
    "end": "complete",
    "added TTFT": "1.8",
    "frame added p50/p99": "0.2/9.5",
    "DATA frames": "132",
    "DATA/read": "1.76",
    "stalls": "3",
    "stall": "12.5",
}
COMBINATIONS = list(itertools.product([False, True], repeat=3))


@pytest.mark.parametrize(("joined", "h2", "wide"), COMBINATIONS)
def test_every_header_stands_over_its_own_cell(joined: bool, h2: bool, wide: bool) -> None:
    table = probe_table(probe_results("http://p", [run(joined, h2)]), wide=wide)
    cells = {str(c.header): str(next(iter(c.cells))) for c in table.columns}
    assert cells == {h: EXPECTED[h] for h in cells}
    assert ("added TTFT" in cells) is joined
    assert ("DATA frames" in cells) is h2
    assert {"TTFT", "fpr"} <= set(cells)
    if wide:
        assert {"reads", "gap p90", "bursts (size x count)", "total"} <= set(cells)
        assert ("stall" in cells) is h2
        assert ("frame added p50/p99" in cells) is joined


@pytest.mark.parametrize(("joined", "h2"), list(itertools.product([False, True], repeat=2)))
def test_the_compact_table_fits_100_columns_with_every_cell_whole(joined: bool, h2: bool) -> None:
    table = probe_table(probe_results("http://p", [run(joined, h2)]))
    console = Console(width=100, record=True)
    console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "…" not in text
    for c in table.columns:
        assert str(c.header) in text
        assert str(next(iter(c.cells))) in text


def test_the_caption_explains_added_and_fpr() -> None:
    table = probe_table(probe_results("http://p", [run(True, False)]))
    assert "added TTFT: the first content frame's arrival less the stub's write" in str(table.caption)
    assert "fpr: frames per read" in str(table.caption)
    assert "--wide" in str(table.caption)


@pytest.mark.parametrize("wide", [False, True])
def test_probe_wide_flag_reaches_the_table(monkeypatch: pytest.MonkeyPatch, wide: bool) -> None:
    from typer.testing import CliRunner

    import tokenpath.cli.common
    import tokenpath.probe.stream
    from tests.diagnose.test_measure import trace_of
    from tokenpath.cli import app

    monkeypatch.setattr(tokenpath.probe.stream, "probe_stream", lambda cfg: trace_of([[60]] * 4, [1.0, 2.0, 3.0, 4.0]))
    # The CLI's console took its width when first used (COLUMNS then), and an earlier test may have pinned it.
    monkeypatch.setattr(tokenpath.cli.common.console, "_width", 300)
    out = CliRunner().invoke(
        app, ["probe", "http://127.0.0.1:9", *(["--wide"] if wide else [])], env={"COLUMNS": "300"}
    )
    assert out.exit_code == 0, out.output
    assert ("bursts (size x count)" in out.output) is wide
    assert "TTFT" in out.output


H3 = H3Figures("browser", 12.25, 40, 44, 30, 20, 0, None)


@pytest.mark.parametrize(("joined", "wide"), list(itertools.product([False, True], repeat=2)))
def test_http3_columns_stand_over_their_own_cells_and_fit_100_columns(joined: bool, wide: bool) -> None:
    r = dataclasses.replace(run(joined, False), http_version="3", h3=H3)
    table = probe_table(probe_results("http://p", [r]), wide=wide)
    cells = {str(c.header): str(next(iter(c.cells))) for c in table.columns}
    h3_expected = {"handshake": "12.2", "UDP reads": "40", "DATA/read": "1.50", "stalls": "0"}
    assert cells == {h: {**EXPECTED, **h3_expected}[h] for h in cells}
    assert "handshake" in cells
    assert "DATA frames" not in cells
    assert ("UDP reads" in cells) is wide
    assert "over HTTP/3, --h3-window browser" in str(table.title)
    if not wide:
        console = Console(width=100, record=True)
        console.print(table)
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= 100
        assert "…" not in text


@pytest.mark.parametrize("cut", [False, True])
def test_the_default_table_shows_the_end_when_a_stream_was_cut_and_says_so_when_none_was(cut: bool) -> None:
    r = run(False, False)
    if cut:
        r = dataclasses.replace(r, end=StreamEnd(EndKind.CUT_SILENT, BodyEnd.CLOSE, 61_000_000_000, 60_000_000_000))
    table = probe_table(probe_results("http://p", [r]))
    cells = {str(c.header): str(next(iter(c.cells))) for c in table.columns}
    assert cells.get("end") == ("cut_silent" if cut else None)
    assert ("every stream ended complete" in str(table.caption)) is not cut
    assert ("run 1: cut_silent" in str(table.caption)) is cut
    assert probe_table(probe_results("http://p", [r]), wide=True).columns[-1].header == "end"
