"""`tokenpath probe --client chromium`: headless Debian Chromium streams from the stub, directly and through the
controls, all real processes, and must see what the raw probe sees.

Direct: the stub holds its first token 300 ms, so TTFT is dominated by a known absolute part; the browser's TTFT and
the raw probe's, measured side by side in this test, agree within a few ms (the tolerance grows with the spread the
runs themselves show, never a fixed small number that flakes on a loaded box). Through `buffer` the browser gets the
whole stream at the end, through `cork` in bursts; through `gzip-hold` the browser's own Accept-Encoding gets a
gzip answer (the raw probe, asking for none, gets identity) that it decodes, and the held stream is one late burst.

20 frames of 60 B every 50 ms after 300 ms.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.chromium import find_chromium
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv

pytestmark = pytest.mark.e2e

FRAMES, INTERVAL_MS, TTFT_MS = 20, 50, 300
STREAM_MS = TTFT_MS + (FRAMES - 1) * INTERVAL_MS
RUNS = 2  # streams per probe command; the side-by-side TTFT comparison takes SIDE_BY_SIDE of each
SIDE_BY_SIDE = 4
FEW_MS = 5.0  # what the browser may add on one host: its network service to renderer hop, a 0.1 ms clock grain


@pytest.fixture(scope="module", autouse=True)
def chromium() -> None:
    if find_chromium() is None:
        if os.geteuid() == 0:
            pytest.fail("Chromium missing although `make test` installs it as root (scripts/install-proxies --all)")
        pytest.skip("Chromium not installed and not root: run `make test` as root, or apt-get install chromium")
    pytest.importorskip("playwright", reason="`tokenpath[browser]` (Playwright) is not installed")


@pytest.fixture(scope="module")
def paths(module_service: Start, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The stub; cleartext `cork` and `gzip-hold` relays (HTTP/1.1: a browser never speaks h2c); TLS `pass`,
    `buffer` and `cork` relays with a private CA (they offer h2 by ALPN, which the browser takes by itself, and
    relay the stub's own h2)."""
    from tokenpath.serve.tlscert import self_signed

    stub = module_service(
        "stub", "--port", "0", "--format", "plain", "--tokens", str(FRAMES), "--interval-ms", str(INTERVAL_MS),
        "--ttft-ms", str(TTFT_MS), "--frame-bytes", "60", name="stub",
    )  # fmt: skip
    files = self_signed(tmp_path_factory.mktemp("tls"), ["127.0.0.1"])
    tls = ("--tls-cert", str(files.cert), "--tls-key", str(files.key))

    def relay(name: str) -> ServiceProcess:
        mode, _, over = name.partition("+")
        cork = ("--cork-ms", "200") if mode == "cork" else ()  # cork's own flag (another mode refuses it)
        return module_service("relay", "--upstream", netloc(stub.url), "--mode", mode, *cork,
                              *(tls if over == "tls" else ()), name=name)  # fmt: skip

    names = ("cork", "gzip-hold", "pass+tls", "buffer+tls", "cork+tls")
    with ThreadPoolExecutor(len(names)) as pool:
        relays = dict(zip(names, pool.map(relay, names), strict=True))
    urls = {"direct": stub.url, **{name: r.url for name, r in relays.items()}, "cacert": str(files.cert)}
    return {k: v for k, v in urls.items() if v is not None}


def probe(url: str, *args: str, runs: int = RUNS, timeout: float = 120) -> dict[str, Any]:
    argv = tokenpath_argv("probe", url, "--runs", str(runs), "--json", *args)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def streamed(run: dict[str, Any]) -> bool:
    """Most frames reached the page alone. Not all: on a loaded box the renderer, a process of its own, is now and
    then scheduled late and two or three chunks wait for it in the pipe from the network service (a cork's bursts
    hold every frame)."""
    return int(run["bursts"].get("1", 0)) >= FRAMES / 2


def ttfts(doc: dict[str, Any]) -> list[float]:
    return [run["ttft_ms"] for run in doc["runs"]]


