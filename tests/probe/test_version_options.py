"""`probe --http3 --h3-window --transport`: declared once in cli/options.py (as every shared option is), each reaching
the ProbeConfig the probe runs, its help the probe's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

import tokenpath.probe.stream
from tokenpath.cli import app, options
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.h3figures import BROWSER_H3_WINDOW
from tokenpath.wire.httpversion import HttpVersion


def _probed(monkeypatch: pytest.MonkeyPatch, *flags: str) -> ProbeConfig:
    seen: list[ProbeConfig] = []

    def capture(cfg: ProbeConfig, **_: Any) -> Any:
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(tokenpath.probe.stream, "probe_stream", capture)
    out = CliRunner().invoke(app, ["probe", "https://127.0.0.1:9/v1", *flags])
    assert seen, out.output
    return seen[0]


@pytest.mark.parametrize(
    ("flags", "applied"),
    [
        (["--http3"], lambda c: c.http_version is HttpVersion.HTTP3),
        (["--http3", "--h3-window", "browser"], lambda c: c.h3_window == BROWSER_H3_WINDOW),
        (["--api", "responses", "--transport", "websocket"], lambda c: c.transport == "websocket"),
    ],
)
def test_each_option_reaches_the_probe(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], applied: Callable[[ProbeConfig], bool]
) -> None:
    assert applied(_probed(monkeypatch, *flags))
    assert not applied(_probed(monkeypatch))  # not given: the probe's default


def test_h3_window_needs_http3() -> None:
    out = CliRunner().invoke(app, ["probe", "https://127.0.0.1:9/v1", "--h3-window", "browser"])
    assert "--h3-window is HTTP/3's: pass --http3 with it" in out.output


def _probe_option(name: str) -> Any:
    """The probe's option `name` as the command line parses it (typer's own click, a Parameter with opts and help)."""
    group: Any = typer.main.get_command(app)
    return next(p for p in group.commands["probe"].params if name in p.opts)


@pytest.mark.parametrize(
    ("flag", "declared"),
    [("--http3", options.Http3), ("--h3-window", options.H3Window), ("--transport", options.Transport)],
)
def test_the_probe_offers_the_option_declared_in_options(flag: str, declared: Any) -> None:
    info = declared.__metadata__[0]  # the typer.Option of the Annotated alias
    option = _probe_option(flag)
    assert option.opts == [flag]
    assert option.help == info.help
    assert option.help
