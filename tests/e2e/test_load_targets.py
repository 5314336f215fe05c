"""`tokenpath load --target` against proxies that check credentials, and the inputs it refuses. Functional, not
timed: these run beside other tests (Makefile's parallel lane)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Start, netloc
from tokenpath.proxies import lookup
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv


@pytest.fixture(scope="module")
def stub_url(module_service: Start) -> str:
    """One stub for the tests that load a --target against it: a load reads back only its own streams' logs (by
    their ids), so what an earlier test sent it changes nothing a later one asserts."""
    url = module_service("stub", "--port", "0", "--tokens", "10", "--ttft-ms", "20", name="stub").url
    assert url is not None
    return url


def test_an_external_jwt_gateway_is_loaded_with_a_fresh_token_per_stream(tmp_path: Path, stub_url: str) -> None:
    secret = "s" * 64  # the gateway allows HS256/384/512 by default: HS512 needs 64 bytes (RFC 7518 3.2)
    env = {"GW_SECRET": secret}
    gateway_argv = tokenpath_argv(
        "gateway", "--listen", "127.0.0.1:0", "--upstream", stub_url, "--jwt-secret-env", "GW_SECRET"
    )
    gateway = ServiceProcess(gateway_argv, "gateway", env=env)
    gateway.start()
    try:
        common = (
            *("load", "--target", gateway.url or "", "--stub-url", stub_url),
            *("--concurrency", "4", "--warmup", "0.3", "--duration", "1.5", "--runs", "2"),
            *("--tokens", "10", "--ttft-ms", "20"),
        )
        ok = subprocess.run(
            tokenpath_argv(*common, "--jwt-secret-env", "GW_SECRET", "--jwt-claims", '{"sub": "load"}',
                           "--header", "X-Load: 1", "--out", str(tmp_path / "ok")),
            capture_output=True, text=True, timeout=300, env={**os.environ, **env},
        )  # fmt: skip
        assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
        rows = {r["target"]: r for r in json.loads((tmp_path / "ok" / "results.json").read_text())["levels"]}
        assert rows["target"]["errors"] == 0, rows["target"]["error_samples"]
        assert rows["target"]["streams"] > 0
        refused = subprocess.run(tokenpath_argv(*common, "--out", str(tmp_path / "no")), capture_output=True,
                                 text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    finally:
        gateway.stop()
    assert refused.returncode == 0, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert "failed the same way (HTTP 401): level stopped early" in refused.stdout
    row = {r["target"]: r for r in json.loads((tmp_path / "no" / "results.json").read_text())["levels"]}["target"]
    assert row["streams"] < 2000  # stopped, not 10,000 401s
    assert any(w["kind"] == "stopped_early" for w in row["warnings"])


def test_a_stub_on_another_host_is_refused_without_a_clock_estimate() -> None:
    out = subprocess.run(tokenpath_argv("load", "--target", "http://127.0.0.1:9", "--stub-url", "http://192.0.2.10:8000"),
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert "is not on this host" in out.stderr
    out = subprocess.run(tokenpath_argv("load", "--proxy", "pass", "--api-key-env", "X"), capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert "are for an external --target" in out.stderr


def _gateway_missing(name: str) -> str | None:
    from tokenpath.proxies import lookup

    return lookup(name).missing_reason()


@pytest.mark.skipif(_gateway_missing("tensorzero") is not None, reason=str(_gateway_missing("tensorzero")))
def test_tensorzero_streams_are_joined_through_the_prompt_and_the_portkey_failure_is_the_result(tmp_path: Path) -> None:
    proxies = ["--proxy", "tensorzero"]
    if _gateway_missing("portkey") is None:
        proxies += ["--proxy", "portkey"]
    out = subprocess.run(
        tokenpath_argv("load", *proxies, "--concurrency", "3", "--warmup", "1", "--duration", "2", "--runs", "1",
                       "--tokens", "10", "--ttft-ms", "20", "--out", str(tmp_path)),
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = {r["target"]: r for r in doc["levels"]}
    tz = rows["tensorzero"]
    assert tz["streams"] > 0
    assert tz["errors"] == 0, tz["error_samples"]
    assert tz["unjoined"] == 0  # it drops the header, `user` and the chunk ids: the prompt carried the stream id
    assert tz["reserialized_streams"] == tz["streams"]  # its own chunk ids: content intact, bytes rewritten
    assert tz["frames_lost"] == 0
    assert doc["targets"]["tensorzero"]["version"][:4].isdigit()
    if "portkey" in rows:  # on Node 22 as on 20, every stream fails inside it: the result, recorded, not patched
        assert any(w["kind"] == "stopped_early" and "HTTP 500" in w["message"] for w in rows["portkey"]["warnings"])


@pytest.mark.skipif(lookup("litellm").missing_reason() is not None, reason=str(lookup("litellm").missing_reason()))
def test_litellm_streams_are_joined_although_it_drops_the_stream_id(tmp_path: Path) -> None:
    out = subprocess.run(
        tokenpath_argv(
            "load", "--proxy", "litellm", "--concurrency", "3", "--warmup", "3", "--duration", "3", "--runs", "1",
            "--tokens", "20", "--interval-ms", "14", "--out", str(tmp_path),
        ),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    row = {r["target"]: r for r in json.loads((tmp_path / "results.json").read_text())["levels"]}["litellm"]
    assert row["streams"] > 0
    assert row["unjoined"] == 0  # joined by the chunks' completion id
    assert row["frames_lost"] == 0
    assert row["reserialized_streams"] == row["streams"]  # content intact, bytes rewritten
    assert row["added_ttft_ms"]["p50"] is not None


COMMAND_TARGET_SECRET = "c" * 64  # enough for HS512, which the gateway allows by default


def command_targets_run(out_dir: Path) -> dict[str, Any]:
    """One load run through three proxies, read by the test below: the gateway with a JWT, a command target that
    needs nothing, and a command target (a gateway checking a JWT) that gets its key and a header from --custom.
    One test reads it all: a module fixture shared by two tests ran once per xdist worker that took one (23 s each)."""
    import jwt

    token = jwt.encode({"sub": "load", "exp": 2_000_000_000}, COMMAND_TARGET_SECRET, algorithm="HS256")
    relay = f"myrelay={' '.join(tokenpath_argv('relay'))} --listen {{listen}} --upstream {{upstream}} --mode pass"
    gateway = " ".join(tokenpath_argv("gateway"))
    gw = f"gw={gateway} --listen {{listen}} --upstream http://{{upstream}} --jwt-secret-env GW_SECRET"
    keyed = ("--custom", "gw.api_key_env=GW_TOKEN", "--custom", "gw.header=X-Load: 1")
    out = subprocess.run(
        tokenpath_argv(
            *("load", "--proxy", "gateway:jwt", "--proxy", relay, "--proxy", gw, *keyed),
            *("--concurrency", "4", "--warmup", "0.5", "--duration", "2", "--runs", "2"),
            *("--tokens", "10", "--ttft-ms", "20", "--out", str(out_dir)),
        ),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GW_SECRET": COMMAND_TARGET_SECRET, "GW_TOKEN": token, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc: dict[str, Any] = json.loads((out_dir / "results.json").read_text())
    return doc


def test_load_measures_the_gateway_with_a_jwt_and_command_targets_with_the_key_they_need(tmp_path: Path) -> None:
    doc = command_targets_run(tmp_path)
    rows = {r["target"]: r for r in doc["levels"]}
    assert set(rows) == {"direct", "gateway:jwt", "myrelay", "gw"}
    assert "[auth]" in doc["targets"]["gateway:jwt"]["config"]
    assert "--mode pass" in doc["targets"]["myrelay"]["config"]
    for name in ("direct", "gateway:jwt", "myrelay"):
        row = rows[name]
        assert row["streams"] > 0
        assert row["errors"] == 0, row["error_samples"]
        assert row["frames_lost"] == 0
        assert row["unjoined"] == 0
        assert len(row["runs_added_ttft_ms"]) == 2  # per-run figures: the spread --compare needs
    row = rows["gw"]  # the command target that needs a key and a header
    assert row["errors"] == 0, row["error_samples"]  # a stream without the key was refused: HTTP 401
    assert row["streams"] > 0
    command = " ".join(tokenpath_argv("gateway"))
    gw = f"gw={command} --listen {{listen}} --upstream http://{{upstream}}"
    bad = subprocess.run(
        tokenpath_argv("load", "--proxy", gw, "--custom", "other.model=m"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert bad.returncode == 2
    assert "no --proxy other=COMMAND target" in bad.stderr


SHORT = ["--concurrency", "3", "--warmup", "0.3", "--duration", "1", "--runs", "1"]


def _load(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tokenpath_argv("load", *args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})  # fmt: skip


FAIL_ON = "added_ttft_p99>0.001ms,frames_lost>0"
GATE_BREACHED = 14  # the run completed and a --fail-on rule did not hold


@pytest.fixture(scope="module")
def stub_run(tmp_path_factory: pytest.TempPathFactory, stub_url: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One short load of the stub through nothing (--target is the stub), gated by --fail-on and printed with --json:
    read by the two tests below, one about what load read from the stub, one about the gate and the output."""
    out_dir = tmp_path_factory.mktemp("stub-run")
    # no --tokens: load's default is 128, and what it measures must be the stub's 10
    out = _load(
        "--target", stub_url, "--stub-url", stub_url, *SHORT, "--json", "--fail-on", FAIL_ON, "--out", str(out_dir)
    )
    return out, out_dir