def test_direct_browser_ttft_is_the_raw_probes_within_a_few_ms(paths: dict[str, str]) -> None:
    raw = probe(paths["direct"], runs=SIDE_BY_SIDE)
    browser = probe(paths["direct"], "--client", "chromium", runs=SIDE_BY_SIDE)
    assert browser["client"] == "chromium"
    assert "client" not in raw
    for run in browser["runs"]:
        assert run["status"] == 200
        assert run["frames"] == FRAMES
        assert streamed(run)
        assert run["next_hop_protocol"] == "http/1.1"  # cleartext: a browser never speaks h2c
        assert run["http_version"] == "1.1"
        assert run["sent_at"] == "requestStart"  # TTFT from the resource timing, as the raw probe's from its send
        assert run["ttft_ms"] >= TTFT_MS * 0.95  # the stub held it 300 ms: a browser cannot see it sooner
    assert [r["frames"] for r in raw["runs"]] == [r["frames"] for r in browser["runs"]]
    raw_ttft, browser_ttft = ttfts(raw), ttfts(browser)
    spread = (max(raw_ttft) - min(raw_ttft)) + (max(browser_ttft) - min(browser_ttft))
    difference = statistics.median(browser_ttft) - statistics.median(raw_ttft)
    assert abs(difference) <= FEW_MS + spread, (raw_ttft, browser_ttft)


def test_buffer_is_seen_by_the_browser_as_the_whole_stream_at_the_end(paths: dict[str, str]) -> None:
    """Over TLS, where the browser speaks h2 and the control holds each stream whole. (Over cleartext the byte-level
    `buffer` holds until its upstream closes, which the browser's keep-alive never asks for: nothing would arrive.)"""
    doc = probe(paths["buffer+tls"], "--client", "chromium", "--cacert", paths["cacert"])
    for run in doc["runs"]:
        assert run["next_hop_protocol"] == "h2"
        assert run["frames"] == FRAMES
        assert run["arrivals"] <= 2  # one write of ~1.5 KB: one chunk (a browser may cut it once)
        assert run["frames_per_read"] >= FRAMES / 2
        assert run["ttft_ms"] >= STREAM_MS * 0.95


@pytest.mark.parametrize("path", ["cork", "cork+tls"])
def test_cork_is_seen_by_the_browser_as_bursts(paths: dict[str, str], path: str) -> None:
    """Over HTTP/1.1 (cleartext) and over h2 (TLS): the coalesced writes reach the page as coalesced chunks."""
    options = ("--cacert", paths["cacert"]) if path.endswith("+tls") else ()
    browser = probe(paths[path], "--client", "chromium", *options)
    for run in browser["runs"]:
        assert run["next_hop_protocol"] == ("h2" if path.endswith("+tls") else "http/1.1")
        assert run["frames"] == FRAMES
        assert run["frames_per_read"] >= 3  # 200 ms of 50 ms frames per flush
        assert max(int(size) for size in run["bursts"]) >= 3
        assert run["ttft_ms"] >= TTFT_MS + 100  # the first token is held in the cork


def test_the_browsers_own_accept_encoding_gets_and_decodes_gzip(paths: dict[str, str]) -> None:
    with ThreadPoolExecutor(2) as pool:  # side by side: their figures are never compared, only their encodings
        raw_doc = pool.submit(probe, paths["gzip-hold"])
        browser = probe(paths["gzip-hold"], "--client", "chromium")
        raw = raw_doc.result()
    assert raw["content_encoding"] == "identity"  # the raw probe asked for none
    assert browser["content_encoding"] == "gzip"  # the browser asked, got it, decoded it
    assert "gzip" in (browser["accept_encoding"] or "")  # the header it sent, read back from the browser
    for run in browser["runs"]:
        assert run["frames"] == FRAMES
        assert run["arrivals"] <= 2  # held to the end, then decoded at once
        assert run["ttft_ms"] >= STREAM_MS * 0.95


