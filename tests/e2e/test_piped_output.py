"""Issue 21: what the commands print when stdout is not a terminal (a pipe, a file, CI). Every run here is a real
subprocess whose stdout is a pipe or a file and whose environment has no $COLUMNS, as a CI job's would: rich cut
tables to 80 columns there, and a progress bar is invisible there until the run ends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Start
from tokenpath.serve.procs import tokenpath_argv

pytestmark = pytest.mark.e2e

LONG = "pass-relay-with-a-rather-long-label"  # wider than an 80-column table leaves its path column


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}


def test_monitor_once_prints_whole_tables_and_json_off_a_terminal(service: Start) -> None:
    stub, other = (service("stub", "--port", "0", "--tokens", "4", "--interval-ms", "5", "--ttft-ms", "5", name=n)
                   for n in ("stub", "other"))  # fmt: skip
    assert stub.url is not None
    assert other.url is not None
    args = ("monitor", "--url", stub.url, "--direct-url", other.url, "--once", "--probes", "1")
    table = subprocess.run(tokenpath_argv(*args), capture_output=True, text=True, timeout=120, env=_env())
    assert table.returncode == 0, table.stdout + table.stderr
    assert "…" not in table.stdout  # no cell cut at 80 columns
    assert "added TTFT p50 ms" in table.stdout
    assert "coalescing" in table.stdout
    out = subprocess.run(tokenpath_argv(*args, "--json"), capture_output=True, text=True, timeout=120, env=_env())
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)  # stdout holds the JSON document alone
    (target,) = doc["targets"]
    assert target["name"] == "target"
    assert target["routes"]["via"]["probes"] == 1
    assert target["routes"]["via"]["ttft_ms"]["p50"] > 0
    assert set(target["routes"]["via"]["added_ttft_ms"]) == {"p50", "p95"}
    assert doc["breaches"] == []
    refused = subprocess.run(tokenpath_argv("monitor", "--url", stub.url, "--json"), capture_output=True, text=True,
                             timeout=60, env=_env())  # fmt: skip
    assert refused.returncode == 2
    assert "--json goes with --once" in refused.stderr


EXPERIMENT = f"""name = "piped"
frames = 5
runs = 2
ttft_ms = 0
[conditions]
interval_ms = [20]
[[proxy]]
name = "{LONG}"
command = "{sys.executable} -m tokenpath relay --listen {{listen}} --upstream {{upstream}}"
"""
PROGRESS = re.compile(rf"^\[(\d+)/4\] .*, run [12]/2, (direct|{LONG}): \d+:\d\d elapsed(, about \d+:\d\d to go)?$")


def test_matrix_into_a_file_prints_a_line_per_stream_and_the_whole_table(tmp_path: Path) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    stdout = tmp_path / "stdout.txt"
    with stdout.open("w") as sink:  # a file, as `tokenpath matrix exp.toml > log` makes it
        done = subprocess.run(tokenpath_argv("matrix", str(exp), "--out", str(tmp_path / "out"), "--force"),
                              stdout=sink, stderr=subprocess.PIPE, text=True, timeout=300, env=_env())  # fmt: skip
    text = stdout.read_text()
    assert done.returncode == 0, text + done.stderr
    progress = [m for line in text.splitlines() if (m := PROGRESS.match(line))]
    assert [int(m.group(1)) for m in progress] == [1, 2, 3, 4], text  # one line per path per run, in order
    assert {m.group(2) for m in progress} == {"direct", LONG}
    assert progress[-1].group(3) == ", about 0:00 to go"
    assert "…" not in text  # no cell cut at 80 columns
    table = [line for line in text.splitlines() if LONG in line and "│" in line]
    assert len(table) == 1, text  # the row, its label whole


def test_matrix_json_is_the_results_document_alone_on_stdout(tmp_path: Path) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    out = tmp_path / "out"
    done = subprocess.run(tokenpath_argv("matrix", str(exp), "--out", str(out), "--force", "--json"),
                          capture_output=True, text=True, timeout=300, env=_env())  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    doc = json.loads(done.stdout)
    assert doc == json.loads((out / "results.json").read_text())
    assert {r["proxy"] for r in doc["rows"]} == {"direct", LONG}
    assert "certify (loopback)" in done.stderr  # everything else went to stderr, progress lines included
    assert sum(bool(PROGRESS.match(line)) for line in done.stderr.splitlines()) == 4
    assert f"report: {out / 'report.html'}" in done.stderr
    assert any(LONG in line and "│" in line for line in done.stderr.splitlines())  # the table, on stderr
