"""`tokenpath load`'s flags that an audit found unasserted reach the LoadConfig it runs: --stub-workers, --h3-window
(with --http3 and the https --target it needs), --warmup, --duration and --runs. LoadRunner is replaced by a recorder
of its config that stops the command there: no stub, no proxy, no worker. Each value given differs from the flag's
default, so a CLI that dropped the flag fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import tokenpath.load.runner
from tokenpath.cli import app
from tokenpath.load.runner import LoadConfig
from tokenpath.wire.httpversion import HttpVersion


class Stop(Exception):
    """Raised by the recorder in place of the run."""


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[LoadConfig]:
    seen: list[LoadConfig] = []

    def record(self: Any, cfg: LoadConfig, *args: Any) -> None:
        seen.append(cfg)
        raise Stop

    monkeypatch.setattr(tokenpath.load.runner.LoadRunner, "__init__", record)
    return seen


def load(runs: list[LoadConfig], tmp_path: Path, *args: str) -> LoadConfig:
    out = CliRunner().invoke(app, ["load", "--client-workers", "1", "--out", str(tmp_path), *args])
    assert isinstance(out.exception, Stop), out.output  # it reached the run, refusing nothing
    assert len(runs) == 1
    return runs[0]


def test_stub_workers_reach_the_config(runs: list[LoadConfig], tmp_path: Path) -> None:
    assert load(runs, tmp_path, "--stub-workers", "3").stub_workers == 3  # the default: 1


def test_h3_window_reaches_the_config(runs: list[LoadConfig], tmp_path: Path) -> None:
    https = ["--http3", "--target", "https://127.0.0.1:9/v1", "--stub-url", "http://127.0.0.1:8000"]
    cfg = load(runs, tmp_path, *https, "--h3-window", "2000000:3000000")  # the default: default (aioquic's)
    assert cfg.http_version is HttpVersion.HTTP3
    assert cfg.h3_window == "2000000:3000000"


def test_warmup_duration_and_runs_reach_the_config(runs: list[LoadConfig], tmp_path: Path) -> None:
    cfg = load(runs, tmp_path, "--warmup", "0.5", "--duration", "4.5", "--runs", "2")  # the defaults: 2, 10, 3
    assert (cfg.warmup_s, cfg.duration_s, cfg.runs) == (0.5, 4.5, 2)
