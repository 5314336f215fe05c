"""`tokenpath diagnose` says when a verdict rests on the origin (issue 37 §3): the stub answering as
llama-cpp-python's server does (`--preset`: close-delimited to HTTP/1.0, X-Accel-Buffering: no, Cache-Control:
no-store) behind stock nginx, which streams it only because of the header, and behind nginx ignoring the header,
which holds it. No real model server: the stub's preset is the origin."""

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

pytestmark = pytest.mark.e2e

VARIANTS = ("stock", "ignore_x_accel")


@pytest.fixture(scope="module")
def diagnosed(module_service: Start) -> Iterator[dict[str, tuple[int, dict[str, Any], str]]]:
    nginx = lookup("nginx")
    if nginx.missing_reason():
        pytest.skip(f"nginx: {nginx.missing_reason()}")
    stub = module_service("stub", "--port", "0", "--format", "plain", "--preset", "llama-cpp-python", name="stub")
    host, port = netloc(stub.url).rsplit(":", 1)
    running: list[RunningProxy] = []
    for variant in VARIANTS:
        listen, upstream = Endpoint("127.0.0.1", free_port()), Endpoint(host, int(port))
        running.append(start(nginx, Site(listen, upstream, new_workdir("nginx"), nginx.variant(variant))))

    def run(proxy: RunningProxy) -> tuple[int, dict[str, Any], str]:
        out = subprocess.run(
            tokenpath_argv("diagnose", proxy.url, "--json"), capture_output=True, text=True, timeout=90
        )
        return out.returncode, json.loads(out.stdout) if out.stdout.strip() else {}, out.stderr

    try:
        with ThreadPoolExecutor(2) as pool:
            yield dict(zip(VARIANTS, pool.map(run, running), strict=True))
    finally:
        for proxy in running:
            proxy.stop()


def test_stock_nginx_streams_only_because_of_the_header(diagnosed: dict[str, tuple[int, dict[str, Any], str]]) -> None:
    code, doc, stderr = diagnosed["stock"]
    assert code == 0, (stderr, doc)
    origin = doc["origin"]
    assert origin["behaviour"] == {
        "http10_framing": "close",
        "headers": {"X-Accel-Buffering": "no", "Cache-Control": "no-store"},
    }
    assert origin["streams_because"] is True, origin
    assert origin["credited"] == ["X-Accel-Buffering: no"]  # the header alone streamed it; no-store did nothing
    assert origin["plain_streams"] is False
    assert origin["fix"] == "add proxy_buffering off;"
    assert origin["words"] == (
        "this path streams only because the origin sends X-Accel-Buffering: no; an origin that does not will be "
        "held: add proxy_buffering off;"
    )


def test_nginx_ignoring_the_header_holds_it_in_spite_of_the_origin(
    diagnosed: dict[str, tuple[int, dict[str, Any], str]],
) -> None:
    code, doc, stderr = diagnosed["ignore_x_accel"]
    assert code == 16, (stderr, doc)
    origin = doc["origin"]
    assert origin["streams_because"] is False, origin
    assert origin["credited"] == ["Cache-Control: no-store", "X-Accel-Buffering: no"]
    assert origin["words"].startswith("this path holds the stream although the origin sends")
