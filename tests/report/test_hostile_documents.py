"""A results.json of the wrong shape, names that mean something to HTML, Markdown or mathtext, and output paths that
cannot be written: each is one clear error line (file and field) or a page that shows the text as text."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tokenpath import userfiles
from tokenpath.errors import UsageError
from tokenpath.report import charts, load_table, page, render, tables
from tokenpath.report.compare import compare
from tokenpath.report.render import write_report
from tokenpath.results import model
from tokenpath.results.model import LoadResults, MatrixResults, Paired, from_json

DATA = Path(__file__).parent / "data"


def _doc(kind: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / kind / "results.json").read_text(encoding="utf-8"))
    return doc


def _dir(tmp_path: Path, doc: dict[str, Any] | str) -> Path:
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return out


def _set(*where: str | int, value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = value

    return edit


# (fixture, edit, the field path and what the error says of it)
BROKEN = [
    ("load", _set("levels", 0, "frames_lost", value="<script>x</script>"), "levels[0].frames_lost: expected a number"),
    ("load", _set("levels", 0, "errors", value=True), "levels[0].errors: expected a number, got a boolean"),
    ("load", _set("levels", value="x"), "levels: expected a list, got a string"),
    ("load", _set("levels", 0, "added_ttft_ms", value={"p50": "5"}), "levels[0].added_ttft_ms.p50: expected a number"),
    ("load", _set("levels", 0, "warnings", value="abc"), "levels[0].warnings: expected a list"),
    ("load", _set("config", value=None), "config: expected an object, got null"),
    ("load", _set("targets", value=[1]), "targets: expected an object or null, got a list"),
    ("matrix", _set("rows", value="abc"), "rows: expected a list, got a string"),
    ("matrix", _set("rows", 0, value=5), "rows[0]: expected an object, got a number"),
    ("matrix", _set("rows", 0, "raw", value="x"), "rows[0].raw: expected a list, got a string"),
    ("matrix", _set("rows", 0, "raw", 0, "metrics", value=[1]), "rows[0].raw[0].metrics: expected an object"),
    ("matrix", _set("rows", 0, "raw", 0, "writes_ms", value=["a"]), "rows[0].raw[0].writes_ms[0]: expected a number"),
    ("matrix", _set("rows", 0, "fpr_median", value="x"), "rows[0].fpr_median: expected a number or null"),
    ("matrix", _set("rows", 0, "verdict", value=5), "rows[0].verdict: expected a string, got a number"),
    ("matrix", _set("rows", 0, "proxy", value=None), "rows[0].proxy: expected a string, got null"),
    ("matrix", _set("rows", 0, "exclusions", value=[1]), "rows[0].exclusions: expected an object, got a list"),
    ("matrix", _set("rows", 0, "ends", value=[1]), "rows[0].ends: expected an object, got a list"),
    ("matrix", _set("proxies", value=[1]), "proxies: expected an object, got a list"),
    ("matrix", _set("certification", value=[1]), "certification: expected an object or null, got a list"),
    ("matrix", _set("tool", value=None), "tool: expected an object, got null"),
    ("matrix", _set("host", value="x"), "host: expected an object, got a string"),
    ("matrix", _set("experiment", value=None), "experiment: expected an object, got null"),
    ("matrix", _set("experiment", value=[]), "experiment: expected an object, got a list"),
    ("matrix", _set("kind", value="bogus"), "kind: expected one of 'matrix', 'sweep', 'load', got a string"),
    ("sweep", _set("points", value="x"), "points: expected a list or null, got a string"),
    ("sweep", _set("inferred", value="x"), "inferred: expected an object or null, got a string"),
    ("sweep", _set("inferred", "size_range", value=[1]), "inferred.size_range: expected a list of 2, got a list of 1"),
    # counts and durations the page prints, out of their range (rendered as "-1 runs" as if it had run so)
    ("matrix", _set("experiment", "runs", value=-1), "experiment.runs: expected at least 1, got -1"),
    ("matrix", _set("experiment", "frames", value=0), "experiment.frames: expected at least 1, got 0"),
    ("load", _set("config", "runs", value=0), "config.runs: expected at least 1, got 0"),
    ("load", _set("config", "duration_s", value=-5.0), "config.duration_s: expected at least 0, got -5.0"),
    ("load", _set("config", "client_workers", value=-1), "config.client_workers: expected at least 0, got -1"),
    ("load", _set("config", "interval_ms", value=float("nan")), "config.interval_ms: expected at least 0, got nan"),
]


@pytest.mark.parametrize(
    ("key", "value"),
    [("client_workers", 0), ("warmup_s", 0.0), ("ttft_ms", 0), ("interval_ms", 0.0), ("runs", 1), ("tokens", 1)],
)
def test_the_least_values_the_tool_itself_writes_are_read(tmp_path: Path, key: str, value: float) -> None:
    """`client_workers` 0 is what a --cluster run echoes (one per node, chosen by Ray), a warm-up or a pause 0 is
    a choice: each is read and reported, never refused as out of range."""
    doc = copy.deepcopy(_doc("load"))
    doc["config"][key] = value
    write_report(_dir(tmp_path, doc))
    assert (tmp_path / "run" / "report.html").exists()


@pytest.mark.parametrize(("kind", "edit", "said"), BROKEN, ids=[b[2].split(":")[0] for b in BROKEN])
def test_a_wrong_typed_field_is_one_line_naming_the_file_and_the_field(
    tmp_path: Path, kind: str, edit: Any, said: str
) -> None:
    doc = copy.deepcopy(_doc(kind))
    edit(doc)
    run = _dir(tmp_path, doc)
    with pytest.raises(UsageError) as caught:
        write_report(run)
    message = str(caught.value)
    assert "\n" not in message
    assert str(run / "results.json") in message
    assert said in message
    assert caught.value.exit_code == 2
    assert not (run / "report.html").exists()


@pytest.mark.parametrize("version", [True, "9", 10])
def test_schema_version_true_is_no_version(tmp_path: Path, version: object) -> None:
    with pytest.raises(UsageError, match="schema_version"):
        model.read(_dir(tmp_path, {**_doc("matrix"), "schema_version": version}))


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '{"a":' * 100000 + "1" + "}" * 100000])
def test_deeply_nested_json_is_one_line(tmp_path: Path, text: str) -> None:
    with pytest.raises(UsageError, match="nested too deeply"):
        model.read(_dir(tmp_path, text))


def test_load_banner_escapes_its_figures() -> None:
    results = from_json(_doc("load"))
    assert isinstance(results, LoadResults)
    level = replace(results.levels[0], frames_lost="<script>alert(1)</script>")  # type: ignore[arg-type]
    html = page.page(replace(results, levels=(level, *results.levels[1:])))
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; frames lost" in html


# --- output paths ----------------------------------------------------------------------------------------------


def test_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    run = _dir(tmp_path, _doc("matrix"))
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        write_report(run, out_dir=afile)
    with pytest.raises(UsageError, match="cannot write to /proc/nope"):
        write_report(run, out_dir=Path("/proc/nope"))


def test_one_format_failing_writes_none_and_leaves_no_temporaries(tmp_path: Path) -> None:
    run = _dir(tmp_path, _doc("matrix"))
    (run / "table.md").write_text("old table")
    (run / "report.html").mkdir()
    with pytest.raises(UsageError, match=r"report\.html: it is a directory"):
        write_report(run)
    assert (run / "table.md").read_text() == "old table"  # not a new table beside no page
    assert not (run / "results.csv").exists()
    assert not list(run.glob("*.tmp"))


def test_a_write_failing_half_way_removes_its_temporaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _dir(tmp_path, _doc("matrix"))
    (run / "table.md").write_text("old table")
    written: list[Path] = []

    def third_fails(path: Path, text: str) -> Path:
        if len(written) == 2:
            raise OSError(28, "No space left on device", str(path))
        written.append(userfiles.write_temporary(path, text))
        return written[-1]

    monkeypatch.setattr(render, "write_temporary", third_fails)
    with pytest.raises(UsageError, match=r"cannot write .*: No space left on device"):
        write_report(run)
    assert (run / "table.md").read_text() == "old table"
    assert not (run / "report.html").exists()
    assert len(written) == 2
    assert sorted(p.name for p in run.iterdir()) == ["results.json", "table.md"]  # no temporary left


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("origin", None, "rows[0].origin: expected a string, got null"),  # was a traceback in origin_words
        ("endpoint", 5, "rows[0].endpoint: expected a string, got 5"),
        ("accept_encoding", 5, "rows[0].accept_encoding: expected a string, got 5"),
        ("link", [], "rows[0].link: expected a string, got []"),  # unhashable in the headline
        ("frame_bytes", "<b>60</b>", 'rows[0].frame_bytes: expected a whole number, got "<b>60</b>"'),
        ("tls", "yes", 'rows[0].tls: expected true or false, got "yes"'),
        ("reasoning_tokens", 1e308, "rows[0].reasoning_tokens: expected a whole number, got 1e+308"),
    ],
)
def test_a_rows_condition_of_the_wrong_type_is_refused_in_one_line(
    tmp_path: Path, field: str, value: Any, said: str
) -> None:
    current = json.loads(model.dumps(from_json(_doc("matrix"))))  # the schema written today, not a migrated one
    current["rows"][0][field] = value
    run = _dir(tmp_path, current)
    with pytest.raises(UsageError, match=re.escape(f"not a tokenpath results document: {said}")):
        write_report(run)


def test_a_planted_temporary_link_is_never_written_through(tmp_path: Path) -> None:
    """A results directory is handed around: a `table.md.tmp` (or `results.json.tmp`) symlink in it redirected the
    write to whatever file it named. Temporaries are made under fresh random names, exclusively."""
    run = _dir(tmp_path, _doc("matrix"))
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file")
    for name in ("table.md", "report.html", "results.csv", "results.json"):
        (run / f"{name}.tmp").symlink_to(victim)
    write_report(run)
    model.write(model.read(run), run)
    assert victim.read_text() == "the user's own file"
    assert not (run / "table.md").is_symlink()
    assert (run / "table.md").read_text().startswith("#")


def test_reports_are_read_and_written_as_utf8_whatever_the_locale(tmp_path: Path) -> None:
    """Under the C locale with UTF-8 mode off, Python's default text encoding is ASCII: the report's own characters
    and a name that is not ASCII are read and written as UTF-8 all the same."""
    doc = _doc("sweep")
    doc["experiment"]["name"] = "débit → 5 µs"
    run = _dir(tmp_path, doc)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    code = "import sys; from pathlib import Path; from tokenpath.report.render import write_report; "
    code += "import locale; assert locale.getpreferredencoding(False).lower() in ('ascii', 'ansi_x3.4-1968'); "
    code += "write_report(Path(sys.argv[1]))"
    out = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    texts = {p.name: p.read_bytes().decode("utf-8") for p in run.iterdir() if p.name != "results.json"}
    assert sorted(texts) == ["report.html", "results.csv", "table.md"]
    assert "débit → 5 µs" in texts["report.html"]
    assert "débit → 5 µs" in texts["table.md"]


# --- compare ---------------------------------------------------------------------------------------------------


def test_compare_shows_rows_of_one_side_and_duplicates() -> None:
    a = from_json(_doc("matrix"))
    assert isinstance(a, MatrixResults)
    first, second = a.rows[0], a.rows[1]
    b = replace(a, rows=(first, first, *a.rows[2:]))  # second only in A; first twice in B
    verdicts = {(c.key, c.verdict) for c in compare(a, b)}
    name = f"{second.path_label}: {second.condition.label}"
    assert (f"{name}", "only in A") in verdicts
    twice = f"{first.path_label}: {first.condition.label} (repeated key: #2)"
    assert (twice, "only in B") in verdicts
    md = page.markdown(a, compare(a, b))
    assert "only in A" in md
    assert "only in B" in md


# --- invented figures --------------------------------------------------------------------------------------------


def test_an_unknown_added_ttft_is_not_plus_zero() -> None:
    results = from_json(_doc("matrix"))
    assert isinstance(results, MatrixResults)
    rows = [replace(r, added_ttft_ms_median=None) for r in results.rows if r.condition == results.rows[0].condition]
    svg = charts.arrival_timeline(rows)
    assert svg is not None
    assert "+0.0 ms first token" not in svg
    assert "first token n/a" in svg


def test_unknown_intervals_are_not_zero() -> None:
    p = Paired(kept=3, excluded=0, added_ttft_ms=5.0, origin_ttft_ms=10.0)
    assert "[n/a, n/a]" in tables.describe_pairing("nginx", p)
    assert "[0.0, 0.0]" not in tables.describe_pairing("nginx", p)
    assert "[n/a, n/a]" in tables.describe_origin_pace(p)


# --- mathtext and Markdown -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gw$$", "a$x^$", "cost$1$"])
def test_dollar_names_are_text_in_charts(name: str) -> None:
    svg = charts.added_ttft([(name, [1.0, 2.0, 3.0])], None)
    assert svg is not None
    assert name in svg  # the name as it was given, not math


def test_markdown_cells_are_escaped_in_every_table() -> None:
    load = from_json(_doc("load"))
    assert isinstance(load, LoadResults)
    hostile = "a|b\nc<b>&"
    level = replace(load.levels[0], target=hostile)
    text = load_table.markdown(replace(load, levels=(level,)))
    assert "a\\|b c&lt;b&gt;&amp;" in text
    matrix = from_json(_doc("matrix"))
    assert isinstance(matrix, MatrixResults)
    row = replace(matrix.rows[0], verdict=hostile)
    text = tables.markdown(replace(matrix, rows=(row,)))
    assert "a\\|b c&lt;b&gt;&amp;" in text
    assert "<b>" not in text
