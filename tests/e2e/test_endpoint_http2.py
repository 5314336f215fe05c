"""`client_http = ["2"]` against a real `[upstream]`, all real processes: the "endpoint" is the stub behind Caddy 2.11
over TLS (h2 by ALPN). The matrix measures it directly and through Caddy 2.11 in front of it over HTTP/2 (rows and
runs say "2"); an https endpoint that speaks HTTP/1.1 only (stock nginx 1.22 over TLS) fails each HTTP/2 run with
the HTTP/2 reason, never a silent HTTP/1.1 stream."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Start
from tests.e2e.test_probe_http2 import proxy_site
from tokenpath.serve.procs import tokenpath_argv
from tokenpath.serve.tlscert import self_signed

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stub_url(module_service: Start) -> str:
    stub = module_service("stub", "--port", "0", name="stub")
    assert stub.url is not None
    return stub.url


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return self_signed(tmp_path_factory.mktemp("endpoint-h2-tls"), ["127.0.0.1"])


@pytest.fixture
def endpoint(request: pytest.FixtureRequest, stub_url: str, tls_files: Any) -> Iterator[str]:
    """An https endpoint: the stub behind `request.param` (a catalogue proxy, stock, terminating TLS)."""
    running = proxy_site(request.param, "stock", stub_url, tls_files)
    try:
        yield running.url
    finally:
        running.stop()


def run_matrix(tmp_path: Path, endpoint: str, cacert: str, proxies: str = "", exit_code: int = 0) -> dict[str, Any]:
    experiment = tmp_path / "endpoint-h2.toml"
    experiment.write_text(f"""name = "endpoint over HTTP/2"
runs = 2
[upstream]
url = "{endpoint.rstrip("/")}/v1"
model = "m"
cacert = "{cacert}"
max_tokens = 6
[conditions]
tls = [true]
client_http = ["2"]
{proxies}""")
    out = tmp_path / "out"
    # --force: the certification runs (on the stub, over HTTP/1.1 and 2); passing it is the timed lane's business
    argv = tokenpath_argv("matrix", str(experiment), "--out", str(out), "--force")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == exit_code, done.stdout + done.stderr
    doc: dict[str, Any] = json.loads((out / "results.json").read_text())
    return doc


@pytest.mark.parametrize("endpoint", ["caddy-2.11"], indirect=True)
def test_an_h2_endpoint_is_measured_over_http2_directly_and_through_a_proxy(
    endpoint: str, tls_files: Any, tmp_path: Path
) -> None:
    doc = run_matrix(tmp_path, endpoint, str(tls_files.cert), '[[proxy]]\nname = "caddy-2.11"\n')
    assert {c["client_http"] for c in doc["experiment"]["conditions"]} == {"2"}
    rows = {(r["proxy"], r["http_version"]): r for r in doc["rows"]}
    assert set(rows) == {("direct", "2"), ("caddy-2.11", "2")}, doc["skipped"]
    for row in rows.values():
        assert [run["error"] for run in row["raw"]] == [None, None]
        assert {run["http_version"] for run in row["raw"]} == {"2"}  # as the probe spoke it
        assert all(run["metrics"]["h2"]["window"] == "default" for run in row["raw"])
        assert row["ttft_ms_median"] is not None


@pytest.mark.parametrize("endpoint", ["nginx"], indirect=True)
def test_an_endpoint_that_will_not_speak_h2_fails_its_http2_runs(endpoint: str, tls_files: Any, tmp_path: Path) -> None:
    # The preflight (HTTP/1.1) reaches it: it is up. No direct run kept, so nothing can be judged: exit 20 once
    # everything is written (cli/common.end_matrix).
    doc = run_matrix(tmp_path, endpoint, str(tls_files.cert), exit_code=20)
    (row,) = doc["rows"]
    assert (row["proxy"], row["http_version"]) == ("direct", "2")
    errors = [run["error"] for run in row["raw"]]
    assert len(errors) == 2
    assert all(e and "HTTP/2" in e and "ALPN" in e for e in errors), errors
    assert row["ttft_ms_median"] is None  # nothing was measured over HTTP/1.1 in its place
