"""`tokenpath stub`'s flags that an audit found untested reach what it serves: --jitter (with --seed), --http10-framing
(alone and over a preset's), --priority, --workers and --model reach the StubConfig handed to stub.server.run, and
--loop its loop argument. Serving is replaced by a recorder: no socket, no process. Each value given differs from the
flag's default, so a CLI that dropped the flag fails here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import tokenpath.stub.server
from tests.helpers import invoked_once
from tokenpath.stub.config import Jitter, StubConfig


@dataclass(frozen=True, slots=True)
class Served:
    cfg: StubConfig
    loop: str


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Served]:
    calls: list[Served] = []

    def record(cfg: StubConfig, announce: object, loop: str) -> None:
        calls.append(Served(cfg, loop))

    monkeypatch.setattr(tokenpath.stub.server, "run", record)
    return calls


def serve(served: list[Served], *args: str) -> Served:
    return invoked_once(served, "stub", *args)[0]


def test_jitter_and_its_seed_reach_the_config(served: list[Served]) -> None:
    got = serve(served, "--jitter", "normal:2.5", "--seed", "7")  # --seed only beside the --jitter it seeds
    assert got.cfg.jitter == Jitter("normal", 2.5)
    assert got.cfg.seed == 7


def test_http10_framing_reaches_the_config(served: list[Served]) -> None:
    assert serve(served, "--http10-framing", "chunked").cfg.http10_framing == "chunked"  # the default: close


def test_http10_framing_goes_over_a_preset_s(served: list[Served]) -> None:
    got = serve(served, "--preset", "llama-server", "--http10-framing", "close")  # llama-server's own: chunked
    assert got.cfg.http10_framing == "close"


def test_priority_reaches_the_config(served: list[Served]) -> None:
    assert serve(served, "--priority", "normal").cfg.priority == "normal"  # the default: auto


def test_workers_reach_the_config(served: list[Served]) -> None:
    assert serve(served, "--workers", "3").cfg.workers == 3  # the default: 1


def test_model_reaches_the_config(served: list[Served]) -> None:
    assert serve(served, "--model", "flag-model").cfg.model == "flag-model"  # the default: tokenpath-stub


def test_loop_reaches_the_run(served: list[Served]) -> None:
    assert serve(served, "--loop", "asyncio").loop == "asyncio"  # the default: uvloop
