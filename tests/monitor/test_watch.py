"""The watch loop and the one-shot mode on real loopback sockets (in-process servers) and scripted probers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers import LoopbackHTTP, QuietHandler, TLSRecordBurst
from tokenpath import errors
from tokenpath.monitor.config import MonitorConfig, from_dict
from tokenpath.monitor.metrics import MonitorMetrics
from tokenpath.monitor.rules import parse_rules
from tokenpath.monitor.runner import Interrupted, Watch, check_rules, run_once
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.trace import Trace

FRAMES = 4
CONTENT = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


class SSEHandler(QuietHandler):
    """A streamed chat answer: `frames` content frames 5 ms apart, each its own write, then `final`."""

    frames = FRAMES
    final = DONE  # the format's final event, written with the last chunk

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for _ in range(self.frames):
            time.sleep(0.005)
            self.wfile.write(b"%x\r\n%b\r\n" % (len(CONTENT), CONTENT))
            self.wfile.flush()
        final = b"%x\r\n%b\r\n" % (len(self.final), self.final) if self.final else b""
        self.wfile.write(final + b"0\r\n\r\n")


@pytest.fixture
def sse() -> Iterator[LoopbackHTTP]:
    server = LoopbackHTTP(SSEHandler)
    yield server
    server.close()


def config(*targets: dict[str, Any], **settings: object) -> MonitorConfig:
    return from_dict({"monitor": {"interval_s": 0.1, "jitter": 0.0, **settings}, "target": list(targets)})


def test_the_watch_probes_every_target_on_real_sockets_and_records_it(sse: LoopbackHTTP) -> None:
    cfg = config(
        {"name": "a", "url": sse.url},
        {"name": "b", "url": sse.url, "direct_url": sse.url.replace("127.0.0.1", "localhost")},
    )
    metrics = MonitorMetrics(cfg)
    watch = Watch(cfg, metrics)
    watch.run(max_cycles=6)
    get = metrics.registry.get_sample_value
    ok_a = get("tokenpath_monitor_probes_total", {"target": "a", "route": "via", "outcome": "ok"}) or 0
    ok_b = get("tokenpath_monitor_probes_total", {"target": "b", "route": "direct", "outcome": "ok"}) or 0
    assert ok_a >= 2
    assert ok_b >= 2
    # Frames 5 ms apart may share a read on a loaded host: the gauge is set and in range; its value is
    # test_metrics.py's (injected arrivals), never a timing here.
    assert 1 <= (get("tokenpath_monitor_coalescing", {"target": "a", "route": "via"}) or 0) <= FRAMES + 1
    assert (get("tokenpath_monitor_added_ttft_seconds_count", {"target": "b"}) or 0) >= 2
    assert watch.aborter.open_count == 0


def test_one_probe_per_target_at_once_and_max_concurrency_overall() -> None:
    cfg = config(*({"name": n, "url": "http://127.0.0.1:9"} for n in "abcd"), max_concurrency=2)
    lock = threading.Lock()
    active: dict[str, int] = {}
    peak = {"all": 0, "one": 0}

    def prober(c: ProbeConfig, stream_id: str) -> Trace:
        with lock:
            active[c.url] = active.get(c.url, 0) + 1
            peak["all"] = max(peak["all"], sum(active.values()))
        time.sleep(0.03)
        with lock:
            active[c.url] -= 1
        raise errors.ConnectError("refused")

    # every target has the same URL, so 'one per target' is checked through the schedule's busy set instead
    watch = Watch(cfg, MonitorMetrics(cfg), prober=prober)
    original = watch._collect
    seen_busy: list[int] = []

    def collect(in_flight, schedule):
        names = list(in_flight.values())
        seen_busy.append(max((names.count(n) for n in names), default=0))
        original(in_flight, schedule)

    watch._collect = collect  # type: ignore[method-assign]
    watch.run(max_cycles=12)
    assert peak["all"] == 2
    assert max(seen_busy) == 1


def test_stop_aborts_a_probe_in_flight_instead_of_waiting_out_its_timeout() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel does), never answers
    port = listener.getsockname()[1]
    cfg = config({"name": "silent", "url": f"http://127.0.0.1:{port}", "first_byte_timeout_s": 60})
    metrics = MonitorMetrics(cfg)
    watch = Watch(cfg, metrics)
    runner = threading.Thread(target=watch.run)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while watch.aborter.open_count == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watch.aborter.open_count == 1
        stopped = time.monotonic()
        watch.stop()
        runner.join(10)
        assert not runner.is_alive()
        assert time.monotonic() - stopped < 5  # the probe's own timeout is 60 s
        labels = {"target": "silent", "route": "via", "outcome": "first_byte_timeout"}
        assert metrics.registry.get_sample_value("tokenpath_monitor_probes_total", labels) is None  # not counted
    finally:
        watch.stop()
        listener.close()


def test_a_long_watch_holds_no_more_threads_or_sockets_than_a_short_one(sse: LoopbackHTTP) -> None:
    cfg = config(*({"name": n, "url": sse.url} for n in "abc"), max_concurrency=3)
    me = psutil.Process()
    Watch(cfg, MonitorMetrics(cfg)).run(max_cycles=6)
    fds, threads = me.num_fds(), threading.active_count()
    watch = Watch(cfg, MonitorMetrics(cfg))
    watch.run(max_cycles=60)
    assert watch.cycles == 60
    assert me.num_fds() <= fds + 2  # the loopback server's own accepted sockets may still be closing
    assert threading.active_count() <= threads + 1
    assert watch.aborter.open_count == 0


def test_tls_bursts_are_seen_as_coalescing(tmp_path: Path) -> None:
    from tokenpath.serve.tlscert import self_signed

    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    server = TLSRecordBurst(str(files.cert), str(files.key), burst=5)
    try:
        cfg = config({"name": "tls", "url": f"https://127.0.0.1:{server.port}", "cacert": str(files.cert)})
        (summary,) = run_once(cfg, cycles=1)
    finally:
        server.close()
    assert summary.value("coalescing") == 5.0  # five frames as five TLS records in one burst: one arrival
    assert summary.value("fpr") == 3.0


def test_once_checks_every_rule_on_every_target_it_applies_to(sse: LoopbackHTTP) -> None:
    cfg = config({"name": "up", "url": sse.url, "direct_url": sse.url.replace("127.0.0.1", "localhost")},
                 {"name": "down", "url": "http://127.0.0.1:9"})  # fmt: skip
    summaries = run_once(cfg, cycles=2)
    up, down = summaries
    assert up.routes["via"].probes == 2
    assert up.routes["direct"].probes == 2
    assert up.routes["via"].failures == 0
    assert down.routes["via"].reasons == {"connect": 2}
    # fpr above FRAMES + 1 (every frame and the final one in a single read) cannot happen on "up", however loaded
    # the host: only "down", with nothing measured, breaches it.
    most = FRAMES + 1
    breaches = check_rules(parse_rules(f"ttft_p95>60s,failure_rate>0,added_ttft_p50>60s,fpr>{most}"), summaries)
    assert [(b.rule.text, b.target) for b in breaches] == [
        ("ttft_p95>60s", "down"),  # nothing measured: breached
        ("failure_rate>0", "down"),
        (f"fpr>{most}", "down"),
    ]  # added_ttft does not apply to a target without direct_url
    assert "nothing measured" in breaches[0].line()
    assert check_rules(parse_rules("ttft_p50>0ms"), summaries)[0].value is not None
    assert up.value("ttft", 100) is not None
    assert up.value("added_ttft", 50) is not None


def test_each_target_keeps_its_own_interval() -> None:
    cfg = config({"name": "slow", "url": "http://127.0.0.1:9", "interval_s": 0.5},
                 {"name": "fast", "url": "http://127.0.0.1:10", "interval_s": 0.1})  # fmt: skip
    counts = {"http://127.0.0.1:9": 0, "http://127.0.0.1:10": 0}
    watch = Watch(cfg, MonitorMetrics(cfg), prober=lambda c, s: _count(counts, c, watch))
    started = time.monotonic()
    watch.run()
    elapsed = time.monotonic() - started
    assert counts["http://127.0.0.1:10"] == 10
    assert counts["http://127.0.0.1:9"] <= elapsed / 0.5 * 1.01 + 1  # the slow one kept its 0.5 s


def _count(counts: dict[str, int], c: ProbeConfig, watch: Watch) -> Trace:
    counts[c.url] += 1
    if counts["http://127.0.0.1:10"] >= 10:
        watch.stop()
    raise errors.ConnectError("refused")


class JSONHandler(QuietHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"error": "overloaded"}' if self.path.startswith("/busy") else b'{"choices": []}'
        self.send_response(503 if self.path.startswith("/busy") else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_peer_faults_are_outcomes_by_reason(tmp_path: Path) -> None:
    from tokenpath.serve.tlscert import self_signed

    plain = LoopbackHTTP(JSONHandler)
    silent = socket.create_server(("127.0.0.1", 0))
    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    tls = TLSRecordBurst(str(files.cert), str(files.key))  # a certificate the system store does not trust
    try:
        cfg = config(
            {"name": "json", "url": plain.url},
            {"name": "busy", "url": plain.url + "/busy/v1"},
            {"name": "hang", "url": f"http://127.0.0.1:{silent.getsockname()[1]}", "first_byte_timeout_s": 0.3},
            {"name": "badcert", "url": f"https://127.0.0.1:{tls.port}"},
        )
        reasons = {s.name: s.routes["via"].reasons for s in run_once(cfg, cycles=1)}
    finally:
        plain.close()
        silent.close()
        tls.close()
    assert reasons == {
        "json": {"content_type": 1},
        "busy": {"http_status": 1},
        "hang": {"first_byte_timeout": 1},
        "badcert": {"tls": 1},
    }


def test_insecure_is_the_one_applied(tmp_path: Path) -> None:
    """A certificate no store trusts: refused by default (test above), accepted with `insecure = true`."""
    from tokenpath.serve.tlscert import self_signed

    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    server = TLSRecordBurst(str(files.cert), str(files.key))
    try:
        cfg = config({"name": "anycert", "url": f"https://127.0.0.1:{server.port}", "insecure": True})
        (summary,) = run_once(cfg, cycles=1)
    finally:
        server.close()
    assert summary.routes["via"].failures == 0
    assert summary.value("coalescing") == 5.0


class Recording:
    """A second sink beside the Prometheus metrics (as the OTLP export is): what the watch hands it."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []
        self.dropped: list[tuple[str, str, int]] = []

    def record(self, outcome: Any) -> None:
        self.outcomes.append(f"{outcome.target}/{outcome.route}/{outcome.outcome}")

    def record_added(self, target: str, added_s: float) -> None:
        pass

    def record_dropped(self, target: str, reason: str, count: int) -> None:
        self.dropped.append((target, reason, count))


