"""The real inference servers as origins (issue 37), built by scripts/build-llama into the tools folder: started on
a free port, their HTTP/1.0 framing and headers held to the stub's presets, every format each speaks streamed.

CPU-bound on a shared 2-core machine: a few tokens each, one slot, serial; nothing here asserts a speed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tokenpath.errors import BadRequest
from tokenpath.experiment.pairs import OTHER_TOKENS, UNSTABLE
from tokenpath.origins.behaviour import http10_answer
from tokenpath.origins.catalogue import ORIGINS, Settings
from tokenpath.origins.process import RunningOrigin, origin_probe, start
from tokenpath.probe.metrics import run_metrics
from tokenpath.probe.stream import probe_stream
from tokenpath.proxies import lookup
from tokenpath.serve.procs import ServiceProcess, tokenpath_argv
from tokenpath.stub.presets import PRESETS
from tokenpath.wire.apis import SPECS

pytestmark = pytest.mark.e2e

TOKENS = 4
HELD_READS = 2  # reads a held answer of eight tokens can take: its whole body, and the close


@pytest.fixture(scope="module", params=sorted(ORIGINS))
def origin(request: pytest.FixtureRequest) -> Iterator[RunningOrigin]:
    entry = ORIGINS[request.param]
    if entry.missing_reason():
        pytest.skip(entry.missing_reason())
    with start(entry, Settings(threads=2)) as running:
        yield running
    assert running.process is None  # stopped, its whole group


def test_the_stub_preset_is_what_the_origin_does(origin: RunningOrigin) -> None:
    """What a path acts on, read off the wire, is the preset the stub answers with (stub/presets.py)."""
    for api in origin.origin.apis:
        answer = http10_answer(origin_probe(origin, api, max_tokens=TOKENS))
        assert answer.status == 200, api
        assert answer.body_bytes > 0, api
        assert answer.behaviour == PRESETS[origin.origin.name], api


def test_every_format_it_speaks_streams(origin: RunningOrigin) -> None:
    for api in origin.origin.apis:
        metrics = run_metrics(probe_stream(origin_probe(origin, api, max_tokens=TOKENS)))
        assert metrics.status == 200, api
        assert metrics.ttft_ms is not None, api  # a content frame, read in its own format
        assert metrics.frames >= TOKENS, api


def test_its_version_model_and_build_are_stated(origin: RunningOrigin) -> None:
    info = origin.info()
    assert info["name"] == origin.origin.name
    text = str(info)
    assert "0.3.36" in text  # llama-cpp-python's release, whose vendored llama.cpp both are built from
    assert "smollm2" in text.lower()
    assert "threads" in text


def test_the_matrix_starts_a_real_origin_and_pairs_its_streams(tmp_path: Path) -> None:
    """`[upstream] kind`: started for the run, stated in the results, every path between two direct streams.
    Whether a run is kept depends on the machine's load (its directs may disagree): the held / streamed shapes are
    read off every run, kept or not."""
    entry = ORIGINS["llama-cpp-python"]
    missing = entry.missing_reason() or lookup("nginx").missing_reason() or ""
    if missing:
        pytest.skip(missing)
    exp = tmp_path / "exp.toml"
    exp.write_text(
        'name = "real"\nruns = 2\n[upstream]\nkind = "llama-cpp-python"\nmax_tokens = 8\n'
        '[[proxy]]\nname = "nginx"\nvariants = ["stock", "ignore_x_accel"]\n'
    )
    out = subprocess.run(
        # --force: the mixed lane runs four tests at a time beside a CPU-bound model; what is asserted is the origin
        # stated and the shapes, not the floor (test_matrix.py, in the timed lane, asserts a certified run).
        tokenpath_argv("matrix", str(exp), "--out", str(tmp_path / "out"), "--force"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    server = doc["experiment"]["upstream"]["origin_server"]
    assert server["name"] == "llama-cpp-python"
    assert "0.3.36" in server["version"]
    assert server["settings"]["slots"] == 1
    assert any("GGML_NATIVE" in line for line in server["build"])
    rows = {(r["proxy"], r["variant"]): r for r in doc["rows"]}
    assert len(rows["direct", "stock"]["raw"]) == 2 * 3  # each round: direct, nginx, direct, nginx, direct
    for row in rows.values():
        assert set(row["exclusions"]) <= {UNSTABLE, OTHER_TOKENS}, row["exclusions"]  # only the pairing excludes
    # llama-cpp-python answers nginx's HTTP/1.0 close-delimited with X-Accel-Buffering: no: stock nginx streams it
    # by that header, and holds it once the header is ignored. Held, eight tokens' frames (under 4 KB, one proxy
    # buffer) leave nginx together at the upstream's close: at most HELD_READS reads. Streamed, they leave as the model
    # writes them, ~13 ms apart idle; a loaded host coalesces some of them (a reader or nginx descheduled past a token's
    # interval: 4 reads of 11 frames in CI), so more reads than held is the shape, not a share of the frames.
    for run in rows["nginx", "stock"]["raw"]:
        assert run["metrics"]["arrivals"] > HELD_READS, run["metrics"]
    for run in rows["nginx", "ignore_x_accel"]["raw"]:
        assert run["metrics"]["arrivals"] <= HELD_READS, run["metrics"]


def gateway_config(tmp_path: Path, origin: RunningOrigin) -> Path:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'listen = "127.0.0.1:0"\n[auth]\nmode = "none"\n[[pool]]\nname = "default"\n'
        f'[[pool.member]]\nurl = "{origin.url}"\n'
    )
    return config


def through_gateway(url: str, origin: RunningOrigin) -> list[int]:
    """Each format's status through the gateway at `url` (a streamed answer asserted whole where it is 200)."""
    statuses = []
    for api in origin.origin.apis:
        direct = origin_probe(origin, api, max_tokens=TOKENS)
        try:
            metrics = run_metrics(probe_stream(replace(direct, url=url + SPECS[api].path(origin.model))))
        except BadRequest as exc:
            statuses.append(400 if "HTTP 400 " in str(exc) else -1)
            continue
        assert metrics.status == 200, api
        assert metrics.ttft_ms is not None, api  # its first content frame, in its own format, through the pool
        assert metrics.frames >= TOKENS, api
        statuses.append(metrics.status)
    return statuses


def test_a_gateway_with_the_origin_as_its_member_streams_every_format_it_speaks(
    origin: RunningOrigin, tmp_path: Path
) -> None:
    """llama-cpp-python's server refuses, with an empty 400, any X-Request-Id that is not a UUID (starlette-context's
    RequestIdPlugin validates it). The gateway's own id was 16 hex digits and every request failed; it is a UUID now,
    on the stock config, and every format streams through both servers."""
    with ServiceProcess(tokenpath_argv("gateway", "--config", str(gateway_config(tmp_path, origin))), "gw") as gw:
        assert gw.url is not None
        assert through_gateway(gw.url, origin) == [200] * len(origin.origin.apis)
