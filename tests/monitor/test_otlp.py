"""The OTLP export against a receiver on loopback that decodes what arrives with the opentelemetry-proto messages
(tests/monitor/otlp_receiver.py): names, units, bucket boundaries, attributes and counts as a collector sees them."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.monitor.otlp_receiver import OTLPReceiver, Point, resource_attributes
from tokenpath.errors import UsageError
from tokenpath.monitor import otel_names, otlp, otlp_endpoint
from tokenpath.monitor.config import MonitorConfig, from_dict
from tokenpath.monitor.metrics import ADDED_BUCKETS, FPR_BUCKETS
from tokenpath.monitor.probing import ProbeOutcome, probe_route
from tokenpath.monitor.schedule import OVERRUN
from tokenpath.probe.trace import Trace, TraceRecorder
from tokenpath.wire.request import STREAM_HEADER

MS = 1_000_000
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CONTENT = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
CUMULATIVE = 2  # opentelemetry.proto.metrics.v1.AggregationTemporality


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def streamed() -> Trace:
    """TTFT 20 ms; then two frames in one read 20 ms later, and [DONE] 20 ms after that: 4 frames, 3 arrivals."""
    rec = TraceRecorder("s", 0)
    for t_ms, data in [(1, HEAD), (20, chunk(CONTENT)), (40, chunk(CONTENT * 2)),
                       (60, chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")]:  # fmt: skip
        rec.on_read(t_ms * MS, data)
    return rec.trace


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    r = OTLPReceiver()
    yield r
    r.close()


def config(endpoint: str, **settings: Any) -> MonitorConfig:
    return from_dict({
        "monitor": {"otlp_endpoint": endpoint, "otlp_interval_s": 60, **settings},
        "target": [{"name": "edge", "url": "http://127.0.0.1:9/v1", "direct_url": "http://localhost:10/v1",
                    "model": "m1"}],
    })  # fmt: skip


def outcomes(cfg: MonitorConfig) -> list[ProbeOutcome]:
    target = cfg.targets[0]
    ok = probe_route("edge", "via", target.routes["via"], lambda c, s: streamed())
    direct = probe_route("edge", "direct", target.routes["direct"], lambda c, s: streamed())

    def refused(c: Any, s: str) -> Trace:
        from tokenpath.errors import ConnectError

        raise ConnectError("refused")

    failed = probe_route("edge", "via", target.routes["via"], refused)
    return [ok, ok, failed, direct]


def by(points: list[Point], **attributes: Any) -> Point:
    (match,) = [p for p in points if all(p.attributes.get(k) == v for k, v in attributes.items())]
    return match


def test_the_genai_histograms_and_ours_arrive_with_their_names_units_buckets_attributes_and_counts(
    receiver: OTLPReceiver,
) -> None:
    cfg = config(receiver.url)
    export = otlp.OtlpExport(cfg)
    for outcome in outcomes(cfg):
        export.record(outcome)
    export.record_added("edge", 0.012)
    export.record_added("edge", -0.004)  # a negative difference counts as 0, as on /metrics
    export.record_dropped("edge", OVERRUN, 2)
    export.close()

    assert receiver.received, "nothing arrived"
    assert resource_attributes(receiver.received[-1].request)["service.name"] == "tokenpath-monitor"
    ttfc = receiver.points("gen_ai.client.operation.time_to_first_chunk")
    via = by(ttfc, **{"tokenpath.hop": "via"})
    assert via.attributes == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m1",
        "server.address": "127.0.0.1", "server.port": 9, "tokenpath.hop": "via", "tokenpath.target": "edge",
    }  # fmt: skip
    assert via.unit == "s"
    assert via.bounds == otel_names.BUCKETS == (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                                                20.48, 40.96, 81.92)  # fmt: skip
    assert via.count == 2  # the failed probe has no TTFT
    assert via.total == pytest.approx(0.040)
    assert via.bucket_counts[1] == 2  # 20 ms: in (0.01, 0.02]
    assert via.temporality == CUMULATIVE
    direct = by(ttfc, **{"tokenpath.hop": "direct"})
    assert (direct.count, direct.attributes["server.address"], direct.attributes["server.port"]) == (1, "localhost", 10)

    per_chunk = by(receiver.points("gen_ai.client.operation.time_per_output_chunk"), **{"tokenpath.hop": "via"})
    assert per_chunk.bounds == otel_names.BUCKETS
    assert per_chunk.count == 2 * 3  # per ok probe: 4 frames, so 3 chunks after the first
    assert per_chunk.total == pytest.approx(2 * 0.040)  # 20 ms, 20 ms, and 0 for the frame that shared a read
    assert per_chunk.bucket_counts[0] == 2  # the zeros

    probes = receiver.points("tokenpath.monitor.probes")
    assert by(probes, **{"tokenpath.hop": "via", "tokenpath.outcome": "ok"}).total == 2
    assert by(probes, **{"tokenpath.hop": "via", "tokenpath.outcome": "connect"}).total == 1
    assert by(probes, **{"tokenpath.hop": "direct", "tokenpath.outcome": "ok"}).total == 1
    assert all(p.monotonic and p.unit == "{probe}" for p in probes)
    added = by(receiver.points("tokenpath.monitor.added_ttft"), **{"tokenpath.target": "edge"})
    assert (added.count, added.bounds, added.unit) == (2, ADDED_BUCKETS, "s")
    assert added.total == pytest.approx(0.012)
    fpr = by(receiver.points("tokenpath.monitor.frames_per_read"), **{"tokenpath.hop": "via"})
    assert (fpr.count, fpr.bounds) == (2, FPR_BUCKETS)
    assert fpr.total == pytest.approx(2 * 4 / 3)
    dropped = by(receiver.points("tokenpath.monitor.probes_dropped"), **{"tokenpath.reason": OVERRUN})
    assert dropped.total == 2


def test_the_provider_attribute_follows_the_target_s_api(receiver: OTLPReceiver) -> None:
    cfg = from_dict({
        "monitor": {"otlp_endpoint": receiver.url, "otlp_interval_s": 60},
        "target": [{"name": "edge", "url": "http://127.0.0.1:9", "model": "m1", "api": "anthropic"}],
    })  # fmt: skip
    export = otlp.OtlpExport(cfg)
    export.record(probe_route("edge", "via", cfg.targets[0].routes["via"], lambda c, s: streamed()))
    export.close()
    (point,) = receiver.points("gen_ai.client.operation.time_to_first_chunk")
    assert point.attributes["gen_ai.provider.name"] == "anthropic"


def test_it_exports_every_interval_and_flushes_on_close(receiver: OTLPReceiver) -> None:
    cfg = config(receiver.url)  # otlp_interval_s 60: nothing until close()
    export = otlp.OtlpExport(cfg)
    export.record(outcomes(cfg)[0])
    time.sleep(0.4)
    assert receiver.received == []
    export.close()
    assert sum(p.count for p in receiver.points("gen_ai.client.operation.time_to_first_chunk")) == 1
    export.close()  # a second close is a no-op

    frequent = OTLPReceiver()
    try:
        cfg = config(frequent.url, otlp_interval_s=0.2)
        export = otlp.OtlpExport(cfg)
        export.record(outcomes(cfg)[0])
        points = frequent.wait_for("gen_ai.client.operation.time_to_first_chunk", 1, timeout_s=5)
        assert sum(p.count for p in points) == 1  # before close(): the interval is the one applied
        time.sleep(0.5)
        assert len(frequent.received) >= 2
        export.close()
    finally:
        frequent.close()


def test_headers_come_from_the_environment_and_never_reach_a_log(
    receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cret-token,x-team=search")
    cfg = config(receiver.url)
    export = otlp.OtlpExport(cfg)
    export.record(outcomes(cfg)[0])
    export.close()
    headers = receiver.received[-1].headers
    assert headers["authorization"] == "Bearer s3cret-token"
    assert headers["x-team"] == "search"
    assert STREAM_HEADER.lower() not in headers

    refusing = OTLPReceiver(status=401)
    try:
        caplog.set_level(logging.DEBUG)
        export = otlp.OtlpExport(config(refusing.url))
        export.record(outcomes(cfg)[0])
        export.close()
        assert refusing.received  # it was tried, and refused
    finally:
        refusing.close()
    assert "401" in caplog.text  # the failure is logged ...
    assert "s3cret" not in caplog.text  # ... without the header's secret


def test_the_endpoint_is_a_url_with_the_metrics_path_and_is_shown_without_credentials() -> None:
    assert otlp_endpoint.endpoint_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/metrics"
    assert otlp_endpoint.endpoint_url("https://otel.example:443/") == "https://otel.example:443/v1/metrics"
    assert otlp_endpoint.endpoint_url("http://c:4318/custom/metrics") == "http://c:4318/custom/metrics"
    assert otlp_endpoint.shown("https://user:pw@otel.example/v1/metrics?token=t") == "https://otel.example/v1/metrics"
    for bad in ("otel.example:4318", "ftp://c/v1/metrics", "http://c:99999", "http:///v1/metrics"):
        with pytest.raises(UsageError, match="otlp_endpoint"):
            otlp_endpoint.endpoint_url(bad)
    with pytest.raises(UsageError, match="otlp_endpoint"):
        config("grpc://127.0.0.1:4317")  # checked when the config is read, before any probe
    with pytest.raises(UsageError, match="otlp_interval_s"):
        config("http://127.0.0.1:4318", otlp_interval_s=0)


def test_without_the_sdk_otlp_is_a_usage_error_that_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "opentelemetry.sdk.metrics"):
        monkeypatch.setitem(sys.modules, module, None)  # what an install without the `otel` extra looks like
    with pytest.raises(UsageError, match=r"pip install 'tokenpath\[otel\]'"):
        otlp.require()
    with pytest.raises(UsageError, match="OpenTelemetry SDK"):
        otlp.OtlpExport(config("http://127.0.0.1:4318"))


def test_the_monitor_imports_and_runs_without_the_sdk() -> None:
    import subprocess

    code = (
        "import sys\n"
        "for m in [m for m in sys.modules if m.startswith('opentelemetry')]: del sys.modules[m]\n"
        "sys.modules['opentelemetry'] = None\n"  # every `import opentelemetry...` fails from here on
        "from tokenpath.cli import monitor\n"
        "from tokenpath.monitor import config, metrics, otlp, runner, service\n"
        "cfg = config.from_dict({'target': [{'name': 'a', 'url': 'http://127.0.0.1:9'}]})\n"
        "runner.Watch(cfg, metrics.MonitorMetrics(cfg))\n"
        "try:\n"
        "    otlp.require()\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("UsageError `otlp_endpoint` needs the OpenTelemetry SDK"), out.stdout


def test_the_flag_sets_the_endpoint_over_the_file() -> None:
    from tokenpath.monitor.config import Overrides

    data = Overrides(url="http://127.0.0.1:9", otlp_endpoint="http://127.0.0.1:4318").apply(
        {"monitor": {"otlp_endpoint": "http://file:4318"}}
    )
    assert from_dict(data).settings.otlp_endpoint == "http://127.0.0.1:4318"
    assert from_dict(Overrides(url="http://127.0.0.1:9").apply({})).settings.otlp_endpoint is None


def test_a_stop_waits_a_bounded_moment_for_a_collector_that_never_answers() -> None:
    import socket

    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nothing ever answers
    try:
        cfg = config(f"http://127.0.0.1:{silent.getsockname()[1]}")
        export = otlp.OtlpExport(cfg)
        export.record(outcomes(cfg)[0])
        started = time.monotonic()
        export.close()
        assert time.monotonic() - started < otlp.STOP_FLUSH_TIMEOUT_S + 1.0  # not the export's 5 s timeout
    finally:
        silent.close()


def test_the_sdk_s_own_log_lines_are_json_like_the_monitor_s(tmp_path: Any) -> None:
    import json
    import signal
    import socket
    import subprocess

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # a collector that refuses: every export fails, and the SDK logs it
    path = tmp_path / "m.toml"
    path.write_text(
        '[monitor]\ninterval_s = 0.2\notlp_interval_s = 0.2\nmetrics_listen = "127.0.0.1:0"\n'
        f'otlp_endpoint = "http://127.0.0.1:{port}"\n[[target]]\nname = "a"\nurl = "http://127.0.0.1:9/v1"\n'
    )
    tokenpath = [sys.executable, "-c", "from tokenpath.cli import main; main()"]
    proc = subprocess.Popen(
        [*tokenpath, "monitor", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "opentelemetry" in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines += rest.splitlines()
    sdk = [line for line in lines if "opentelemetry" in line]
    assert sdk, lines
    assert [line for line in lines if line.strip() and not line.startswith("{")] == []
    assert json.loads(sdk[0])["logger"].startswith("opentelemetry.")


def test_the_sdks_log_lines_mask_the_endpoints_query_and_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    """urllib3's retry warnings, passed on by the SDK, quoted `/v1/metrics?token=...` whole, 4 times in 7 s."""
    endpoint = "http://otuser:OTPASS1@127.0.0.1:1/v1/metrics?token=QTOKEN1"
    sdk = logging.getLogger("opentelemetry")
    kept = (list(sdk.handlers), sdk.level, sdk.propagate)
    try:
        otlp.log_as_json("warning", endpoint)
        logging.getLogger("opentelemetry.exporter.otlp").warning(
            "Transient error %s, retrying", "Max retries exceeded with url: /v1/metrics?token=QTOKEN1 (otuser:OTPASS1)"
        )
    finally:
        sdk.handlers[:], sdk.level, sdk.propagate = kept
    err = capsys.readouterr().err
    assert "url: /v1/metrics?*** (***)" in err
    assert "QTOKEN1" not in err
    assert "OTPASS1" not in err
