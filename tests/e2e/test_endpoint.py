"""A real endpoint behind the catalogue: every proxy that can reach an https upstream does, checks its certificate
against the endpoint's name, sends that name as SNI and Host, and passes the key; `tokenpath matrix` with
`upstream = "$VAR"` measures every path against it, certifies on the stub and says there was no stub audit."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.test_tls_upstream_e2e import CA
from tests.helpers import LoopbackHTTPS, QuietHandler
from tokenpath.errors import TokenpathError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.proxies import catalogue
from tokenpath.proxies.base import Endpoint, Site, UpstreamTLS, free_port, new_workdir, start
from tokenpath.proxies.relays import CONTROLS

pytestmark = pytest.mark.e2e

KEY_ENV = "TOKENPATH_TEST_ENDPOINT_KEY"
KEY = "sk-test-endpoint-7f3a"  # what the endpoint demands; must never reach a results file
WORDS = [f" word{i}" for i in range(6)]
# Proxies that cannot reach an https upstream, and say so: the list is explicit so a new one is a decision.
NO_UPSTREAM_TLS = {"lighttpd", "squid", "varnish"}
CONTROL_NAMES = {c.name for c in CONTROLS}
PROXIES = [
    name for name, p in catalogue().items()
    if p.runnable and not p.openai_only and name not in CONTROL_NAMES and name not in NO_UPSTREAM_TLS
]  # fmt: skip


def _events(gap_s: float) -> Iterator[bytes]:
    for word in WORDS:
        chunk = {"id": "cmpl-e", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}  # fmt: skip
        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        threading.Event().wait(gap_s)
    yield b"data: [DONE]\n\n"


class CheckingEndpoint:
    """An OpenAI-compatible https endpoint that answers only a request for its own name with its key: 421 for
    another Host, 401 without the key. It records the SNI and Host of each request."""

    def __init__(self, cert: str, key: str, gap_s: float = 0.02) -> None:
        self.seen: list[dict[str, Any]] = []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        sni: dict[int, str] = {}
        ctx.sni_callback = lambda sock, name, _ctx: sni.__setitem__(id(sock), name or "")
        outer = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                host, auth = self.headers.get("Host", ""), self.headers.get("Authorization", "")
                messages = body.get("messages") or [{}]
                outer.seen.append({
                    "host": host, "sni": sni.get(id(self.connection), ""), "auth": auth, "path": self.path,
                    "model": body.get("model"), "prompt": messages[-1].get("content"),
                    "max_tokens": body.get("max_tokens"), "x-declared": self.headers.get("X-Declared"),
                })  # fmt: skip
                status = 421 if host != outer.authority else (401 if auth != f"Bearer {KEY}" else 200)
                if status != 200:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in _events(gap_s):
                    self.wfile.write(b"%x\r\n%b\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self.server = LoopbackHTTPS(ctx, Handler)
        self.port = self.server.port
        self.authority = f"localhost:{self.port}"
        self.url = f"https://{self.authority}/v1"

    def close(self) -> None:
        self.server.close()


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CA:
    return CA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def endpoint(ca: CA) -> Iterator[CheckingEndpoint]:
    served = CheckingEndpoint(*ca.issue("endpoint", server=True))
    yield served
    served.close()


@pytest.fixture(scope="module")
def impostor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CheckingEndpoint]:
    """The same name, a certificate from a CA nobody trusts: a proxy that forwards to it did not verify."""
    other = CA(tmp_path_factory.mktemp("other-ca"), "someone else's CA")
    served = CheckingEndpoint(*other.issue("impostor", server=True))
    yield served
    served.close()


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _site(name: str, endpoint: CheckingEndpoint, ca: CA) -> Site:
    proxy = catalogue()[name]
    site = Site(Endpoint("127.0.0.1", free_port()), Endpoint("localhost", endpoint.port), new_workdir(name))
    site.upstream_tls = UpstreamTLS("localhost", Path(ca.ca_file))
    site.upstream_host, site.upstream_api_key_env = endpoint.authority, KEY_ENV
    site.variant = proxy.variant("stock")
    return site


def _probe(url: str) -> tuple[int | None, list[bytes]]:
    cfg = ProbeConfig(url=url, model="m", api_key=KEY, first_byte_timeout_s=10, idle_timeout_s=10,
                      total_timeout_s=20)  # fmt: skip
    try:
        trace = probe_stream(cfg)
    except TokenpathError:
        return None, []
    return run_metrics(trace).status, [f.frame.data or b"" for f in trace.frames]


@pytest.mark.parametrize("name", PROXIES)
def test_proxy_reaches_an_https_endpoint_by_its_name_with_the_key(
    name: str, endpoint: CheckingEndpoint, ca: CA
) -> None:
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    assert not proxy.upstream_tls_unsupported
    before = len(endpoint.seen)
    running = start(proxy, _site(name, endpoint, ca))
    try:
        status, frames = _probe(running.origin + "/v1")
    finally:
        running.stop()
    assert status == 200, (name, endpoint.seen[before:])
    assert len(frames) == len(WORDS) + 1
    assert frames[-1] == b"[DONE]"
    assert [json.loads(f)["choices"][0]["delta"]["content"] for f in frames[:-1]] == WORDS
    seen = endpoint.seen[-1]
    assert seen["sni"] == "localhost"  # the certificate name, not the address it connected to
    assert seen["host"] == endpoint.authority
    assert seen["auth"] == f"Bearer {KEY}"  # the gateway sends it from api_key_env; the others pass the client's


@pytest.mark.parametrize("name", PROXIES)
def test_proxy_refuses_an_endpoint_whose_certificate_it_cannot_verify(
    name: str, impostor: CheckingEndpoint, ca: CA
) -> None:
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    running = start(proxy, _site(name, impostor, ca))  # trusts `ca`, which did not sign the impostor's certificate
    try:
        status, frames = _probe(running.origin + "/v1")
    finally:
        running.stop()
    assert status != 200
    assert not frames
    assert not impostor.seen, f"{name} sent a request over a connection it should have refused"


@pytest.mark.parametrize("name", sorted(NO_UPSTREAM_TLS))
def test_proxies_that_cannot_reach_https_say_why(name: str) -> None:
    assert catalogue()[name].upstream_tls_unsupported


def test_matrix_against_an_endpoint_measures_every_path_in_the_same_rounds(
    endpoint: CheckingEndpoint, ca: CA, tmp_path: Path
) -> None:
    experiment = tmp_path / "endpoint.toml"
    experiment.write_text(f"""name = "real endpoint"