def _slow_refusal(c: ProbeConfig, stream_id: str) -> Trace:
    time.sleep(0.35)
    raise errors.ConnectError("refused")


def test_a_probe_due_while_the_previous_one_runs_is_dropped_as_overrun_and_every_sink_hears_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cfg = config({"name": "slow", "url": "http://127.0.0.1:9"})  # every 0.1 s; each probe takes 0.35 s
    metrics = MonitorMetrics(cfg)
    sink = Recording()
    with caplog.at_level("WARNING", logger="tokenpath.monitor"):
        Watch(cfg, metrics, sinks=(sink,), prober=_slow_refusal).run(max_cycles=2)
    get = metrics.registry.get_sample_value
    overrun = get("tokenpath_monitor_probes_dropped_total", {"target": "slow", "reason": "overrun"})
    assert overrun is not None
    assert overrun >= 4  # about 3 per probe
    assert get("tokenpath_monitor_probes_dropped_total", {"target": "slow", "reason": "concurrency"}) == 0
    assert sum(n for _, reason, n in sink.dropped if reason == "overrun") == overrun
    assert sink.outcomes == ["slow/via/connect", "slow/via/connect"]  # the same outcomes the metrics counted
    assert get("tokenpath_monitor_probes_total", {"target": "slow", "route": "via", "outcome": "connect"}) == 2
    assert '"event": "dropped", "target": "slow", "reason": "overrun"' in caplog.text


