"""A flag that its call's mode would never read is an error naming it, never dropped in silence (a found set, each
once exit 0 with no effect): relay's cork flags without --mode cork, stub's --seed without --jitter, matrix's run
flags with --emit-compose, load's --max-in-flight without --rate and the flags --plan does not read. The gateway's
and the monitor's are in tests/gateway/test_cli_flags.py and tests/monitor/test_cli_flags_read.py. Each command's
work is replaced by a recorder that fails the test if it is reached."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.cli.common import refuse_unread
from tokenpath.errors import UsageError


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every command's work replaced: a refused call reaches none of them."""
    import tokenpath.controls.relay
    import tokenpath.experiment.compose
    import tokenpath.load.plan
    import tokenpath.stub.server

    reached: list[str] = []

    def recorder(name: str, returns: object = None) -> Callable[..., object]:
        def reach(*args: object, **kwargs: object) -> object:
            reached.append(name)
            return returns

        return reach

    monkeypatch.setattr(tokenpath.controls.relay, "serve", recorder("relay"))
    monkeypatch.setattr(tokenpath.stub.server, "run", recorder("stub"))
    monkeypatch.setattr(tokenpath.experiment.compose, "emit", recorder("emit", (Path(), [])))
    monkeypatch.setattr(tokenpath.load.plan, "plan_table", recorder("plan", ""))
    return reached


@pytest.mark.parametrize("mode", ["pass", "buffer", "gzip-hold", "gzip-flush"])
@pytest.mark.parametrize("flag", [("--cork-bytes", "7"), ("--cork-ms", "3")])
def test_relay_cork_flags_without_cork_are_refused(mode: str, flag: tuple[str, str], nothing_runs: list[str]) -> None:
    out = run("relay", "--upstream", "127.0.0.1:9", "--mode", mode, *flag)
    assert out.exit_code == 2, out.output
    assert f"{flag[0]} is not read by --mode {mode}" in out.output
    assert nothing_runs == []


def test_relay_cork_flags_with_cork_are_served(nothing_runs: list[str]) -> None:
    out = run("relay", "--upstream", "127.0.0.1:9", "--mode", "cork", "--cork-bytes", "7", "--cork-ms", "3")
    assert out.exit_code == 0, out.output
    assert nothing_runs == ["relay"]


def test_stub_seed_without_jitter_is_refused(nothing_runs: list[str]) -> None:
    out = run("stub", "--seed", "42")
    assert out.exit_code == 2, out.output
    assert "--seed seeds --jitter's offsets" in out.output
    assert nothing_runs == []
    assert run("stub", "--seed", "42", "--jitter", "uniform:2").exit_code == 0
    assert nothing_runs == ["stub"]


@pytest.mark.parametrize("flag", [("--out", "elsewhere"), ("--force",), ("--json",)])
def test_matrix_run_flags_with_emit_compose_are_refused(
    flag: tuple[str, ...], tmp_path: Path, nothing_runs: list[str]
) -> None:
    experiment = Path(__file__).parents[1] / "examples" / "quick.toml"
    out = run("matrix", str(experiment), "--emit-compose", str(tmp_path / "compose"), *flag)
    assert out.exit_code == 2, out.output
    assert f"{flag[0]} is not read by --emit-compose" in out.output
    assert nothing_runs == []


def test_load_max_in_flight_without_rate_is_refused(nothing_runs: list[str]) -> None:
    out = run("load", "--max-in-flight", "3")
    assert out.exit_code == 2, out.output
    assert "--max-in-flight is not read without --rate" in out.output


