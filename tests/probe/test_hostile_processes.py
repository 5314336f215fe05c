"""`tokenpath probe` and `tokenpath monitor --once` as users run them, pointed at hostile endpoints (real loopback
servers, tests/probe/hostile.py): each process's peak RSS (its own getrusage, from wait4) stays bounded, each ends
within its --total-timeout (plus the interpreter's start), with its named outcome. Without the bounds these
processes grow by hundreds of MB and run until killed (bench/RESULTS.md, issue 22); the watcher kills them at
KILL_MB or KILL_S so a regression fails here instead of taking the machine down.

Whole processes, so the e2e lane runs this file.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.probe.hostile import Hostile, Measured, run_measured, server_context
from tokenpath.serve.procs import tokenpath_argv
from tokenpath.serve.tlscert import self_signed

pytestmark = pytest.mark.e2e

TOTAL_S = 4.0
START_S = 8.0  # the interpreter's start and imports on a loaded 2-core host, and the exit: generous
KILL_S = 40.0
KILL_MB = 600.0
# The fixed probe peaks at ~80 MB against these on a quiet host (bench/RESULTS.md), ~170 MB when it reads faster
# than the stored limits fill; without the bounds it passes this within seconds on a quiet host. Because how fast a
# loaded host reads decides how far an unbounded trace gets, the tests also check the RSS has stopped growing: in
# the second half of the run a bounded probe's RSS stays on its plateau, an unbounded one grows with every read.
PROBE_MB = 300.0
PLATEAU_GROWTH_MB = 25.0
MONITOR_MB = 200.0


@pytest.fixture(scope="module")
def tls() -> Iterator[ssl.SSLContext]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        files = self_signed(Path(tmp), ["127.0.0.1"])
        yield server_context(str(files.cert), str(files.key))


def run(*args: str) -> Measured:
    return run_measured(tokenpath_argv(*args), kill_after_s=KILL_S, kill_rss_mb=KILL_MB,
                        env={**os.environ, "COLUMNS": "200"})  # fmt: skip


def probe(url: str, total_s: float = TOTAL_S) -> Measured:
    tls = ("--insecure",) if url.startswith("https:") else ()  # refused beside an http URL (never applied there)
    return run("probe", url, *tls, "--total-timeout", str(total_s), "--connect-timeout", "10",
               "--first-byte-timeout", "10", "--idle-timeout", "30")  # fmt: skip


def test_probe_against_a_tls_record_flood_is_bounded_and_ends_at_total_timeout(tls: ssl.SSLContext) -> None:
    with Hostile("flood", tls=tls) as h:
        m = probe(h.url)
    assert not m.killed, m
    assert m.returncode == 13, m.stderr
    assert "--total-timeout" in m.stderr
    assert m.peak_rss_mb < PROBE_MB
    assert m.growth_after(0.5, m.since(h)) < PLATEAU_GROWTH_MB, m.rss_samples[::25]
    assert m.wall_s < TOTAL_S + START_S


def test_probe_against_a_huge_body_keeps_a_bounded_trace() -> None:
    with Hostile("huge") as h:
        m = probe(h.url, total_s=8.0)  # long enough for an unbounded trace to pass PROBE_MB on a loaded host
    assert not m.killed, m
    assert m.returncode == 13, m.stderr
    assert m.peak_rss_mb < PROBE_MB
    assert m.growth_after(0.5, m.since(h)) < PLATEAU_GROWTH_MB, m.rss_samples[::25]


def test_probe_against_a_trickled_error_body_ends_within_its_deadlines() -> None:
    with Hostile("body_trickle") as h:
        m = probe(h.url)
    assert not m.killed, m
    assert m.returncode == 6, m.stderr
    assert "HTTP 503" in m.stderr
    assert m.wall_s < TOTAL_S + START_S


def test_probe_total_timeout_covers_a_trickled_tls_handshake() -> None:
    with Hostile("handshake_trickle", https=True) as h:
        m = probe(h.url)
    assert not m.killed, m
    assert m.returncode == 13, m.stderr
    assert m.wall_s < TOTAL_S + START_S


HOSTILE = {  # target name -> (kind, TLS, the outcome its probe must end with)
    "flood_tls": ("flood", True, "response_too_large"),  # past the answer's bound (monitor_limits), not its timeout
    "huge": ("huge", False, "response_too_large"),
    "head_trickle": ("head_trickle", False, "total_timeout"),
    "body_trickle": ("body_trickle", False, "http_status"),
    "handshake_trickle": ("handshake_trickle", False, "total_timeout"),
    "endless_event": ("endless_event", False, "response_too_large"),
    "endless_head": ("endless_head", False, "response_too_large"),
    "unknown_coding": ("unknown_coding", False, "content_encoding"),
    "anthropic": ("anthropic", False, "unsupported_format"),
}


def test_monitor_once_over_nine_hostile_endpoints_at_once_is_bounded_and_names_each_outcome(
    tls: ssl.SSLContext, tmp_path: Path
) -> None:
    servers = {name: Hostile(kind, tls=tls if on_tls else None, https=kind == "handshake_trickle")
               for name, (kind, on_tls, _) in HOSTILE.items()}  # fmt: skip
    lines = ["[monitor]", 'metrics_listen = "127.0.0.1:0"', f"max_concurrency = {len(HOSTILE)}",
             "[defaults]", "insecure = true", f"total_timeout_s = {TOTAL_S}", "connect_timeout_s = 10",
             "first_byte_timeout_s = 10", "idle_timeout_s = 30"]  # fmt: skip
    for name, server in servers.items():
        lines += ["[[target]]", f'name = "{name}"', f'url = "{server.url}"']
    config = tmp_path / "monitor.toml"
    config.write_text("\n".join(lines) + "\n")
    try:
        m = run("monitor", str(config), "--once", "--probes", "1", "--log-level", "warning")
    finally:
        for server in servers.values():
            server.close()
    assert not m.killed, m
    outcomes = {}
    for line in m.stderr.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == "probe":
                outcomes[record["target"]] = record["outcome"]
    assert outcomes == {name: outcome for name, (_, _, outcome) in HOSTILE.items()}, m.stderr
    assert m.returncode == 0, m.stderr  # no --fail-on: the summary is the result
    assert m.peak_rss_mb < MONITOR_MB
    assert m.wall_s < TOTAL_S + START_S