runs = 2
[upstream]
url = "$TOKENPATH_TEST_ENDPOINT_URL"
model = "m"
api_key_env = "{KEY_ENV}"
cacert = "{ca.ca_file}"
prompt = "say six words"
max_tokens = 7
headers = {{ X-Declared = "yes" }}
[[proxy]]
name = "nginx"
variants = ["stock", "proxy_buffering_off"]
[[proxy]]
name = "lighttpd"
""")
    out = tmp_path / "out"
    env = {**os.environ, "TOKENPATH_TEST_ENDPOINT_URL": endpoint.url, KEY_ENV: KEY}
    before = len(endpoint.seen)
    # --force: this lane runs four tests at a time; the certification must run (on the stub), passing it is the
    # timed lane's business (test_compose_services.py, test_matrix.py).
    done = subprocess.run([sys.executable, "-m", "tokenpath", "matrix", str(experiment), "--out", str(out), "--force"],
                          capture_output=True, text=True, env=env, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no stub audit" in done.stdout
    doc = json.loads((out / "results.json").read_text())
    names = {c["name"] for c in doc["certification"]["checks"]}
    assert {"buffer relay seen (one arrival)", "cork relay seen (bursts, late)"} <= names  # the controls, on the stub
    rows = {(r["proxy"], r["variant"]): r for r in doc["rows"]}
    assert set(rows) == {("direct", "stock"), ("nginx", "stock"), ("nginx", "proxy_buffering_off")}
    for row in rows.values():
        assert row["endpoint"] == f"endpoint https://{endpoint.authority}"
        assert row["runs"] >= 2  # 2, and more for a row a loaded round left undecided (runner.MAX_EXTRA_ROUNDS)
        assert row["excluded"] == 0
        assert row["fpr_median"] is not None
        assert row["ttft_ms_median"] is not None
        assert all(run["audited"] is False and run["audit"] is None for run in row["raw"])
    assert rows[("direct", "stock")]["added_ttft_ms_median"] == 0.0  # its own round's TTFT minus itself
    # The declared rule: each run's added TTFT is its TTFT minus the direct stream's TTFT in the same round.
    direct = rows[("direct", "stock")]["raw"]
    for key in (("nginx", "stock"), ("nginx", "proxy_buffering_off")):
        for i, run in enumerate(rows[key]["raw"]):
            expected = run["metrics"]["ttft_ms"] - direct[i]["metrics"]["ttft_ms"]
            assert run["path_added_ttft_ms"] == pytest.approx(expected), (key, i)
    # Every stream that reached the endpoint had its name and key (the certification ran on the stub).
    assert len(endpoint.seen) - before == 1 + 6  # the preflight stream, then 3 paths x 2 runs
    assert {s["host"] for s in endpoint.seen[before:]} == {endpoint.authority}
    # Every declared request option reached the endpoint, direct and through each path.
    declared = {"path": "/v1/chat/completions", "model": "m", "prompt": "say six words", "max_tokens": 7,
                "x-declared": "yes"}  # fmt: skip
    for seen in endpoint.seen[before:]:
        assert {k: seen[k] for k in declared} == declared
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    assert "TLS" in skipped["lighttpd [loopback]"]
    assert doc["experiment"]["upstream"]["declared"] == "$TOKENPATH_TEST_ENDPOINT_URL"
    table = (out / "table.md").read_text()
    assert "no stub audit" in table
    assert "vs direct" in table
    assert "no stub audit" in (out / "report.html").read_text()
    for name in ("results.json", "table.md", "report.html", "results.csv"):
        assert KEY not in (out / name).read_text(), name


def test_a_wrong_key_is_one_line_before_anything_runs(endpoint: CheckingEndpoint, ca: CA, tmp_path: Path) -> None:
    experiment = tmp_path / "endpoint.toml"
    experiment.write_text(f"""runs = 2
