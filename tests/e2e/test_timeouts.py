"""`tokenpath timeouts` against two real proxies at once, with their limits set to 1-2 s through the Site: nginx
(proxy_read_timeout: an idle limit before the first byte and mid-stream, no total; keep-alives reset it) and Envoy
(stream_idle_timeout and a route timeout: a total limit too). Both surveyed in one run, concurrently."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import stub_upstream
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, RunningProxy, Site, free_port, new_workdir, start
from tokenpath.proxies.timeouts import StreamTimeouts

pytestmark = pytest.mark.e2e

NGINX = StreamTimeouts(idle_s=1.0)
ENVOY = StreamTimeouts(idle_s=1.0, total_s=3.0)
BOUNDS = ["--min", "0.4", "--max", "5", "--resolution", "0.4"]


@pytest.fixture(scope="module")
def paths() -> Iterator[list[RunningProxy]]:
    running: list[RunningProxy] = []
    with stub_upstream() as stub:
        try:
            for name, limits in (("nginx", NGINX), ("envoy", ENVOY)):
                proxy = catalogue()[name]
                if proxy.missing_reason():
                    pytest.skip(f"{name}: {proxy.missing_reason()}")
                site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir(name), proxy.variant("stock"))
                site.timeouts = limits
                running.append(start(proxy, site))
            yield running
        finally:
            for path in running:
                path.stop()


def survey(urls: list[str], html: Path) -> tuple[dict[str, dict[str, object]], str, float]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tokenpath", "timeouts", *urls, *BOUNDS, "--json", "--html", str(html)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    return {p["target"]: p for p in doc["paths"]}, done.stderr, time.monotonic() - t0


def limit(path: dict[str, object], measure: str) -> dict[str, object]:
    found = [m for m in path["limits"] if m["measure"] == measure]  # type: ignore[attr-defined]
    assert len(found) == 1
    return found[0]  # type: ignore[no-any-return]


def between(found: dict[str, object], low: float, high: float) -> None:
    """The limit is bracketed, survived < cut, both inside [low, high]."""
    survived, cut = found["longest_survived_s"], found["shortest_cut_s"]
    assert isinstance(survived, float | int)
    assert isinstance(cut, float | int)
    assert low <= survived < cut <= high, found


def test_the_survey_finds_each_paths_limits_at_once(paths: list[RunningProxy], tmp_path: Path) -> None:
    nginx, envoy = paths
    found, progress, took_s = survey([f"nginx={nginx.url}", envoy.url], tmp_path / "timeouts.html")
    n, e = found[nginx.url], found[envoy.url]
    # A 1 s idle limit: what survived is below it by the resolution at most, what was cut above it (wide margins).
    between(limit(n, "first_byte"), 0.4, 2.5)
    between(limit(n, "mid_stream"), 0.4, 2.5)
    assert limit(n, "total")["shortest_cut_s"] is None  # nginx has no total limit: 5 s came through
    assert n["keepalives_reset_idle"] is True  # any byte, a keep-alive comment too, restarts proxy_read_timeout
    between(limit(e, "mid_stream"), 0.4, 2.5)
    between(limit(e, "total"), 1.5, 4.5)
    cut = limit(e, "total")["cut"]
    assert isinstance(cut, dict)
    assert cut["kind"] in ("cut_error", "cut_silent")
    # The cut named, with the catalogue's line that lifts it (the path was named nginx), and without a name.
    assert any("proxy_read_timeout 3600s;" in cut["fix"] for cut in n["cuts"])  # type: ignore[attr-defined]
    assert any(cut["limit"] == "total" for cut in e["cuts"])  # type: ignore[attr-defined]
    assert "proxy_read_timeout 3600s;" in (tmp_path / "timeouts.html").read_text()  # the report's section
    assert "complete" in progress  # progress on stderr, one line a try
    # Concurrent: both paths, three measures and the keep-alive try in one wait, not their sum (each path alone
    # tries ~10 streams of 1-5 s); a loose bound a loaded machine keeps.
    assert took_s < 90


def test_the_survey_asks_in_the_format_and_http_version_given() -> None:
    """`--api anthropic --http2` straight at a stub (no limit to find): every try came through complete, in the
    Anthropic shape over h2c (a try read as OpenAI's, or over HTTP/1.1, would not: tests/diagnose/
    test_limitprobe_client.py); Anthropic has a keep-alive, but with no idle limit there is nothing to try it on."""
    with stub_upstream() as stub:
        asked = ["--api", "anthropic", "--http2", "--min", "0.3", "--max", "1.2", "--resolution", "0.4", "--json"]
        done = subprocess.run(
            [sys.executable, "-m", "tokenpath", "timeouts", f"http://{stub.hostport}", *asked],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["api"], doc["http_version"]) == ("anthropic", "2")
    (path,) = doc["paths"]
    assert all(found["shortest_cut_s"] is None for found in path["limits"]), path
    assert "complete" in done.stderr


def test_over_http2_the_gateways_idle_limit_is_found() -> None:
    """`--http2` through a path that speaks h2c, the gateway with a 1 s idle limit: its HTTP/2 side cuts a silence
    as its HTTP/1.1 side does, bracketed with wide margins; no total limit up to --max."""
    proxy = catalogue()["gateway"]
    with stub_upstream() as stub:
        site = Site(Endpoint("127.0.0.1", free_port()), stub, new_workdir("gateway"), proxy.variant("stock"))
        site.timeouts = StreamTimeouts(idle_s=1.0)
        running = start(proxy, site)
        try:
            asked = ["--http2", "--min", "0.4", "--max", "3", "--resolution", "0.4", "--no-keepalives", "--json"]
            done = subprocess.run(
                [sys.executable, "-m", "tokenpath", "timeouts", f"gateway={running.url}", *asked],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        finally:
            running.stop()
    assert done.returncode == 0, done.stderr
    (path,) = json.loads(done.stdout)["paths"]
    between(limit(path, "mid_stream"), 0.4, 2.5)
    assert limit(path, "total")["shortest_cut_s"] is None
    assert "complete (end_stream)" in done.stderr  # each whole stream ended by HTTP/2's END_STREAM: h2c it was
