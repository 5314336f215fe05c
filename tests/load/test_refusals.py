"""What `tokenpath load` refuses in one line (exit 2) before anything starts: rates and durations no run can mean
(not finite, past their bound), --max-in-flight < 1, an --out it cannot write, credentials in a URL, the same level
or target twice, and --plan's inputs by the same checks as a run. And: an interrupted run exits 130, and a --fail-on
count over no completed stream is no pass. LoadRunner is replaced by a recorder that fails the test if reached."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import tokenpath.load.runner
from tokenpath.cli import app
from tokenpath.errors import UsageError
from tokenpath.load.gate import check, parse_load_rules
from tokenpath.load.plan import plan
from tokenpath.load.runner import MAX_DURATION_S, MAX_RATE_PER_CLIENT, LoadConfig, LoadRunner
from tokenpath.results.model import LoadResults, LoadRow, Provenance


class Reached(Exception):
    """The run was reached: nothing was refused."""


@pytest.fixture(autouse=True)
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def reached(self: Any) -> None:
        raise Reached

    monkeypatch.setattr(LoadRunner, "_run_anywhere", reached)


def refused(tmp_path: Path, *args: str) -> str:
    out = CliRunner().invoke(app, ["load", "--client-workers", "1", "--out", str(tmp_path / "out"), *args])
    assert not isinstance(out.exception, Reached), f"{args} reached the run"
    assert out.exit_code == 2, (args, out.output, out.exception)
    assert "Traceback" not in out.output
    return out.output


@pytest.mark.parametrize(
    "args",
    [
        ["--rate", "inf"],
        ["--rate", "nan"],
        ["--rate", "5,-inf"],
        ["--rate", "1e6"],  # past what one client process can start per second
        ["--rate", "5", "--max-in-flight", "0"],  # Semaphore(0): hung
        ["--rate", "5", "--max-in-flight", "-3"],  # ValueError traceback
    ],
)
def test_rates_no_client_can_keep_are_refused(tmp_path: Path, args: list[str]) -> None:
    refused(tmp_path, *args)


def test_the_rate_bound_is_per_client_process() -> None:
    assert LoadConfig(targets=("direct",), rates=(2 * MAX_RATE_PER_CLIENT,), client_workers=2).rates
    with pytest.raises(UsageError, match="client_workers"):
        LoadConfig(targets=("direct",), rates=(2 * MAX_RATE_PER_CLIENT,), client_workers=1)


@pytest.mark.parametrize(
    "args",
    [
        ["--duration", "nan"],  # ran 0 streams, exit 0, a bare NaN in results.json
        ["--warmup", "nan"],
        ["--duration", "inf"],
        ["--duration", "1e12"],
        ["--warmup", str(MAX_DURATION_S + 1)],
        ["--interval-ms", "nan"],  # passed to the stub, which hung
        ["--ttft-ms", "nan"],
        ["--heartbeat-ms", "nan"],
    ],
)
def test_durations_and_pacing_that_are_not_finite_or_too_long_are_refused(tmp_path: Path, args: list[str]) -> None:
    refused(tmp_path, *args)


def test_an_out_that_cannot_be_written_is_refused_before_anything_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = CliRunner().invoke(app, ["load", "--client-workers", "1", "--out", str(blocker / "out")])
    assert not isinstance(out.exception, Reached)  # found before the run, not after it
    assert out.exit_code == 2, out.output
    ok = CliRunner().invoke(app, ["load", "--client-workers", "1", "--out", str(tmp_path / "new" / "out")])
    assert isinstance(ok.exception, Reached)
    assert (tmp_path / "new" / "out").is_dir()  # made up front


def test_credentials_in_a_url_are_refused_and_never_shown(tmp_path: Path) -> None:
    stub = ["--stub-url", "http://127.0.0.1:8000"]
    said = refused(tmp_path, "--target", "http://u:SECRETPW@127.0.0.1:18001", *stub)
    assert "SECRETPW" not in said
    assert "--api-key-env" in said  # the flags that do carry credentials
    said = refused(tmp_path, "--target", "https://u:SECRETPW@127.0.0.1:18001", "--insecure", *stub)
    assert "SECRETPW" not in said
    assert "SECRETPW" not in refused(
        tmp_path, "--target", "http://127.0.0.1:18001", "--stub-url", "http://u:SECRETPW@127.0.0.1:8000"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "2,2"],  # two identical rows, each holding both levels' streams
        ["--rate", "5,5"],
        ["--proxy", "gateway", "--proxy", "gateway"],  # two gateways started, one measured
        ["--proxy", "a=x --port {listen_port}", "--proxy", "a=y --port {listen_port}"],  # one label, two commands
    ],
)
def test_a_level_or_target_given_twice_is_refused(tmp_path: Path, args: list[str]) -> None:
    refused(tmp_path, *args)


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "0"],  # printed zero cores
        ["--concurrency", "-5"],  # negative cores
        ["--concurrency", "50,50"],
        ["--interval-ms", "nan"],  # a ValueError traceback
        ["--ttft-ms", "inf"],  # printed 0 cores
        ["--ttft-ms", "nan"],
    ],
)
def test_the_plan_checks_what_a_run_checks(tmp_path: Path, args: list[str]) -> None:
    out = CliRunner().invoke(app, ["load", "--plan", *args])
    assert out.exit_code == 2, (args, out.output, out.exception)


def test_the_plan_library_refuses_what_it_cannot_plan() -> None:
    for levels, interval, ttft in (
        ((0,), 10.0, 10.0),
        ((-5,), 10.0, 10.0),
        ((5,), math.nan, 10.0),
        ((5,), 10, math.inf),
    ):
        with pytest.raises(UsageError):
            plan(levels, tokens=8, interval_ms=interval, ttft_ms=ttft)


def test_an_interrupted_run_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: Any) -> LoadResults:
        return LoadResults(provenance=Provenance.now("load"), config={"loop": "closed"}, interrupted=True)

    monkeypatch.setattr(LoadRunner, "run", interrupted)
    out = CliRunner().invoke(app, ["load", "--client-workers", "1", "--out", str(tmp_path)])
    assert out.exit_code == 130, out.output
    monkeypatch.setattr(tokenpath.load.runner.LoadRunner, "run", lambda self: LoadResults(
        provenance=Provenance.now("load"), config={"loop": "closed"}))  # fmt: skip
    assert CliRunner().invoke(app, ["load", "--client-workers", "1", "--out", str(tmp_path)]).exit_code == 0


def test_counts_over_completed_streams_breach_when_every_stream_failed() -> None:
    failed = LoadRow(level=50, target="gw", streams=0, errors=20, streams_total=20)
    results = LoadResults(provenance=Provenance.now("load"), config={"loop": "closed"}, levels=(failed,))
    for rule in ("frames_lost>0", "frames_out_of_order>0", "audit_failed>0", "unjoined>0"):
        (breach,) = check(parse_load_rules(rule), results)
        assert breach.value is None
        assert breach.line().endswith("nothing measured")
    whole = LoadRow(level=50, target="gw", streams=20, errors=0, streams_total=20)
    ok = LoadResults(provenance=Provenance.now("load"), config={"loop": "closed"}, levels=(whole,))
    assert check(parse_load_rules("frames_lost>0,unjoined>0"), ok) == []  # 0 over completed streams passes