def test_load_reads_the_pacing_of_the_stub_at_stub_url_and_refuses_a_flag_that_disagrees(
    tmp_path: Path, stub_url: str, stub_run: tuple[subprocess.CompletedProcess[str], Path]
) -> None:
    url = stub_url
    out, out_dir = stub_run
    # completed: only the gate set the code (its rules are the next test's subject)
    assert out.returncode == GATE_BREACHED, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((out_dir / "results.json").read_text())
    for row in doc["levels"]:
        assert row["streams"] > 0
        assert row["frames_lost"] == 0, row  # 116 lost a stream when load expected its own 128
    assert doc["config"]["tokens"] == 10
    assert doc["config"]["ttft_ms"] == 20
    refused = _load("--target", url, "--stub-url", url, *SHORT, "--tokens", "60", "--out", str(tmp_path / "no"))
    assert refused.returncode == 2
    assert "--tokens 60 but the stub at" in refused.stderr
    assert "was started with --tokens 10" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_streams_a_pool_sends_to_another_stub_are_named_as_such(tmp_path: Path, service: Start, stub_url: str) -> None:
    other = service("stub", "--port", "0", "--tokens", "10", "--ttft-ms", "20", name="other")
    upstreams = ("--upstream", stub_url, "--upstream", other.url or "")
    pool = service("gateway", "--listen", "127.0.0.1:0", *upstreams, "--no-auth", name="pool")
    out = _load("--target", pool.url or "", "--stub-url", stub_url, *SHORT, "--out", str(tmp_path))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    row = {r["target"]: r for r in json.loads((tmp_path / "results.json").read_text())["levels"]}["target"]
    kinds = {w["kind"]: w for w in row["warnings"]}
    assert row["unjoined"] > 0  # round robin: about half went to the other stub
    assert "served by a stub that is not --stub-url" in kinds["other_stub"]["message"]
    assert "unjoined" not in kinds  # not "the path drops the X-Tokenpath-Stream header"


