"""`client_http = ["2"]` against a real `[upstream]`: the condition reaches the probe of every stream of the round
(direct and through each path), with its window; a refusal to speak h2 is the run's error, not a fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tokenpath.errors import HTTP2Unavailable
from tokenpath.experiment import runner as runner_module
from tokenpath.experiment.runner import Environment, MatrixRunner
from tokenpath.experiment.spec import parse
from tokenpath.probe.client import ProbeConfig
from tokenpath.wire.h2client import BROWSER_WINDOW, DEFAULT_WINDOW
from tokenpath.wire.httpversion import HttpVersion


def _runner(tmp_path: Path, conditions: dict[str, Any]) -> MatrixRunner:
    exp = parse({"upstream": {"url": "https://127.0.0.1:9/v1", "model": "m"}, "conditions": conditions})
    return MatrixRunner(exp, tmp_path, console=Console(quiet=True))


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[ProbeConfig]:
    """Each ProbeConfig the runner built; every stream is refused as an HTTP/1.1-only server refuses h2."""
    seen: list[ProbeConfig] = []

    def refuse(cfg: ProbeConfig, **_: Any) -> Any:
        seen.append(cfg)
        raise HTTP2Unavailable("the server chose http/1.1 by ALPN, not h2")

    monkeypatch.setattr(runner_module, "probe_stream", refuse)
    return seen


def test_an_upstream_round_over_http2_probes_every_path_over_http2_with_its_window(
    tmp_path: Path, probes: list[ProbeConfig]
) -> None:
    runner = _runner(tmp_path, {"client_http": ["1.1", "2"], "h2_window": ["browser"]})
    by_version = {c.http_version: c for c in runner.exp.conditions}
    paths = [("direct", "https://127.0.0.1:9/v1"), ("nginx", "https://127.0.0.1:10/v1")]
    records = runner._endpoint_round(Environment("loopback", True), paths, by_version[HttpVersion.HTTP2])
    assert [(c.url, c.http_version is HttpVersion.HTTP2, c.h2_window) for c in probes] == [
        (url, True, BROWSER_WINDOW) for _, url in paths
    ]
    # the endpoint's refusal is each run's error, with its reason: no HTTP/1.1 stream was made in its place
    assert all(r.error and "h2" in r.error for r in records)
    probes.clear()
    runner._endpoint_round(Environment("loopback", True), paths, by_version[HttpVersion.HTTP11])
    assert [(c.http_version is HttpVersion.HTTP2, c.h2_window) for c in probes] == [(False, DEFAULT_WINDOW)] * 2