@pytest.mark.parametrize(
    "flag",
    [("--rate", "20"), ("--http2",), ("--runs", "5"), ("--duration", "3"), ("--warmup", "1"), ("--stub-workers", "2"),
     ("--client-workers", "2"), ("--target", "http://127.0.0.1:9/v1"), ("--stub-url", "http://127.0.0.1:8"),
     ("--cluster", "auto"), ("--accept-encoding", "gzip"), ("--api", "anthropic"), ("--pause-ms", "500"),
     ("--out", "elsewhere")],
)  # fmt: skip
def test_load_plan_refuses_what_it_does_not_read(flag: tuple[str, ...], nothing_runs: list[str]) -> None:
    out = run("load", "--plan", "--concurrency", "50", *flag)
    assert out.exit_code == 2, out.output
    assert f"{flag[0]} is not read by --plan" in out.output
    assert nothing_runs == []


def test_load_plan_estimates_one_proxy_and_reads_its_pacing(nothing_runs: list[str]) -> None:
    out = run("load", "--plan", "--concurrency", "50", "--proxy", "gateway", "--proxy", "nginx")
    assert out.exit_code == 2, out.output
    assert "one --proxy at a time" in out.output
    ok = run("load", "--plan", "--concurrency", "50", "--proxy", "nginx", "--tokens", "64", "--interval-ms", "20",
             "--ttft-ms", "10", "--reasoning-tokens", "4")  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert nothing_runs == ["plan"]


@pytest.mark.parametrize(
    ("args", "flag", "why"),
    [(("relay", "--upstream", "127.0.0.1:9", "--mode", "pass"), "cork_ms", "by --mode pass"),
     (("relay", "--upstream", "127.0.0.1:9", "--mode", "buffer"), "cork_bytes", "by --mode buffer"),
     (("load",), "max_in_flight", "without --rate"),
     (("load", "--plan", "--concurrency", "50"), "runs", "by --plan")],
)  # fmt: skip
def test_a_flag_typed_at_its_default_is_refused_too(
    args: tuple[str, ...], flag: str, why: str, nothing_runs: list[str]
) -> None:
    """Typed, a flag says the user expects it read: `--cork-ms 200` without --mode cork is as unread as `--cork-ms
    3`, though 200 is its default (the command line's own record says it was typed: click's parameter source)."""
    command = getattr(importlib.import_module(f"tokenpath.cli.{args[0]}"), args[0])  # the command's function
    default = inspect.signature(command).parameters[flag].default
    typed = "--" + flag.replace("_", "-")
    out = run(*args, typed, str(default))
    assert out.exit_code == 2, out.output
    assert f"{typed} is not read {why}" in out.output
    assert nothing_runs == []


def test_a_call_from_python_names_flags_by_their_value() -> None:
    """Outside its own command line (a test, another command calling it) a function's parameters have no typed
    record: refuse_unread falls back to comparing with the defaults, even inside another command's context."""
    inner_calls: list[str] = []

    def inner(a: int = 1) -> None: ...

    def outer(a: int = 1) -> None:
        refuse_unread(inner, {"a": 1}, ("a",), "here")  # outer's `--a 1` was typed; inner's a was not
        inner_calls.append("passed")
        refuse_unread(inner, {"a": 2}, ("a",), "here")

    command = typer.Typer()
    command.command()(outer)
    out = CliRunner().invoke(command, ["--a", "1"])
    assert inner_calls == ["passed"]
    assert isinstance(out.exception, UsageError)
    assert "--a is not read here" in str(out.exception)


def test_refuse_unread_names_only_flags_set_away_from_their_default() -> None:
    def command(a: int = 1, b: list[str] | None = None, c: bool = False) -> None: ...

    refuse_unread(command, {"a": 1, "b": None, "c": False}, ("a", "b", "c"), "here")  # all at their defaults
    refuse_unread(command, {"a": 1, "b": [], "c": False}, ("a", "b", "c"), "here")  # typer's empty list
    with pytest.raises(UsageError, match="--a is not read here"):
        refuse_unread(command, {"a": 2}, ("a",), "here")
    with pytest.raises(UsageError, match="--b, --c are not read here"):
        refuse_unread(command, {"a": 1, "b": ["x"], "c": True}, ("a", "b", "c"), "here")
