"""`tokenpath relay`'s --listen and --loop reach what it serves: --listen the RelayConfig's listen address and --loop
the loop argument handed to controls.relay.serve. Serving is replaced by a recorder: no socket, no process. Each value
given differs from the flag's default, so a CLI that dropped the flag fails here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import tokenpath.controls.relay
from tests.helpers import invoked_once
from tokenpath.controls.relay import RelayConfig

UPSTREAM = ["--upstream", "127.0.0.1:9"]


@dataclass(frozen=True, slots=True)
class Served:
    cfg: RelayConfig
    loop: str


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Served]:
    calls: list[Served] = []

    def record(cfg: RelayConfig, announce: object, loop: str) -> None:
        calls.append(Served(cfg, loop))

    monkeypatch.setattr(tokenpath.controls.relay, "serve", record)
    return calls


def relay(served: list[Served], *args: str) -> Served:
    return invoked_once(served, "relay", *UPSTREAM, *args)[0]


def test_listen_reaches_the_config(served: list[Served]) -> None:
    got = relay(served, "--listen", "127.0.0.2:4567")  # the default: 127.0.0.1:0
    assert (got.cfg.listen_host, got.cfg.listen_port) == ("127.0.0.2", 4567)
    assert (got.cfg.upstream_host, got.cfg.upstream_port) == ("127.0.0.1", 9)


def test_loop_reaches_the_serve_call(served: list[Served]) -> None:
    assert relay(served, "--loop", "asyncio").loop == "asyncio"  # the default: uvloop
