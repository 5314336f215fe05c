"""How a stream ends, on real sockets (wire/ending.py, issue 36 §2): scripted upstreams that end a stream each way a
path does — the last chunk or a close without the format's final event (cut_silent), a reset or a body cut short
(cut_error), the format's error frame (cut_error), whole (complete) — read by the probe (library and `--json`) and
by the exporter's real prober. A silent cut must never read as complete: every test here fails if it does."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers import scripted_servers
from tokenpath.errors import PeerError
from tokenpath.experiment.rows import Floor, build_row
from tokenpath.experiment.runner import Environment, MatrixRunner
from tokenpath.experiment.spec import PathSpec, parse
from tokenpath.load.worker import Workload, one_stream
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.wire.ending import STREAM_END, BodyEnd, EndKind, StreamEnd

CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CLOSE_DELIMITED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
CONTENT = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
ERROR = b'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n'
SILENCE_S = 0.3  # between the last frame and the end: the end's "since the last byte"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    while len(body) < length:
        body += conn.recv(65536)


def script(first: bytes, last: bytes, reset: bool = False) -> Callable[[socket.socket], None]:
    """Answer with `first`, wait SILENCE_S, send `last`, then close (or reset: SO_LINGER 0)."""

    def handle(conn: socket.socket) -> None:
        with conn:
            _read_request(conn)
            conn.sendall(first)
            time.sleep(SILENCE_S)
            if last:
                conn.sendall(last)
            if reset:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return handle


CASES: dict[str, tuple[Callable[[socket.socket], None], EndKind, BodyEnd]] = {
    "whole": (script(CHUNKED + chunk(CONTENT), chunk(DONE) + b"0\r\n\r\n"), EndKind.COMPLETE, BodyEnd.CHUNKED),
    "last chunk, no final event": (script(CHUNKED + chunk(CONTENT), b"0\r\n\r\n"), EndKind.CUT_SILENT, BodyEnd.CHUNKED),
    "close, no final event": (script(CLOSE_DELIMITED + CONTENT, b""), EndKind.CUT_SILENT, BodyEnd.CLOSE),
    "the format's error frame": (
        script(CHUNKED + chunk(CONTENT), chunk(ERROR) + b"0\r\n\r\n"),
        EndKind.CUT_ERROR,
        BodyEnd.CHUNKED,
    ),
    "no last chunk": (script(CHUNKED + chunk(CONTENT), b""), EndKind.CUT_ERROR, BodyEnd.TRUNCATED),
    "reset": (script(CHUNKED + chunk(CONTENT), b"", reset=True), EndKind.CUT_ERROR, BodyEnd.RESET),
}


@pytest.fixture
def upstream() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    with scripted_servers() as start:
        yield lambda handle: f"http://127.0.0.1:{start(handle)}/v1"


def probed(url: str) -> StreamEnd | None:
    try:
        trace = probe_stream(ProbeConfig(url=url, total_timeout_s=10))
    except PeerError as exc:
        return STREAM_END.of(exc)
    return run_metrics(trace).end


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_probe_names_each_end(upstream: Callable[[Callable[[socket.socket], None]], str], case: str) -> None:
    handle, kind, how = CASES[case]
    end = probed(upstream(handle))
    assert end is not None, case
    assert (end.kind, end.how) == (kind, how), end.describe()
    assert end.at_ns is not None
    # The end came after the silence. 0.9 of it: at_ns counts from the probe's stamp after its send returned, and a
    # loaded host can preempt the probe between the send and the stamp while the server's silence already runs
    # (CI: 299.0 ms for a 300 ms silence).
    assert end.at_ns >= SILENCE_S * 1e9 * 0.9
    assert end.since_last_byte_ns is not None
    if case in ("close, no final event", "no last chunk", "reset"):  # nothing came after the silence
        assert end.since_last_byte_ns >= SILENCE_S * 1e9 * 0.9


def test_probe_json_says_cut_silent_and_the_summary_leaves_it_out(
    upstream: Callable[[Callable[[socket.socket], None]], str],
) -> None:
    url = upstream(CASES["last chunk, no final event"][0])
    done = subprocess.run(
        [sys.executable, "-m", "tokenpath", "probe", url, "--runs", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [run["end"]["kind"] for run in doc["runs"]] == ["cut_silent", "cut_silent"]
    assert doc["runs"][0]["end"]["how"] == "chunked"
    assert doc["summary"]["ends"] == {"cut_silent": 2}
    assert doc["summary"]["ttft_ms"] is None  # never averaged as a whole stream's


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_load_client_names_each_end_and_counts_a_cut_as_an_error(
    upstream: Callable[[Callable[[socket.socket], None]], str], case: str
) -> None:
    handle, kind, _ = CASES[case]
    url = upstream(handle)
    work = Workload(url, "m", "p", 5, 1, 0.0, 1.0)
    cfg = ProbeConfig(url=url, total_timeout_s=10)
    result = asyncio.run(one_stream(cfg, "127.0.0.1", cfg.target.port, work))
    assert result.end is kind, (case, result.error)
    if kind is EndKind.COMPLETE:
        assert result.error is None
    else:
        assert result.error is not None  # counted as an error, never in the TTFT figures
        assert result.first_content_t_ns is None  # its TTFT is never joined


def test_a_matrix_round_against_an_upstream_excludes_a_cut_run_and_counts_it(
    upstream: Callable[[Callable[[socket.socket], None]], str], tmp_path: Path
) -> None:
    direct = upstream(CASES["whole"][0])
    cutter = upstream(CASES["last chunk, no final event"][0])
    runner = MatrixRunner(parse({"upstream": {"url": direct, "model": "m"}}), tmp_path, console=Console(quiet=True))
    cond = runner.exp.conditions[0]
    rounds = [runner._endpoint_round(Environment("loopback", True), [("direct", direct), ("cutter", cutter)], cond)]
    rounds.append(runner._endpoint_round(Environment("loopback", True), [("direct", direct), ("cutter", cutter)], cond))
    direct_runs = [r for records in rounds for r in records if r.path == "direct"]
    cut_runs = [r for records in rounds for r in records if r.path == "cutter"]
    assert all(r.end is not None and r.end.kind is EndKind.COMPLETE and r.included for r in direct_runs)
    floor = Floor.from_direct(direct_runs)
    row = build_row(PathSpec("cutter"), cond, cut_runs, floor)
    assert row.ends == {"cut_silent": 2}
    assert row.exclusions == {"cut_silent": 2}
    assert (row.runs, row.excluded) == (2, 2)
    assert row.ttft_ms_median is None
    assert row.fpr_median is None  # a short stream's figures are no whole stream's
    assert [run.end.kind for run in row.raw if run.end is not None] == [EndKind.CUT_SILENT] * 2
