"""`tokenpath diagnose` against every control and the catalogue's known rows, all real processes: one stub, the
relays in front of it (pass, buffer, cork by bytes, cork by time, gzip-hold, gzip-flush), stock HAProxy and stock
nginx. Each path is diagnosed by the CLI as a user would (`--json`), three at a time: each diagnosis is a few short
paced streams (~4 s), timed against its own schedule, and no load for the stub or the relays."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.proxies import lookup
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.serve.procs import tokenpath_argv

CORK_BYTES = 300  # 5 frames of 60 B (with the chunk framing, 4 frames stay under it)
RELAYS = {
    "pass": ("--mode", "pass"),
    "buffer": ("--mode", "buffer"),
    "cork_bytes": ("--mode", "cork", "--cork-bytes", str(CORK_BYTES), "--cork-ms", "10000"),
    "cork_time": ("--mode", "cork", "--cork-ms", "200"),  # and 1,448 bytes: 60 B frames never reach it
    "gzip_hold": ("--mode", "gzip-hold"),
    "gzip_flush": ("--mode", "gzip-flush"),
}
PROXIES = ("haproxy", "nginx")
EXTRA = {"haproxy": ("--proxy", "haproxy")}  # HAProxy writes no Server or Via header: the user names it
PARALLEL = 3  # paced streams wait far more than they compute; three at a time stay on schedule here


def installed(name: str) -> bool:
    return lookup(name).binary() is not None


@pytest.fixture(scope="module")
def paths(module_service: Start) -> Iterator[dict[str, str]]:
    stub = module_service("stub", "--port", "0", "--format", "plain", name="stub")
    host, port = netloc(stub.url).rsplit(":", 1)

    def relay(name: str) -> tuple[str, str | None]:
        return name, module_service("relay", "--upstream", netloc(stub.url), *RELAYS[name], name=name).url

    running: list[RunningProxy] = []
    with ThreadPoolExecutor(3) as pool:  # start-ups side by side: one wait, not eight
        urls = {name: url for name, url in pool.map(relay, RELAYS) if url is not None}
    for name in PROXIES:
        if installed(name):
            site = Site(Endpoint("127.0.0.1", free_port()), Endpoint(host, int(port)), new_workdir(name))
            running.append(start(lookup(name), site))
            urls[name] = running[-1].url
    try:
        yield {"stub": stub.url or "", **urls}
    finally:
        for proxy in running:
            proxy.stop()


@pytest.fixture(scope="module")
def diagnosed(paths: dict[str, str]) -> dict[str, tuple[int, dict[str, Any], str]]:
    """Every path but the stub itself, diagnosed by the CLI: (exit code, --json document, stderr)."""

    jobs = {name: (url, *EXTRA.get(name, ())) for name, url in paths.items() if name != "stub"}
    jobs["pass_stub_url"] = (paths["pass"], "--stub-url", paths["stub"])  # named, rather than found behind the path
    # probe's clients: another API format's own frames, and HTTP/2 (h2c) to the relay
    jobs["cork_time_anthropic"] = (paths["cork_time"], "--api", "anthropic")
    jobs["cork_time_h2"] = (paths["cork_time"], "--http2")

    def run(name: str) -> tuple[str, tuple[int, dict[str, Any], str]]:
        argv = tokenpath_argv("diagnose", *jobs[name], "--json")
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        doc: dict[str, Any] = json.loads(out.stdout) if out.stdout.strip() else {}
        return name, (out.returncode, doc, out.stderr)

    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(pool.map(run, jobs))


def verdict(diagnosed: dict[str, tuple[int, dict[str, Any], str]], name: str, code: int) -> dict[str, Any]:
    returncode, doc, stderr = diagnosed[name]
    assert returncode == code, (stderr, json.dumps(doc, indent=1))
    assert doc["paced"] is True  # every path forwards the stub's health: the series paced it
    found: dict[str, Any] = doc["verdict"]
    return found


def test_pass_streams(diagnosed: dict[str, tuple[int, dict[str, Any], str]]) -> None:
    v = verdict(diagnosed, "pass", 0)
    assert v["cause"] == "streams"
    assert v["held"] is False


def test_a_named_stub_url_paces_the_series(diagnosed: dict[str, tuple[int, dict[str, Any], str]]) -> None:
    v = verdict(diagnosed, "pass_stub_url", 0)
    assert v["cause"] == "streams"
    runs = diagnosed["pass_stub_url"][1]["runs"]
    assert [(r["frame_bytes"], r["interval_ms"]) for r in runs][:4] == [(60, 50), (60, 120), (1200, 50), (60, 50)]


def test_buffer_is_the_whole_response(diagnosed: dict[str, tuple[int, dict[str, Any], str]]) -> None:
    v = verdict(diagnosed, "buffer", 16)
    assert v["cause"] == "whole_response"
    assert v["at_least"] is False  # grown to the series' bound: the whole response, not "at least"
    # One line on stderr says why the exit code, and it is not an error.
    assert diagnosed["buffer"][2].startswith("tokenpath diagnose: holds the whole response")
    assert diagnosed["buffer"][2].count("\n") == 1


def test_cork_by_bytes_is_byte_quantized_with_its_size(diagnosed: dict[str, tuple[int, dict[str, Any], str]]) -> None:
    v = verdict(diagnosed, "cork_bytes", 16)
    assert v["cause"] == "byte_quantized"
    assert 0.7 * CORK_BYTES <= v["size_bytes"] <= 1.2 * CORK_BYTES


def test_cork_by_time_is_time_quantized_with_its_period(diagnosed: dict[str, tuple[int, dict[str, Any], str]]) -> None:
    v = verdict(diagnosed, "cork_time", 16)
    assert v["cause"] == "time_quantized"
    assert 170 <= v["period_ms"] <= 260
    assert "200-250 ms" in v["timer"]


def test_gzip_hold_is_compression_without_flush(diagnosed: dict[str, tuple[int, dict[str, Any], str]]) -> None:
    v = verdict(diagnosed, "gzip_hold", 16)
    assert v["cause"] == "compression_hold"
    assert v["encoding"] == "gzip"


def test_gzip_flush_streams_compressed(diagnosed: dict[str, tuple[int, dict[str, Any], str]]) -> None:
    v = verdict(diagnosed, "gzip_flush", 0)
    assert v["cause"] == "streams"
    assert any("compressed (gzip) and flushed" in n for n in v["notes"])


@pytest.mark.skipif(not installed("haproxy"), reason="haproxy is not installed (scripts/install-proxies, as root)")
def test_stock_haproxy_is_a_200_ms_timer_and_gets_http_no_delay(
    diagnosed: dict[str, tuple[int, dict[str, Any], str]],
) -> None:
    v = verdict(diagnosed, "haproxy", 16)
    assert v["cause"] == "time_quantized"
    assert 150 <= v["period_ms"] <= 260
    doc = diagnosed["haproxy"][1]
    assert doc["proxy"] == {"name": "haproxy", "by": "--proxy"}
    assert doc["fix"]["line"] == "option http-no-delay"
    assert doc["fix"]["source"].startswith("https://docs.haproxy.org/")


@pytest.mark.skipif(not installed("nginx"), reason="nginx is not installed (scripts/install-proxies, as root)")
def test_stock_nginx_is_its_buffer_size_and_gets_proxy_buffering_off(
    diagnosed: dict[str, tuple[int, dict[str, Any], str]],
) -> None:
    """Short streams all came at their end; the grown series shows nginx's ~4 KB buffers (issue 35)."""
    v = verdict(diagnosed, "nginx", 16)
    assert v["cause"] == "byte_quantized", v
    doc = diagnosed["nginx"][1]
    assert doc["proxy"]["name"] == "nginx"
    assert doc["proxy"]["by"].startswith("Server: nginx")  # recognised from its own header
    assert doc["fix"]["line"] == "proxy_buffering off;"  # never proxy_http_version 1.1, which only holds the head


def test_a_stub_url_that_is_not_a_stub_is_refused_first(paths: dict[str, str]) -> None:
    """--stub-url is checked before anything is measured: a URL that is not a stub is exit 2, naming the flag."""
    not_a_stub = f"http://127.0.0.1:{free_port()}"
    argv = tokenpath_argv("diagnose", paths["pass"], "--stub-url", not_a_stub)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    assert f"--stub-url {not_a_stub} does not answer as a tokenpath stub" in out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("job", ["cork_time_anthropic", "cork_time_h2"])
def test_the_same_clients_as_probe_see_the_same_timer(
    diagnosed: dict[str, tuple[int, dict[str, Any], str]], job: str
) -> None:
    """Issue 35: --api and --http2 (Anthropic-only routes, h2-only ingresses) are diagnosed as probe measures them."""
    v = verdict(diagnosed, job, 16)
    assert v["cause"] == "time_quantized", v
    assert 170 <= v["period_ms"] <= 260
