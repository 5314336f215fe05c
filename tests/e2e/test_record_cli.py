"""`tokenpath record` and `tokenpath stub --replay` / `--preset` as a user runs them: a stub recorded, the recording
replayed by another stub with its sizes exact and its writes on time by the stub's own audit rule."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import CHAT, exchange, post
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stub.control import fetch_audit
from tokenpath.stub.replay import load

pytestmark = pytest.mark.e2e


@pytest.fixture
def stub_url() -> Iterator[str]:
    argv = tokenpath_argv("stub", "--port", "0", "--tokens", "6", "--interval-ms", "40", "--ttft-ms", "30")
    with ServiceProcess([*argv, "--header", "X-Accel-Buffering:no"], "stub") as proc:
        assert proc.url is not None
        yield proc.url


def test_a_recorded_stub_replays_exactly(stub_url: str, tmp_path: Path) -> None:
    out = tmp_path / "shape.json"
    done = subprocess.run(
        tokenpath_argv("record", stub_url, "--out", str(out), "--model", "m", "--max-tokens", "6"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "recorded shape (openai" in done.stdout
    recording = load(out)
    assert recording.http10_framing == "close"  # the stub answers HTTP/1.0 close-delimited
    assert ("X-Accel-Buffering", "no") in recording.headers
    assert json.loads(out.read_text())["source"]["http10_framing"] == "close"
    with ServiceProcess(tokenpath_argv("stub", "--port", "0", "--replay", str(out)), "replay") as replay:
        assert replay.url is not None
        trace = probe_stream(ProbeConfig(url=replay.url))
        assert [f.frame.raw for f in trace.frames] == [e.data for e in recording.events]
        assert trace.head is not None
        assert trace.head.header("x-accel-buffering") == "no"
        reply = fetch_audit(replay.url, [trace.stream_id])
    (entry,) = reply.streams
    assert entry.log is not None
    assert len(entry.log.writes) == entry.verdict.writes == len(recording.events)
    # Each write against its recorded time by the stub's own tolerance (max(2 ms, 20 %) of the recording's median
    # gap); the stub runs at the instrument's priority, but a loaded shared machine may still make one late.
    assert entry.verdict.late_writes <= 1, entry.verdict


def test_a_preset_answers_http10_as_its_origin_does() -> None:
    with ServiceProcess(tokenpath_argv("stub", "--port", "0", "--preset", "llama-server"), "stub") as proc:
        port = urlsplit(proc.url or "").port
        assert port is not None
        head, _, body = exchange(port, post("/v1/chat/completions", CHAT, version="1.0")).partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head
    assert b"X-Accel-Buffering: no" in head
    assert body.endswith(b"0\r\n\r\n")