def test_an_https_target_is_loaded_with_cacert_or_insecure(tmp_path: Path, service: Start, stub_url: str) -> None:
    from tokenpath.serve.tlscert import self_signed

    files = self_signed(tmp_path / "tls", ["127.0.0.1"])
    tls_files = ("--tls-cert", str(files.cert), "--tls-key", str(files.key))
    tls = service("relay", "--upstream", netloc(stub_url), "--mode", "pass", *tls_files, name="tls")
    assert (tls.url or "").startswith("https://")
    for flags in (["--cacert", str(files.cert)], ["--insecure"]):
        out = _load(
            "--target", tls.url or "", "--stub-url", stub_url, *SHORT, *flags, "--out", str(tmp_path / flags[0])
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        row = {r["target"]: r for r in json.loads((tmp_path / flags[0] / "results.json").read_text())["levels"]}
        assert row["target"]["errors"] == 0, row["target"]["error_samples"]
        assert row["target"]["streams"] > 0
        assert row["target"]["frames_lost"] == 0


def test_fail_on_gates_a_load_run_and_json_prints_the_results_document(
    stub_url: str, stub_run: tuple[subprocess.CompletedProcess[str], Path]
) -> None:
    url = stub_url
    out, out_dir = stub_run
    assert out.returncode == GATE_BREACHED, out.stdout[-3000:] + out.stderr[-3000:]
    assert "added_ttft_p99>0.001ms breached on target @ 3" in out.stderr
    assert "frames_lost" not in out.stderr.partition("error:")[2]  # nothing lost: that rule holds
    doc = json.loads(out.stdout)  # stdout is the document alone; the table and progress went to stderr
    assert doc == json.loads((out_dir / "results.json").read_text())
    assert {r["target"] for r in doc["levels"]} == {"direct", "target"}
    # off a terminal, one line per level/run/target with the time so far and the time expected
    assert "expected about" in out.stderr
    steps = [line for line in out.stderr.splitlines() if line.startswith(("[1/2]", "[2/2]"))]
    assert len(steps) == 2, out.stderr
    assert "3 streams, run 1, direct" in steps[0]
    assert "elapsed" in steps[0]
    unknown = _load("--target", url, "--stub-url", url, "--fail-on", "latency_p99>5ms")
    assert unknown.returncode == 2
    assert "unknown metric 'latency'; known: added_ttft_pNN, frames_lost" in unknown.stderr
