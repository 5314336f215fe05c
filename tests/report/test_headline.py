"""The report's answer: the headline names how many paths hold the stream, the worst and the line that streamed in
the same run; the verdict table puts the paths that hold first."""

from __future__ import annotations

from typing import Any

from tokenpath.report import headline
from tokenpath.results import model
from tokenpath.results.model import Provenance, from_json


def row(variant: str, within: bool, added: float, verdict: str) -> dict[str, Any]:
    condition = {"interval_ms": 50.0, "frame_bytes": 60, "link": "loopback", "tls": False}
    figures: dict[str, Any] = {"fpr_median": 1.0 if within else 40.0, "fpr_min": 1.0, "fpr_max": 40.0, "modal_burst": 1}
    figures |= {"added_ttft_ms_median": added, "added_ttft_ms_p90": added, "modal_burst_gap_ms": None}
    figures |= {"arrivals_median": 40 if within else 1, "within_floor": within, "verdict": verdict}
    return {"proxy": "nginx", "variant": variant, **condition, "runs": 3, "excluded": 0, **figures}


def doc(*rows: dict[str, Any]) -> model.MatrixResults:
    d: dict[str, Any] = {"schema_version": model.SCHEMA_VERSION, **model._document(Provenance.now("matrix"))}
    variants = {"stock": {"config": ""}, "proxy_buffering_off": {"config": "", "line": "proxy_buffering off;"}}
    d.update(
        experiment={"name": "t", "exclusion": {"rule": "a rule"}},
        certification={"passed": True},
        skipped=[],
        proxies={"nginx": {"version": "1.22.1", "variants": variants}},
        rows=list(rows),
    )
    results = from_json(d)
    assert isinstance(results, model.MatrixResults)
    return results


def test_the_headline_names_the_worst_path_and_the_line_that_streamed_in_this_run() -> None:
    results = doc(
        row("stock", False, 950.0, "buffers the whole response"),
        row("proxy_buffering_off", True, 0.2, "streams (within the direct floor)"),
    )
    assert headline.headline(results) == (
        "1 of 2 paths hold the stream; worst +950 ms: nginx; fix: proxy_buffering off;"
    )
    cells = headline.verdict_rows(headline.path_figures(results))
    assert [c[0] for c in cells] == ["nginx", "nginx (proxy_buffering_off)"]  # the path that holds first


def test_no_fix_is_named_when_no_variant_streamed() -> None:
    results = doc(row("stock", False, 950.0, "buffers the whole response"))
    assert headline.headline(results) == "1 of 1 paths hold the stream; worst +950 ms: nginx (buffers all)."


def test_all_paths_stream() -> None:
    results = doc(row("proxy_buffering_off", True, 0.2, "streams (within the direct floor)"))
    assert headline.headline(results).startswith("All 1 paths stream")


def test_frames_per_read_log_axis_has_readable_ticks() -> None:
    """Issue 35: the log axis showed only 10^0 and 10^1. Now 1 2 5 10 20 50 up to the data."""
    from tokenpath.report import charts

    rows = doc(
        row("stock", False, 950.0, "buffers the whole response"),
        row("proxy_buffering_off", True, 0.2, "streams (within the direct floor)"),
    ).rows
    svg = charts.frames_per_read(rows, None)
    assert svg is not None
    import re

    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert texts[:6] == ["1", "2", "5", "10", "20", "50"]
