"""`tokenpath load --transport websocket` (issue 38): a few streams over the stub's Responses WebSocket mode, direct
and through real nginx, stock (it drops Upgrade/Connection: the stub answers the plain GET 405) and with its
upgrade lines (the catalogue's `websocket` variant). The direct and carried paths are joined to the stub's writes
with their upgrade figures; every stream of the stock path is reported not upgraded, with its status, and none of
them is in the figures (the level stops after 50 refusals, in its warm-up: those are its streams). And through the
gateway, which carries the mode."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Start
from tokenpath.proxies import lookup
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

pytestmark = pytest.mark.e2e
needs_nginx = pytest.mark.skipif(
    lookup("nginx").binary() is None, reason="nginx: not installed (scripts/install-proxies)"
)


PACING = ["--tokens", "8", "--interval-ms", "20", "--ttft-ms", "20"]


def _row(doc: dict[str, Any], target: str) -> dict[str, Any]:
    return next(r for r in doc["levels"] if r["target"] == target)


@needs_nginx
def test_load_over_websocket_direct_and_through_nginx_with_and_without_its_upgrade_lines(tmp_path: Path) -> None:
    argv = [
        *("load", "--api", "responses", "--transport", "websocket", "--proxy", "nginx", "--proxy", "nginx:websocket"),
        *("--concurrency", "3", "--client-workers", "1", "--warmup", "0.5", "--duration", "1.0", "--runs", "1"),
        *("--tokens", "8", "--interval-ms", "20", "--ttft-ms", "20", "--out", str(tmp_path / "out"), "--json"),
    ]
    out = subprocess.run(
        tokenpath_argv(*argv), capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "250"}
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["config"]["transport"] == "websocket"
    for target in ("direct", "nginx:websocket"):
        row = _row(doc, target)
        ws = row["websocket"]
        assert row["transport"] == "websocket"
        assert row["errors"] == 0, row["error_samples"]
        assert 0 < row["kept"] == row["streams_total"] - row["audit_failed"]  # a stub late on a loaded host: excluded
        assert ws["upgraded"] == row["streams_total"]
        assert ws["not_upgraded"] == {}
        assert 0 < ws["upgrade_ms_p50"] <= ws["upgrade_ms_p99"]
        assert ws["messages_per_read"] >= 1.0
        assert row["added_ttft_ms"]["p50"] is not None  # joined to the stub's writes
        assert row["ends"] == {"complete": row["streams_total"]}
    stock = _row(doc, "nginx")
    assert stock["streams_total"] > 0
    assert stock["kept"] == 0  # never a fast stream
    assert stock["websocket"]["upgraded"] == 0
    assert stock["websocket"]["not_upgraded"] == {"405": stock["streams_total"]}
    assert stock["added_ttft_ms"]["p50"] is None
    assert "WebSocket upgrade not carried: HTTP 405 instead of 101" in stock["error_samples"][0]
    assert stock["ends"] == {"cut_error": stock["streams_total"]}  # an error status: no stream at all
    table = " ".join(out.stderr.split())  # --json: the table goes to stderr
    assert "WebSocket upgrades" in table
    assert f"0/{stock['streams_total']} 101, not upgraded: {stock['streams_total']} x HTTP 405" in table


def test_load_over_websocket_through_the_gateway(tmp_path: Path, service: Start) -> None:
    """The gateway carries the WebSocket mode on the Responses route (--no-auth: no JWT on the upgrade here)."""
    stub = service("stub", "--port", "0", *PACING, name="stub")
    argv = ["gateway", "--listen", "127.0.0.1:0", "--upstream", stub.url or "", "--no-auth"]
    gateway = ServiceProcess(tokenpath_argv(*argv), "gateway")
    gateway.start()
    try:
        load = [
            *("load", "--api", "responses", "--transport", "websocket"),
            *("--target", gateway.url or "", "--stub-url", stub.url or ""),
            *("--concurrency", "3", "--client-workers", "1", "--warmup", "0.3", "--duration", "1.0", "--runs", "1"),
            *("--out", str(tmp_path / "out")),
        ]
        out = subprocess.run(
            tokenpath_argv(*load), capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "250"}
        )
    finally:
        gateway.stop()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    row = _row(doc, "target")
    assert row["errors"] == 0, row["error_samples"]
    assert 0 < row["kept"] == row["streams_total"] - row["audit_failed"]  # a stub late on a loaded host: excluded
    assert row["websocket"]["upgraded"] == row["streams_total"]
    assert row["added_ttft_ms"]["p50"] is not None
    assert row["ends"] == {"complete": row["streams_total"]}


def test_load_over_a_realtime_session_sends_its_client_events(tmp_path: Path) -> None:
    """The Realtime API's client events for a response (a user item, then response.create: ApiSpec.ws_request) go
    out, over the WebSocket a Realtime API implies (as in probe and diagnose), its request parts the WebSocket
    transport's (a Realtime request over SSE is refused): every
    stream is upgraded, complete, joined to the stub's writes and passes the integrity check."""
    argv = [
        *("load", "--api", "realtime", "--concurrency", "2", "--client-workers", "1"),  # WebSocket implied
        *("--warmup", "0.3", "--duration", "0.8", "--runs", "1", *PACING, "--out", str(tmp_path / "out"), "--json"),
    ]
    out = subprocess.run(tokenpath_argv(*argv), capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    row = _row(json.loads((tmp_path / "out" / "results.json").read_text()), "direct")
    assert row["errors"] == 0, row["error_samples"]
    assert row["audit_failed"] == 0
    assert row["ends"] == {"complete": row["streams_total"]}
    assert row["websocket"]["upgraded"] == row["streams_total"] > 0
    assert row["added_ttft_ms"]["p50"] is not None
