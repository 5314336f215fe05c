"""`tokenpath load --http3` through Caddy 2.11's stock TLS site (issue 38 item 2): a QUIC connection per stream to
Caddy, which streams from the real stub; each stream joined to the stub's writes, its handshake timed apart from TTFT,
the direct floor (the stub serves no QUIC) over HTTP/1.1. Counts and wide bounds only, never tight times."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.caddyh3 import caddy_h3
from tokenpath.proxies.base import Endpoint, RunningProxy
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.serve.tlscert import TLSFiles, self_signed

pytestmark = pytest.mark.e2e

PACING = ["--tokens", "8", "--interval-ms", "20", "--ttft-ms", "20"]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return self_signed(tmp_path_factory.mktemp("tls"), ["127.0.0.1"])


@pytest.fixture(scope="module")
def stub_and_caddy(tls_files: TLSFiles) -> Iterator[tuple[str, RunningProxy]]:
    with ServiceProcess(tokenpath_argv("stub", "--port", "0", *PACING), "stub") as stub:
        url = urlsplit(stub.url or "")
        assert url.hostname is not None
        assert url.port is not None
        with caddy_h3(Endpoint(url.hostname, url.port), tls_files, "caddy-h3-load") as running:
            yield stub.url or "", running


def test_load_over_http3_through_caddy_joins_each_stream_with_its_handshake_apart(
    tmp_path: Path, stub_and_caddy: tuple[str, RunningProxy], tls_files: TLSFiles
) -> None:
    stub_url, caddy = stub_and_caddy
    argv = [
        *("load", "--http3", "--target", caddy.url, "--stub-url", stub_url, "--cacert", str(tls_files.cert)),
        *("--concurrency", "3", "--client-workers", "1", "--warmup", "0.3", "--duration", "1.5", "--runs", "1"),
        *("--out", str(tmp_path / "out"), "--json"),
    ]
    out = subprocess.run(
        tokenpath_argv(*argv), capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "250"}
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = {r["target"]: r for r in doc["levels"]}
    h3, direct = rows["target"], rows["direct"]
    assert h3["http_version"] == "3"
    assert direct["http_version"] == "1.1"  # the floor: the stub serves no QUIC
    assert h3["errors"] == 0, h3["error_samples"]
    assert 0 < h3["kept"] == h3["streams_total"] - h3["audit_failed"]  # a stub late on a loaded host: excluded
    assert h3["connections"] == h3["streams_total"]  # a QUIC connection per stream
    assert 0 < h3["handshake_ms"]["p50"] <= h3["handshake_ms"]["p99"]
    assert h3["added_ttft_ms"]["p50"] is not None  # joined to the stub's writes
    assert h3["ends"] == {"complete": h3["streams_total"]}
    assert h3["frames_lost"] == 0
    assert h3["data_frames_per_read"] >= 1.0
    assert doc["config"]["h3_window"] == "default"
    table = " ".join(out.stderr.split())
    assert "3, 1/conn, handshake" in table


def test_a_certificate_not_verified_fails_every_stream_as_tls_never_a_stream(
    tmp_path: Path, stub_and_caddy: tuple[str, RunningProxy]
) -> None:
    stub_url, caddy = stub_and_caddy
    argv = [
        *("load", "--http3", "--target", caddy.url, "--stub-url", stub_url),  # no --cacert: self-signed, refused
        *("--concurrency", "2", "--client-workers", "1", "--warmup", "0", "--duration", "1.0", "--runs", "1"),
        *("--out", str(tmp_path / "out")),
    ]
    out = subprocess.run(tokenpath_argv(*argv), capture_output=True, text=True, timeout=180, env=os.environ.copy())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    row = next(r for r in doc["levels"] if r["target"] == "target")
    assert row["kept"] == 0
    assert row["errors"] == row["streams_total"] > 0
    assert "QUIC TLS handshake" in row["error_samples"][0]
