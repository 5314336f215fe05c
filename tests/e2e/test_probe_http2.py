"""`tokenpath probe --http2`, all real processes: the stub's own h2c (prior knowledge), Caddy 2.11 over TLS (h2 by
ALPN, the issue's done-when), flow control as a stated condition (a 65,535-byte window with large frames stalls, the
`browser` preset does not: a probe that ignored --h2-window would stall in both), and an HTTP/1.1-only server (stock
nginx 1.22, clear text and TLS) failing with one line and exit 18, never a silent HTTP/1.1 run."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import Start
from tokenpath.errors import HTTP2Unavailable
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, Site, free_port, new_workdir, start
from tokenpath.serve.procs import tokenpath_argv
from tokenpath.serve.tlscert import self_signed

pytestmark = pytest.mark.e2e

FRAMES = 8
PACING = {"tokens": FRAMES, "interval_ms": 10, "ttft_ms": 0}
# every frame 64 KiB (the stub's largest) and the first content frame 1 MB: each overfills a 65,535-byte window
BIG = {"tokens": 4, "interval_ms": 10, "ttft_ms": 0, "frame_bytes": 65_536, "first_event_bytes": 1_000_000}


def run_probe(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = tokenpath_argv("probe", url, "--json", "--first-byte-timeout", "10", *args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def probe_doc(url: str, *args: str) -> dict[str, Any]:
    out = run_probe(url, *args)
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def run_monitor(url: str, http2: bool, *args: str) -> dict[str, Any]:
    """`monitor --once --url URL [--http2] --json`: the target's `via` figures."""
    argv = tokenpath_argv("monitor", "--once", "--url", url, "--json", "--max-tokens", "4", *args,
                          *(("--http2",) if http2 else ()))  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
    assert out.returncode in (0, 14), out.stderr  # 14: a --fail-on rule; none here, but a failed probe is not one
    via: dict[str, Any] = json.loads(out.stdout)["targets"][0]["routes"]["via"]
    return via


@pytest.fixture(scope="module")
def stub_url(module_service: Start) -> str:
    stub = module_service("stub", "--port", "0", name="stub")
    assert stub.url is not None
    return stub.url


def test_probe_speaks_h2c_to_the_stub(stub_url: str) -> None:
    body = json.dumps({"tokenpath": PACING})
    h2 = probe_doc(stub_url, "--http2", "--body-json", body, "--stub-url", stub_url)
    h1 = probe_doc(stub_url, "--body-json", body)
    assert (h2["http_version"], h1["http_version"]) == ("2", "1.1")
    run = h2["runs"][0]
    assert run["status"] == 200
    assert run["frames"] == h1["runs"][0]["frames"]  # the same stream, the same frames
    assert run["ttft_ms"] is not None
    assert run["added_ttft_ms"] is not None  # joined to the stub's write log over h2 too
    figures = run["h2"]
    assert figures["window"] == "default"
    assert figures["data_frames"] >= run["arrivals"]  # every arrival is at least one DATA frame of the stream
    assert figures["flow_control_stalls"] == 0  # small frames never fill a 65,535-byte window
    assert run["reads"] >= figures["data_reads"]  # reads of this stream: its DATA, and a head alone if split
    assert "h2" not in h1["runs"][0]


def test_a_default_window_stalls_on_large_frames_and_the_browser_preset_does_not(stub_url: str) -> None:
    body = json.dumps({"tokenpath": BIG})
    small = probe_doc(stub_url, "--http2", "--h2-window", "65535", "--body-json", body)["runs"][0]
    browser = probe_doc(stub_url, "--http2", "--h2-window", "browser", "--body-json", body)["runs"][0]
    assert small["frames"] == browser["frames"]
    assert small["h2"]["flow_control_stalls"] >= 1
    assert small["h2"]["stall_ms"] > 0
    assert small["h2"]["min_window"] < 16_384
    assert browser["h2"]["window"] == "browser"
    assert browser["h2"]["flow_control_stalls"] == 0
    assert browser["h2"]["min_window"] > 4_000_000  # 6 MiB less the 1 MB event


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return self_signed(tmp_path_factory.mktemp("h2tls"), ["127.0.0.1"])