def test_a_probe_that_finds_every_slot_busy_is_dropped_as_concurrency() -> None:
    cfg = config({"name": "a", "url": "http://127.0.0.1:9"}, {"name": "b", "url": "http://127.0.0.1:10"},
                 interval_s=0.2, max_concurrency=1)  # fmt: skip
    metrics = MonitorMetrics(cfg)
    Watch(cfg, metrics, prober=_slow_refusal).run(max_cycles=3)
    get = metrics.registry.get_sample_value
    concurrency = sum(get("tokenpath_monitor_probes_dropped_total", {"target": t, "reason": "concurrency"}) or 0
                      for t in "ab")  # fmt: skip
    assert concurrency >= 1
    probes = sum(get("tokenpath_monitor_probes_total", {"target": t, "route": "via", "outcome": "connect"}) or 0
                 for t in "ab")  # fmt: skip
    assert probes == 3  # one slot: the dropped ones never ran


class CutHandler(SSEHandler):
    """A streamed answer whose body ends (its last chunk) before the format's final event: cut_silent."""

    frames = 2
    final = b""


@pytest.fixture
def cut() -> Iterator[LoopbackHTTP]:
    server = LoopbackHTTP(CutHandler)
    yield server
    server.close()


def test_once_never_measures_a_cut_stream_so_every_rule_on_it_is_breached(sse: LoopbackHTTP, cut: LoopbackHTTP) -> None:
    cfg = config({"name": "cut", "url": cut.url, "direct_url": sse.url.replace("127.0.0.1", "localhost")})
    (summary,) = run_once(cfg, cycles=3)
    via = summary.routes["via"]
    assert via.reasons == {"cut_silent": 3}
    assert summary.routes["direct"].failures == 0
    assert (via.ttft_s, via.ttfb_s, via.gaps_s, via.fpr, via.bursts.modal()) == ([], [], [], [], None)
    assert summary.added_s == []  # a cut via stream gives no via - direct
    text = "ttft_p95>1s,ttfb_p95>1s,fpr>1.5,fpr_max>2,coalescing>1,gap_p95>1s,added_ttft_p95>1s,failure_rate>0.4"
    breaches = check_rules(parse_rules(text), [summary])
    assert [b.rule.text for b in breaches] == text.split(",")
    assert [b.value for b in breaches[:-1]] == [None] * 7  # nothing measured: breached
    assert breaches[-1].value == pytest.approx(0.5)  # 3 of 6 probes (the direct ones were whole)