[upstream]
url = "{endpoint.url}"
model = "m"
api_key_env = "{KEY_ENV}"
cacert = "{ca.ca_file}"
[[proxy]]
name = "nginx"
""")
    env = {**os.environ, KEY_ENV: "sk-wrong"}
    before = len(endpoint.seen)
    done = subprocess.run([sys.executable, "-m", "tokenpath", "matrix", str(experiment), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert done.returncode == 6, done.stdout + done.stderr  # HTTPStatusError: the endpoint's 401
    assert "failed a direct stream before the run" in done.stdout
    assert "401" in done.stderr + done.stdout
    assert len(endpoint.seen) - before == 1  # one preflight stream, then nothing
    assert not (tmp_path / "o" / "results.json").exists()


GATEWAYS = [name for name, p in catalogue().items() if p.openai_only]


@pytest.mark.parametrize("name", GATEWAYS)
def test_an_ai_gateway_calls_the_https_endpoint_with_its_model_and_key(
    name: str, endpoint: CheckingEndpoint, ca: CA
) -> None:
    """A gateway re-serialises, so the content is compared, not the bytes; it is configured with the endpoint's
    API base, model and key variable, and trusts the declared CA."""
    proxy = catalogue()[name]
    if proxy.missing_reason():
        pytest.skip(f"{name}: {proxy.missing_reason()}")
    site = _site(name, endpoint, ca)
    site.upstream_path, site.upstream_model = "/v1", "m"
    before = len(endpoint.seen)
    running = start(proxy, site)
    try:
        failure = ""
        cfg = ProbeConfig(url=(running.url + "/chat/completions") if proxy.base_path else running.origin + "/v1",
                          model=proxy.request_model("m"), headers=proxy.request_headers(site),
                          api_key=proxy.api_key(site) or KEY, first_byte_timeout_s=20, idle_timeout_s=20,
                          total_timeout_s=40)  # fmt: skip
        try:
            trace = probe_stream(cfg)
        except TokenpathError as exc:
            failure = str(exc)
            trace = None
        log = running.log_tail(40)
    finally:
        running.stop()
    if name == "portkey":  # fails every stream on Node 20 and 22 (TypeError: immutable): its result, recorded
        assert trace is None
        assert "immutable" in log, (failure, log)
        return
    assert trace is not None, (failure, log)
    contents = [json.loads(f.frame.data or b"{}") for f in trace.frames if f.frame.data and f.frame.data != b"[DONE]"]
    text = "".join((c.get("choices") or [{}])[0].get("delta", {}).get("content") or "" for c in contents)
    assert text == "".join(WORDS)
    seen = endpoint.seen[before:]
    assert seen, "the gateway never reached the endpoint"
    assert all(s["sni"] == "localhost" and s["host"] == endpoint.authority for s in seen)
    assert all(s["auth"] == f"Bearer {KEY}" for s in seen)  # the endpoint's key, from its variable
    assert {(s["path"], s["model"]) for s in seen} == {("/v1/chat/completions", "m")}  # its API base and model
