"""nginx's workers (not root) must write their proxy temp files: a client that reads slower than the upstream writes
(an HTTP/2 window left shut, a slow reader) makes nginx spill the answer to disk, and a temp dir the worker cannot
reach ended the stream in a reset ("Permission denied" in error.log; H1's finding, issue 25)."""

from __future__ import annotations

import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import stub_upstream
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.stream import probe_stream
from tokenpath.proxies import lookup
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.wire.h2client import DEFAULT_WINDOW
from tokenpath.wire.httpversion import HttpVersion


def test_the_workdir_is_reachable_and_tmp_is_not_world_writable() -> None:
    work = Path(tempfile.mkdtemp(prefix="tokenpath-test-nginx-"))  # 0700, as new_workdir makes it
    try:
        config = lookup("nginx").write_config(
            Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), work, lookup("nginx").variant("stock"))
        )
        tmp = work / "tmp"
        assert stat.S_IMODE(work.stat().st_mode) == 0o711  # the worker may traverse it, not list it
        assert stat.S_IMODE(tmp.stat().st_mode) == 0o755  # the master chowns its own subdirs; no one else writes
        assert f"proxy_temp_path {tmp}/proxy;" in config.read_text()
    finally:
        for path in sorted(work.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        work.rmdir()


@pytest.fixture
def stub() -> Iterator[Endpoint]:
    with stub_upstream() as upstream:
        yield upstream


@pytest.mark.e2e
def test_a_shut_h2_window_spills_to_a_temp_file_and_the_stream_completes(stub: Endpoint) -> None:
    """40 frames of 64 KiB written at once against a 65,535-byte client window: nginx must buffer to a temp file (its
    error.log says so), and the stream still ends whole. Without the workdir's 0711 this is a reset (INTERNAL_ERROR).
    (Paced at 5 ms the client sometimes kept up and nothing spilled: written at once, 2.6 MB cannot wait in
    nginx's 32 KB of proxy_buffers.)"""
    proxy = lookup("nginx")
    if proxy.missing_reason():
        pytest.skip(f"nginx: {proxy.missing_reason()}")
    site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir("nginx"), proxy.variant("http2"))
    running = start(proxy, site)
    try:
        pacing = {"tokens": 40, "interval_ms": 0, "ttft_ms": 0, "frame_bytes": 65_536, "format": "plain"}
        cfg = ProbeConfig(url=running.url, http_version=HttpVersion.HTTP2, h2_window=DEFAULT_WINDOW,
                          first_byte_timeout_s=10, extra_body=(("tokenpath", pacing),))  # fmt: skip
        trace = probe_stream(cfg)
        log = (site.workdir / "error.log").read_text()
    finally:
        running.stop()
    assert "Permission denied" not in log
    assert "buffered to a temporary file" in log  # the spill this test is about did happen
    assert trace.frame_count == 40
    assert trace.h2 is not None
    assert trace.h2.flow_control_stalls > 0