def test_errors_are_the_probes_own_exit_codes(paths: dict[str, str]) -> None:
    """A refused connection is a connect error (3), a 404 an HTTP status error (6): the raw probe's codes."""

    def run(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(tokenpath_argv("probe", url, "--client", "chromium"), capture_output=True, text=True,
                              timeout=120)  # fmt: skip

    # the two side by side (nothing here is timed): each is mostly a Chromium starting up
    with socket.socket() as held, ThreadPoolExecutor(2) as pool:
        held.bind(("127.0.0.1", 0))  # bound, never listening: refused while held (a freed port could be anyone's)
        refused_run = pool.submit(run, f"http://127.0.0.1:{held.getsockname()[1]}")
        missing_run = pool.submit(run, paths["direct"] + "/nowhere")
        refused, missing = refused_run.result(), missing_run.result()
    assert refused.returncode == 3, refused.stderr
    assert "ERR_CONNECTION_REFUSED" in refused.stderr
    assert missing.returncode == 6, missing.stderr
    assert "HTTP 404" in missing.stderr


def test_tls_private_ca_is_refused_then_trusted_by_cacert_or_insecure(paths: dict[str, str]) -> None:
    """A private CA: refused as the raw probe refuses it (exit 5), streamed with --cacert (the leaf's key pinned
    after Python verified it against the CA) and with --insecure; h2 by ALPN, chosen by the browser."""
    url = paths["pass+tls"]
    untrusted = subprocess.run(tokenpath_argv("probe", url, "--client", "chromium"),
                               capture_output=True, text=True, timeout=120)  # fmt: skip
    assert untrusted.returncode == 5, untrusted.stderr
    assert "ERR_CERT" in untrusted.stderr
    for option in (("--cacert", paths["cacert"]), ("--insecure",)):
        doc = probe(url, "--client", "chromium", *option)
        seen = [(r["frames"], r["next_hop_protocol"], r["bursts"]) for r in doc["runs"]]
        assert [r["frames"] for r in doc["runs"]] == [FRAMES] * RUNS, seen
        assert [r["next_hop_protocol"] for r in doc["runs"]] == ["h2"] * RUNS, seen
        assert all(streamed(r) for r in doc["runs"]), seen  # a pass relay streams


def test_a_monitor_target_with_client_chromium_is_probed_by_the_browser(paths: dict[str, str]) -> None:
    """The monitor's cycle on the gzip-hold path: the chromium target's stream came gzipped (the browser's own
    Accept-Encoding), the raw target's did not; both measured a TTFT."""
    from tokenpath.monitor.config import from_dict
    from tokenpath.monitor.probing import Aborter, default_prober, probe_cycle

    url = paths["gzip-hold"]
    targets = from_dict({"target": [{"name": "browser", "url": url, "client": "chromium", "max_tokens": FRAMES},
                                    {"name": "raw", "url": url, "max_tokens": FRAMES}]}).targets  # fmt: skip
    prober = default_prober(Aborter())
    (browser,), (raw,) = (probe_cycle(target, prober, direct_first=False) for target in targets)
    assert browser.ok, browser.message
    assert raw.ok, raw.message
    assert browser.metrics is not None
    assert raw.metrics is not None
    assert browser.metrics.content_encoding == "gzip"
    assert raw.metrics.content_encoding == "identity"
    assert browser.metrics.ttft_ms is not None
    assert browser.metrics.ttft_ms >= STREAM_MS * 0.95  # held to the end


def hostile_server(answer: bytes, hold_s: float) -> tuple[socket.socket, threading.Event, threading.Thread]:
    """A peer on loopback that reads a request, writes `answer` (or nothing) and holds the connection `hold_s`
    before it closes; each connection on its own thread (a browser may open a spare one)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(hold_s + 5)
            with contextlib.suppress(OSError):
                if conn.recv(65536) and answer:
                    conn.sendall(answer)
                stop.wait(hold_s)

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                threading.Thread(target=handle, args=(listener.accept()[0],), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    return listener, stop, acceptor


@pytest.mark.parametrize(
    ("answer", "hold_s", "code", "said"),
    [
        (b"", 30.0, 8, "first-byte-timeout"),  # accepts, never answers: the page's own first-byte bound
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000\r\n\r\ndata: {}\n\n", 0.3,
         3, "ERR_CONTENT_LENGTH_MISMATCH"),  # dies mid-body
    ],
)  # fmt: skip
def test_a_peer_that_stalls_or_dies_ends_the_probe_with_its_error(
    answer: bytes, hold_s: float, code: int, said: str
) -> None:
    listener, stop, acceptor = hostile_server(answer, hold_s)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        done = subprocess.run(tokenpath_argv("probe", url, "--client", "chromium", "--first-byte-timeout", "2"),
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        stop.set()
        acceptor.join(5)
        listener.close()
    assert done.returncode == code, done.stderr
    assert said in done.stderr
