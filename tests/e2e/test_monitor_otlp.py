"""`tokenpath monitor --otlp-endpoint` as users run it: the stub as the target, the monitor process, and a collector
stand-in on loopback that decodes the OTLP/HTTP requests with the opentelemetry-proto messages
(tests/monitor/otlp_receiver.py). Exports come every `otlp_interval_s`, the last one on SIGTERM, with the header
the environment gave and nowhere else."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Start, netloc
from tests.monitor.otlp_receiver import OTLPReceiver
from tokenpath.monitor import otel_names
from tokenpath.serve.procs import tokenpath_argv

pytestmark = pytest.mark.e2e

STUB = ("stub", "--port", "0", "--interval-ms", "5", "--ttft-ms", "20", "--tokens", "8")
TTFC = otel_names.TIME_TO_FIRST_CHUNK
SECRET = "s3cret-e2e-token"


def test_the_monitor_exports_otlp_every_interval_and_flushes_on_sigterm(tmp_path: Path, service: Start) -> None:
    stub = service(*STUB, name="stub")
    receiver = OTLPReceiver()
    config = tmp_path / "monitor.toml"
    config.write_text(
        f'[monitor]\ninterval_s = 0.3\nmetrics_listen = "127.0.0.1:0"\notlp_endpoint = "{receiver.url}"\n'
        f'otlp_interval_s = 0.5\n[[target]]\nname = "stub"\nurl = "{stub.url}"\nmodel = "m1"\n'
    )
    env = {**os.environ, "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {SECRET}"}
    proc = subprocess.Popen(tokenpath_argv("monitor", str(config)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"OTLP to {receiver.url}/v1/metrics every 0.5 s" in line, line
        running = receiver.wait_for(TTFC, 3, timeout_s=20)
        assert sum(p.count for p in running) >= 3, receiver.received
        # every 0.5 s while it runs, not only at the end: a second export comes (waited for: a loaded host's export
        # thread may be late, and the first export can already hold the 3 probes)
        deadline = time.monotonic() + 20
        while len(receiver.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        periodic = len(receiver.received)
        assert periodic >= 2, receiver.received
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # something above failed: not left running, and reaped
            proc.kill()
            proc.communicate(timeout=30)
        receiver.close()
    assert proc.returncode == 0, err
    assert len(receiver.received) > periodic  # the flush on stop
    ok = [r for r in map(_record, err.splitlines()) if r.get("event") == "probe" and r.get("outcome") == "ok"]
    (flushed,) = receiver.points(TTFC)
    assert flushed.count == len(ok)  # every probe it logged before stopping is in the last export
    host, port = netloc(stub.url).rsplit(":", 1)
    assert flushed.attributes == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m1",
        "server.address": host, "server.port": int(port), "tokenpath.hop": "via", "tokenpath.target": "stub",
    }  # fmt: skip
    assert flushed.bounds == otel_names.BUCKETS
    assert 0.015 <= flushed.total / flushed.count < 1.0  # the stub waits 20 ms (from its own start) to the first token
    (per_chunk,) = receiver.points(otel_names.TIME_PER_OUTPUT_CHUNK)
    assert per_chunk.count >= len(ok) * 7  # 8 tokens (and [DONE]): at least 7 chunks after the first per probe
    (probes,) = [p for p in receiver.points("tokenpath.monitor.probes") if p.attributes["tokenpath.outcome"] == "ok"]
    assert probes.total == len(ok)
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in receiver.received)
    assert SECRET not in line + out + err


def _record(line: str) -> dict[str, object]:
    if not re.match(r"^\{", line):
        return {}
    record: dict[str, object] = json.loads(line)
    return record


def test_the_flag_is_checked_before_anything_runs() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(tokenpath_argv("monitor", "--url", "http://127.0.0.1:9", *args), capture_output=True,
                              text=True, timeout=60)  # fmt: skip

    bad = run("--otlp-endpoint", "ftp://collector:4318")
    assert bad.returncode == 2
    assert "--otlp-endpoint 'ftp://collector:4318': expected http(s)://" in bad.stderr
    once = run("--once", "--otlp-endpoint", "http://127.0.0.1:4318")
    assert once.returncode == 2
    assert "--otlp-endpoint goes with the long-running monitor" in once.stderr