def proxy_site(name: str, variant: str, stub_url: str, tls_files: Any | None) -> Any:
    """A catalogue proxy in front of the stub (skipped, saying why, where it is not installed)."""
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    parts = urlsplit(stub_url)
    assert parts.hostname is not None
    assert parts.port is not None
    upstream = Endpoint(parts.hostname, parts.port)
    site = Site(Endpoint("127.0.0.1", free_port()), upstream, new_workdir(f"{name}-h2"), proxy.variant(variant),
                tls_files)  # fmt: skip
    return start(proxy, site)


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_http2_against_an_http11_only_server_fails_with_one_line(stub_url: str, tls_files: Any, tls: bool) -> None:
    """Stock nginx 1.22 speaks HTTP/1.1 only: in clear text it answers the preface with a 400, over TLS its ALPN
    picks http/1.1. Both are exit 18 and one line, never a silent HTTP/1.1 run."""
    running = proxy_site("nginx", "stock", stub_url, tls_files if tls else None)
    extra = ("--cacert", str(tls_files.cert)) if tls else ()
    # four independent processes, side by side (each mostly starts up and waits; no timing is compared). The same
    # path answers HTTP/1.1 without --http2: the failure is the protocol's
    try:
        with ThreadPoolExecutor(4) as pool:
            failing = pool.submit(run_probe, running.url, "--http2", *extra)
            answered = pool.submit(probe_doc, running.url, *extra)
            monitors = {h2: pool.submit(run_monitor, running.url, h2, *extra) for h2 in (True, False)}
            out, again = failing.result(), answered.result()
            monitored = {h2: future.result() for h2, future in monitors.items()}
    finally:
        running.stop()
    # the monitor's --http2 reaches its probes: each fails as http2_unavailable, and without it each succeeds
    assert monitored[True]["failure_reasons"] == {"http2_unavailable": monitored[True]["probes"]}
    assert monitored[True]["probes"] >= 1
    assert monitored[False]["failures"] == 0
    assert out.returncode == HTTP2Unavailable.exit_code == 18, out.stderr
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "HTTP/2" in lines[0]
    assert ("ALPN" in lines[0]) is tls
    assert again["runs"][0]["status"] == 200


@pytest.fixture
def caddy_tls(stub_url: str, tls_files: Any) -> Iterator[str]:
    running = proxy_site("caddy-2.11", "stock", stub_url, tls_files)
    try:
        yield running.url
    finally:
        running.stop()


def test_probe_http2_through_caddy_211_over_tls(caddy_tls: str, tls_files: Any) -> None:
    """The issue's done-when: Caddy 2.11 terminates TLS and picks h2 by ALPN; the probe reports HTTP/2 and streams."""
    assert caddy_tls.startswith("https://")
    body = json.dumps({"tokenpath": PACING})
    doc = probe_doc(caddy_tls, "--http2", "--cacert", str(tls_files.cert), "--body-json", body)
    run = doc["runs"][0]
    assert doc["http_version"] == "2"
    assert run["status"] == 200
    assert run["ttft_ms"] is not None
    assert run["frames"] >= FRAMES
    assert run["arrivals"] >= FRAMES // 2  # it streams: not one burst at the end
    assert run["h2"]["data_frames"] >= run["arrivals"]
    # and the same path over HTTP/1.1, for contrast
    assert probe_doc(caddy_tls, "--cacert", str(tls_files.cert), "--body-json", body)["http_version"] == "1.1"


def test_h2_window_without_http2_is_a_usage_error(stub_url: str) -> None:
    out = run_probe(stub_url, "--h2-window", "browser")
    assert out.returncode == 2
    assert "--http2" in out.stderr
    out = run_probe(stub_url, "--http2", "--h2-window", "fast")
    assert out.returncode == 2
    assert "browser" in out.stderr
    # the monitor's flags reach its target's config (checked at start, before any probe)
    cases = ((("--h2-window", "browser"), "HTTP/2's"), (("--http2", "--h2-window", "fast"), "browser"))
    with ThreadPoolExecutor(len(cases)) as pool:  # two independent start-ups, side by side
        outs = pool.map(lambda args: subprocess.run(tokenpath_argv("monitor", "--once", "--url", stub_url, *args),
                                                    capture_output=True, text=True, timeout=30, check=False),
                        [args for args, _ in cases])  # fmt: skip
        for out, (_, says) in zip(outs, cases, strict=True):
            assert out.returncode == 2, out.stderr
            assert says in out.stderr