def test_the_watch_records_no_added_ttft_from_a_cut_stream(sse: LoopbackHTTP, cut: LoopbackHTTP) -> None:
    cfg = config({"name": "cut", "url": cut.url, "direct_url": sse.url.replace("127.0.0.1", "localhost")})
    metrics = MonitorMetrics(cfg)
    Watch(cfg, metrics).run(max_cycles=3)
    get = metrics.registry.get_sample_value
    assert get("tokenpath_monitor_probes_total", {"target": "cut", "route": "via", "outcome": "cut_silent"}) == 3
    assert get("tokenpath_monitor_probes_total", {"target": "cut", "route": "via", "outcome": "ok"}) == 0
    assert get("tokenpath_monitor_probes_total", {"target": "cut", "route": "direct", "outcome": "ok"}) == 3
    assert (get("tokenpath_monitor_added_ttft_seconds_count", {"target": "cut"}) or 0) == 0
    assert get("tokenpath_monitor_added_ttft_last_seconds", {"target": "cut"}) is None


# Run in a process of its own: SIGINT raises KeyboardInterrupt in a process's main thread, and a pytest-xdist
# worker's main thread need not be the one running the test (a signal sent there from a test took the worker down).
# Its SIGINT handler is set, not inherited: a parent that ignores SIGINT (pytest run as a background job of a
# non-interactive shell) passes the ignoring on, and Python then raises no KeyboardInterrupt (the stop never came).
CTRL_C_IN_ONCE = """
import json, os, signal
signal.signal(signal.SIGINT, signal.default_int_handler)
from tokenpath import errors
from tokenpath.monitor.config import from_dict
from tokenpath.monitor.probing import Aborter
from tokenpath.monitor.runner import Interrupted, run_once

cfg = from_dict({"monitor": {"interval_s": 0.1, "jitter": 0.0}, "target": [{"name": "a", "url": "http://127.0.0.1:9"}]})
aborter = Aborter()
calls = []

def prober(c, stream_id):
    calls.append(stream_id)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this probe runs
        assert aborter.stopped.wait(30)  # the stop aborts it
    if aborter.stopped.is_set():
        raise errors.NetworkError("Broken pipe")  # what an aborted probe's socket says
    raise errors.ConnectError("refused")

try:
    run_once(cfg, cycles=50, prober=prober, aborter=aborter)
    print(json.dumps({"interrupted": False}))
except Interrupted as stop:
    (summary,) = stop.summaries
    via = summary.routes["via"]
    print(json.dumps({"interrupted": True, "calls": len(calls), "probes": via.probes, "reasons": via.reasons}))
"""


def test_ctrl_c_in_once_ends_at_once_with_the_probes_before_it() -> None:
    done = subprocess.run([sys.executable, "-c", CTRL_C_IN_ONCE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["interrupted"]
    assert result["calls"] == 3  # no cycle after the stop
    assert result["probes"] == 2  # the one the stop cut short is not counted
    assert result["reasons"] == {"connect": 2}


def test_an_interrupted_once_prints_its_summary_and_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from tokenpath.cli import app
    from tokenpath.monitor import service
    from tokenpath.monitor.runner import RouteSamples, TargetSummary

    def once(cfg: MonitorConfig, probes: int, rules: object) -> None:
        raise Interrupted([TargetSummary("a", {"via": RouteSamples(probes=2, failures=2, reasons={"connect": 2})})])

    monkeypatch.setattr(service, "once", once)
    result = CliRunner().invoke(app, ["monitor", "--url", "http://127.0.0.1:9/v1", "--once", "--json"])
    assert result.exit_code == 130
    assert '"probes": 2' in result.stdout
    assert "interrupted" in result.stderr
