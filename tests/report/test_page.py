"""The report rendered from real result fixtures (tests/report/data/README.md says how each was measured)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import matplotlib
import pytest

from tokenpath.errors import UsageError
from tokenpath.report import page
from tokenpath.report.compare import compare
from tokenpath.report.render import write_report
from tokenpath.results.model import MatrixResults, from_json
from tokenpath.serve.procs import tokenpath_argv

DATA = Path(__file__).parent / "data"

# Each fixture's page as this renderer draws it under the matplotlib named: how a chart is built (pyplot or a bare
# Figure, where its style is set, how a histogram is read) must leave the page byte for byte as it was. Another
# matplotlib lays text out differently; there only the digest goes unchecked, never the rest of a test.
# After a deliberate change to the page: python tests/report/page_digests.py prints the new digests.
PAGE_DIGESTS_FOR = "3.11.2"
PAGE_DIGESTS = {
    "matrix": "74177bcc24597e88599f3b3a2e176b259abe3caa4f1546b24dddcd46def5d0f4",
    "load": "3496c13f8ac668bd3e966f0fae8960ebb4f41332e5c8f9f9d66c9e19fa07996d",
    "sweep": "6712bdd3d4754f32a491ec39a410b74f6ca5dbfe050d21e6e1e758a38571cf11",
}


def fixture_dir(tmp_path: Path, kind: str, edit: Any = None) -> Path:
    """A private copy of a fixture (the report is written beside results.json), optionally edited."""
    out = tmp_path / kind
    out.mkdir()
    doc = json.loads((DATA / kind / "results.json").read_text())
    if edit is not None:
        edit(doc)
    (out / "results.json").write_text(json.dumps(doc))
    return out


def render(tmp_path: Path, kind: str, edit: Any = None) -> str:
    written = write_report(fixture_dir(tmp_path, kind, edit))
    assert set(written) == {"html", "md", "csv"}
    return written["html"].read_text()


def assert_known_page(kind: str, html: str) -> None:
    if matplotlib.__version__ == PAGE_DIGESTS_FOR:
        assert hashlib.sha256(html.encode()).hexdigest() == PAGE_DIGESTS[kind], f"the {kind} page changed"


def figures(html: str) -> list[str]:
    """Caption-less check: the <svg> elements inline in the page."""
    return re.findall(r"<svg\b", html)


def assert_self_contained(html: str) -> None:
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)  # no fetched resource
    assert "url(http" not in html
    assert "@import" not in html
    assert "<style>" in html  # CSS inline


def test_matrix_report_has_every_chart_table_and_the_provenance(tmp_path: Path) -> None:
    html = render(tmp_path, "matrix")
    doc = json.loads((DATA / "matrix" / "results.json").read_text())
    assert_self_contained(html)
    assert_known_page("matrix", html)
    assert f"<title>tokenpath matrix: {doc['experiment']['name']}</title>" in html
    assert "Certified" in html
    assert "UNCERTIFIED" not in html
    assert "Arrival timeline" in html
    assert "Frames per read" in html
    assert len(figures(html)) == 3  # the added-TTFT chart, then one condition: frames per read + arrival timeline
    for path in ("direct", "pass", "cork", "buffer"):
        assert f"<td>{path}</td>" in html
    # provenance: host, kernel, versions, effective configs (collapsible), the exclusion rule, certification checks
    assert doc["host"]["kernel"] in html
    assert doc["experiment"]["exclusion"]["rule"] in html
    assert html.count("<details") >= 4
    assert "relay --listen" in html
    assert "buffer relay seen (one arrival)" in html
    # the run's real exclusion is shown on its row
    excluded = [r for r in doc["rows"] if r["excluded"]]
    assert excluded, "the fixture was chosen because one pass run was excluded by the stub audit"
    assert "stub audit failed" in html
    assert 'class="unreliable"' in html


def test_timeline_panels_come_from_the_stub_writes_and_client_arrivals() -> None:
    doc = json.loads((DATA / "matrix" / "results.json").read_text())
    from tokenpath.report.charts import frame_points, representative_run

    results = from_json(doc)
    assert isinstance(results, MatrixResults)
    cork = next(r for r in results.rows if r.proxy == "cork")
    run = representative_run(cork)
    assert run is not None
    writes, arrivals = frame_points(run, cork.condition.interval_ms)
    assert len(writes) == len(arrivals) == 12
    assert all(a >= w for w, a in zip(writes, arrivals, strict=True))  # nothing arrives before it is written
    assert len(set(arrivals)) < len(arrivals)  # cork: several frames share one read


def test_the_same_results_draw_the_same_chart() -> None:
    from tokenpath.report import charts

    paths = [("pass", [1.0, 2.0, 3.0]), ("buffer", [200.0, 210.0, 250.0])]
    first = charts.added_ttft(paths, 0.5)
    assert first is not None
    assert "dc:date" not in first  # a timestamp made every page differ from the last
    assert charts.added_ttft(paths, 0.5) == first


def test_an_uncertified_run_says_so_in_its_title_and_banner(tmp_path: Path) -> None:
    def fail_certification(doc: dict[str, Any]) -> None:
        doc["certification"]["passed"] = False  # a real failure needs a broken host; the renderer reads this flag
        doc["certification"]["forced"] = True
        doc["certification"]["checks"][0]["passed"] = False

    html = render(tmp_path, "matrix", fail_certification)
    assert re.search(r"<title>UNCERTIFIED: tokenpath matrix", html)
    assert re.search(r"<h1[^>]*>UNCERTIFIED: ", html)
    assert "measured anyway (--force)" in html
    assert "FAILED" in html
    assert (tmp_path / "matrix" / "table.md").read_text().startswith("# UNCERTIFIED: ")


def test_load_report_plots_percentiles_cdf_and_resources_with_warnings_beside_them(tmp_path: Path) -> None:
    html = render(tmp_path, "load")
    doc = json.loads((DATA / "load" / "results.json").read_text())
    assert_self_contained(html)
    assert_known_page("load", html)
    assert "<title>tokenpath load: TTFT added per target (closed loop)</title>" in html
    assert len(figures(html)) == 3  # percentiles against concurrency, CDF, CPU + RSS
    for text in ("p50 added TTFT", "p99.9 added TTFT", "cumulative distribution", "proxy CPU (cores)",
                 "proxy RSS (MB)"):  # fmt: skip
        assert text in html
    flagged = [r for r in doc["levels"] if r["warnings"]]
    assert flagged, "the fixture carries real warnings from this host"
    assert html.count('<tr class="unreliable">') == len(flagged)
    for row in flagged:
        for w in row["warnings"]:
            assert page.esc(w["message"]) in html
            assert page.esc(w["remedy"]) in html
    assert f"{len(flagged)} of {len(doc['levels'])} figures are flagged unreliable" in html
    csv_lines = (tmp_path / "load" / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(doc["levels"])
    assert "added_ttft_ms_p99" in csv_lines[0]


def test_sweep_report_marks_the_inferred_flush_rule(tmp_path: Path) -> None:
    html = render(tmp_path, "sweep")
    doc = json.loads((DATA / "sweep" / "results.json").read_text())
    assert_known_page("sweep", html)
    assert page.esc(doc["inferred"]["rule"]) in html
    assert "What makes the proxy flush" in html
    low, high = doc["inferred"]["size_range"]  # the points bound the threshold: the chart says the range, not ~high
    assert f"flushes at {low}-{high} B" in html
    conditions = {f["condition"] for f in doc["floors"]}
    assert len(figures(html)) == 2 + 2 * len(conditions)  # added TTFT, the sweep, two per condition


def test_compare_with_itself_finds_nothing_distinguishable(tmp_path: Path) -> None:
    a = fixture_dir(tmp_path, "matrix")
    written = write_report(a, compare_dir=DATA / "matrix")
    html = written["html"].read_text()
    assert "Compared" in html
    assert "B higher" not in html
    assert "B lower" not in html
    assert html.count("same (within the direct floor)") >= 4  # identical figures: no difference at all
    assert "| cork: 60 B @ 50 ms, loopback | added TTFT ms |" in written["md"].read_text()


def test_compare_finds_a_difference_larger_than_the_spread(tmp_path: Path) -> None:
    doc = json.loads((DATA / "matrix" / "results.json").read_text())
    slower = copy.deepcopy(doc)
    for row in slower["rows"]:
        if row["proxy"] == "pass":  # as if the relay added 50 ms to every stream
            row["added_ttft_ms_median"] += 50
            for r in row["raw"]:
                if r["path_added_ttft_ms"] is not None:
                    r["path_added_ttft_ms"] += 50
    verdicts = {(c.key.split(":")[0], c.metric): c for c in compare(from_json(doc), from_json(slower))}
    assert verdicts[("pass", "added TTFT ms")].verdict == "B higher"
    assert verdicts[("pass", "frames per read")].verdict == "same (within the direct floor)"
    assert verdicts[("cork", "added TTFT ms")].verdict == "same (within the direct floor)"
    ratio = verdicts[("cork", "added TTFT ms")].ratio
    assert ratio is not None
    assert ratio == pytest.approx(1.0)


def test_compare_refuses_unrelated_results() -> None:
    matrix = json.loads((DATA / "matrix" / "results.json").read_text())
    load = json.loads((DATA / "load" / "results.json").read_text())
    with pytest.raises(UsageError, match="cannot compare a matrix result with a load result"):
        compare(from_json(matrix), from_json(load))


def test_an_unknown_schema_version_is_a_clear_error_not_a_guess(tmp_path: Path) -> None:
    def future(doc: dict[str, Any]) -> None:
        doc["schema_version"] = 99

    d = fixture_dir(tmp_path, "matrix", future)
    out = subprocess.run(tokenpath_argv("report", str(d)), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "schema_version 99 is not one this tokenpath knows" in out.stderr
    assert not (d / "report.html").exists()


def test_cli_writes_only_the_formats_asked_for(tmp_path: Path) -> None:
    d = fixture_dir(tmp_path, "load")
    out = subprocess.run(tokenpath_argv("report", str(d), "--format", "md"), capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (d / "table.md").exists()
    assert not (d / "report.html").exists()
    assert not (d / "results.csv").exists()
    bad = subprocess.run(tokenpath_argv("report", str(d), "--format", "pdf"), capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert bad.returncode == 2
    assert "expected one of html, md, csv" in bad.stderr
    missing = subprocess.run(tokenpath_argv("report", str(tmp_path / "nope")), capture_output=True, text=True,
                             timeout=60)  # fmt: skip
    assert missing.returncode == 2
    assert "cannot read" in missing.stderr
    shutil.rmtree(d)


def test_a_difference_inside_the_direct_floor_is_same_not_lower() -> None:
    """Two rows that both sit inside the floor (0.06 vs -0.05 ms) with tight, non-overlapping ranges."""
    doc = json.loads((DATA / "matrix" / "results.json").read_text())
    other = copy.deepcopy(doc)
    for d, shift in ((doc, 0.06), (other, -0.05)):
        for row in d["rows"]:
            if row["proxy"] == "pass":
                base = row["added_ttft_ms_median"]
                row["added_ttft_ms_median"] = shift
                for r in row["raw"]:
                    if r["path_added_ttft_ms"] is not None:
                        r["path_added_ttft_ms"] += shift - base
                        r["path_added_ttft_ms"] = round(r["path_added_ttft_ms"], 6)
    spans = [r["path_added_ttft_ms"] for r in doc["rows"] if r["proxy"] == "pass" for r in r["raw"]]
    verdicts = {(c.key.split(":")[0], c.metric): c for c in compare(from_json(doc), from_json(other))}
    added = verdicts[("pass", "added TTFT ms")]
    assert added.floor is not None
    assert added.verdict == "same (within the direct floor)", (added, spans)


def test_an_endpoint_run_states_what_was_measured_not_the_stubs_defaults(tmp_path: Path) -> None:
    """Issue 21: against a real endpoint the stub's frames and TTFT paced nothing but certification; the header
    said "12 frames per stream, ... 20 ms to the first frame" all the same."""
    doc = json.loads((DATA / "matrix" / "results.json").read_text())
    stub_run = render(tmp_path, "matrix")  # from the stub: what it was asked to send, as before
    assert f"{doc['experiment']['ttft_ms']:g} ms to the first frame" in stub_run

    def as_endpoint(doc: dict[str, Any]) -> None:
        doc["experiment"]["upstream"] = {"origin": "https://api.example.com", "model": "gpt-x", "max_tokens": 64,
                                         "note": "no write log"}  # fmt: skip
        for row in doc["rows"]:  # what the endpoint sent: 7 frames a stream, its first token after ~300 ms
            for run in row["raw"]:
                run["metrics"]["frames"], run["metrics"]["ttft_ms"] = 7, 300.0 + len(run["stream_id"]) % 2

    endpoint_dir = tmp_path / "endpoint"
    endpoint_dir.mkdir()
    html = render(endpoint_dir, "matrix", as_endpoint)
    kept = sum(r["included"] for row in doc["rows"] if row["proxy"] == "direct" for r in row["raw"])
    assert "ms to the first frame" not in html
    assert "12 frames per stream" not in html
    assert "https://api.example.com, model gpt-x, at most 64 tokens per stream" in html
    assert "measured on the direct path: 7 frames per stream and 30" in html
    assert f"ms to the first token (medians of {kept} streams)" in html


def test_the_page_leads_with_the_headline_the_added_ttft_chart_and_the_verdicts(tmp_path: Path) -> None:
    """Issue 35: the verdict was the last thing on the page. Now the headline, the chart and the verdict table come
    before the provenance and the per-condition panels, and every column of the verdict table is explained."""
    from tokenpath.report import headline

    html = render(tmp_path, "matrix")
    markers = {
        "headline": 'class="headline"',
        "chart": "Added TTFT per path",
        "verdicts": 'id="verdicts"',
        "provenance": 'id="provenance"',
        "panels": "Arrival timeline",
    }
    at = {name: html.index(marker) for name, marker in markers.items()}
    assert at["headline"] < at["chart"] < at["verdicts"] < at["provenance"] < at["panels"]
    text = html[at["headline"] : html.index("</p>", at["headline"])]
    assert re.search(r"\d+ of \d+ paths hold the stream; worst \+\d+ ms: ", text), text
    for column in headline.VERDICT_COLUMNS:
        assert f"<li><b>{page.esc(column.header)}</b>: {page.esc(column.meaning)}</li>" in html
    assert "Words" in html
