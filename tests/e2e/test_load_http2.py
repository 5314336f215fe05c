"""`tokenpath load --http2`: many streams per connection to the stub (h2c) and through real nginx (Debian, h2c with
prior knowledge), joined to the stub's write log with the direct path as the floor. nginx's own access log counts
the connections (its `$connection` serial), so the streams per connection are seen from the server's side."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tokenpath.serve.procs import tokenpath_argv

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx: not installed (apt-get install nginx)"),
]

LEVEL = 50
NGINX = """daemon off;
worker_processes 1;
pid @DIR@/nginx.pid;
error_log stderr;
events { worker_connections 1024; }
http {
  log_format conns '$connection $connection_requests';
  access_log @DIR@/access.log conns;
  client_body_temp_path @DIR@/tmp;
  proxy_temp_path @DIR@/tmp;
  fastcgi_temp_path @DIR@/tmp;
  uwsgi_temp_path @DIR@/tmp;
  scgi_temp_path @DIR@/tmp;
  server {
    listen @LISTEN@ http2;
    http2_max_concurrent_streams @STREAMS@;
    location / {
      proxy_pass http://@UP@;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
"""


def nginx_target(tmp_path: Path, max_streams: int) -> tuple[str, Path]:
    """A LABEL=COMMAND target: nginx with h2c on its port and this stream limit; and its access log."""
    (tmp_path / "tmp").mkdir()
    template = tmp_path / "nginx.conf.in"
    template.write_text(NGINX.replace("@DIR@", str(tmp_path)).replace("@STREAMS@", str(max_streams)))
    conf = tmp_path / "nginx.conf"
    script = f"sed -e 's/@LISTEN@/{{listen}}/' -e 's/@UP@/{{upstream}}/' {template} > {conf} && exec nginx -c {conf}"
    return f'nginxh2=sh -c "{script}"', tmp_path / "access.log"


def run_load(tmp_path: Path, target: str, *extra: str) -> tuple[dict[str, Any], str]:
    out = subprocess.run(
        tokenpath_argv(
            "load", "--http2", "--proxy", target, "--concurrency", str(LEVEL), "--client-workers", "1",
            "--warmup", "0.5", "--duration", "1.5", "--runs", "1", "--tokens", "16", "--interval-ms", "14",
            "--ttft-ms", "30", "--out", str(tmp_path / "out"), *extra,
        ),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads((tmp_path / "out" / "results.json").read_text()), out.stdout


def connections(access_log: Path) -> set[str]:
    return {line.split()[0] for line in access_log.read_text().splitlines() if line.strip()}


def test_fifty_streams_on_one_connection_join_to_the_stub_with_the_direct_floor(tmp_path: Path) -> None:
    target, access_log = nginx_target(tmp_path, 128)
    doc, _ = run_load(tmp_path, target, "--streams-per-connection", str(LEVEL))
    assert doc["schema_version"] == 9  # 8: how each stream ended (issue 36); 9: attribution and pairing (issue 37)
    assert doc["config"]["http_version"] == "2"
    rows = {r["target"]: r for r in doc["levels"]}
    assert set(rows) == {"direct", "nginxh2"}
    for row in rows.values():
        assert row["http_version"] == "2"
        assert row["streams_per_connection"] == LEVEL
        assert row["errors"] == 0, row["error_samples"]
        assert row["unjoined"] == 0
        assert row["frames_lost"] == row["frames_out_of_order"] == 0
        assert row["kept"] >= LEVEL  # every stream joined to its write in the stub's log
        assert row["added_ttft_ms"]["p50"] is not None
        assert row["floor_ms"]["p50"] == rows["direct"]["added_ttft_ms"]["p50"]
        assert row["connections"] == 1
        assert row["connection_split"] is None
        assert row["flow_control_stalls"]["streams"] == row["streams"]
        assert row["data_frames_per_read"] >= 1.0
    # The server's count: 50 streams at once shared one connection (ignoring the option opens one per stream).
    assert len(connections(access_log)) == 1


def test_a_peer_limit_below_the_streams_per_connection_opens_more_connections_and_says_so(tmp_path: Path) -> None:
    target, access_log = nginx_target(tmp_path, 10)
    doc, stdout = run_load(tmp_path, target, "--streams-per-connection", str(LEVEL))
    row = next(r for r in doc["levels"] if r["target"] == "nginxh2")
    assert row["errors"] == 0, row["error_samples"]
    assert row["connections"] >= LEVEL // 10
    assert "allows 10 concurrent streams per connection" in row["connection_split"]
    assert "nginxh2 @ 50: the peer allows 10 concurrent streams per connection" in stdout
    assert len(connections(access_log)) >= LEVEL // 10
    direct = next(r for r in doc["levels"] if r["target"] == "direct")
    assert direct["connection_split"] is None  # the stub allows 128


def test_a_small_window_stalls_large_frames_and_the_browser_window_does_not(tmp_path: Path) -> None:
    """A 200 kB first event through the default 65,535-byte windows must wait for WINDOW_UPDATEs; Chromium's
    windows take it at once (the option reaches the connections: ignored, both runs would read alike)."""
    stalls = {}
    for window in ("default", "browser"):
        out = subprocess.run(
            tokenpath_argv(
                "load", "--http2", "--h2-window", window, "--streams-per-connection", "4", "--concurrency", "4",
                "--client-workers", "1", "--warmup", "0.3", "--duration", "1", "--runs", "1", "--tokens", "8",
                "--first-event-bytes", "200000", "--out", str(tmp_path / window),
            ),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        doc = json.loads((tmp_path / window / "results.json").read_text())
        (row,) = doc["levels"]
        assert row["errors"] == 0, row["error_samples"]
        assert doc["config"]["h2_window"] == window
        stalls[window] = row["flow_control_stalls"]
    assert stalls["default"]["stalls"] > 0
    assert stalls["default"]["stall_ms_p99"] > 0
    assert stalls["browser"]["stalls"] == 0
