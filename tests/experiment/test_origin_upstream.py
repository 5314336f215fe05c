"""`[upstream] kind = "llama-server"`: a real origin the matrix starts, measured by paired runs (issue 37 §1, §2).
Parsed and refused without starting anything; a round's pairing on injected streams (no origin, no clock)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from tokenpath.errors import UsageError
from tokenpath.experiment import endpoint
from tokenpath.experiment.measure import RunRecord
from tokenpath.experiment.pairs import UNSTABLE
from tokenpath.experiment.runner import Environment, MatrixRunner
from tokenpath.experiment.spec import parse
from tokenpath.origins.catalogue import ORIGINS
from tokenpath.probe.metrics import RunMetrics
from tokenpath.tools import TOOLS_ENV

BUILT = all(not o.missing_reason() for o in ORIGINS.values())


@pytest.mark.skipif(not BUILT, reason="scripts/build-llama has not built the real origins here")
def test_a_started_origin_is_an_upstream_with_fixed_sampling() -> None:
    exp = parse({"upstream": {"kind": "llama-server", "max_tokens": 8}, "proxy": [{"name": "nginx"}]})
    spec = exp.endpoint
    assert spec is not None
    assert (spec.kind, spec.model, spec.max_tokens, spec.label) == (
        "llama-server",
        "smollm2-135m",
        8,
        "origin llama-server",
    )
    assert spec.sampling == (("seed", 1), ("temperature", 0))
    assert [c.endpoint for c in exp.conditions] == ["origin llama-server"]
    started = spec.started("http://127.0.0.1:4567", {"version": "v"})
    assert started.url == "http://127.0.0.1:4567/v1/chat/completions"
    assert started.to_json()["origin_server"] == {"version": "v"}
    assert endpoint.parse({"url": "http://h", "model": "m"}).sampling == ()  # a URL's own defaults


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"kind": "vllm"}, "no real origin 'vllm'"),
        ({"kind": "llama-server", "url": "http://h"}, "knows its url and model"),
        ({"kind": "llama-server", "model": "m"}, "knows its url and model"),
    ],
)
def test_a_kind_that_cannot_be_started_is_refused(table: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        endpoint.parse(table)


def test_a_missing_build_is_one_line_that_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(TOOLS_ENV, str(tmp_path))
    with pytest.raises(UsageError, match=r"kind llama-server: .*not built.*build-llama"):
        endpoint.parse({"kind": "llama-server"})


def metrics(ttft: float) -> RunMetrics:
    return RunMetrics("s", 200, 10, 10, 1.0, ttft, ttft, {"p50": 10.0, "max": 20.0}, {1: 10}, None)


def test_a_round_brackets_each_path_and_excludes_one_whose_directs_disagree(monkeypatch: pytest.MonkeyPatch) -> None:
    exp = parse({"upstream": {"url": "http://127.0.0.1:9", "model": "m"}})
    assert exp.endpoint is not None
    exp.endpoint = replace(exp.endpoint, kind="llama-server")  # as started: no build needed for this
    runner = MatrixRunner(exp, Path("/nonexistent"), console=Console(quiet=True))
    ttfts = iter([100.0, 130.0, 110.0, 900.0, 400.0])  # direct, nginx, direct, haproxy, direct
    asked: list[str] = []

    def probe(env: Environment, url: str, label: str, check: bool = False, cond: object = None) -> RunRecord:
        asked.append(label)
        return RunRecord(label, "s", metrics(next(ttfts)), audited=False)

    monkeypatch.setattr(runner, "_endpoint_probe", probe)
    records = runner._endpoint_round(
        Environment("loopback", False), [("direct", "u"), ("nginx", "u"), ("haproxy", "u")], exp.conditions[0]
    )
    assert asked == ["direct", "nginx", "direct", "haproxy", "direct"]
    nginx, haproxy = records[1], records[3]
    assert nginx.path_added_ttft_ms == pytest.approx(25.0)  # 130 - mean(100, 110)
    assert nginx.included
    assert not haproxy.included  # its directs took 110 and 400 ms: the origin's pace moved
    assert haproxy.exclusion_reason is not None
    assert haproxy.exclusion_reason.startswith(UNSTABLE)
    assert all(r.included for r in records if r.path == "direct")


@pytest.mark.skipif(not BUILT, reason="scripts/build-llama has not built the real origins here")
def test_a_started_origin_streams_each_format_it_speaks_on_its_route() -> None:
    exp = parse({"upstream": {"kind": "llama-server"}, "conditions": {"api": ["openai", "anthropic", "responses"]}})
    spec = exp.endpoint
    assert spec is not None
    assert [c.api.value for c in exp.conditions] == ["openai", "anthropic", "responses"]
    started = spec.started("http://127.0.0.1:4567", {})
    through = "http://127.0.0.1:8080" + started.target.path  # a path in front, as the runner asks it
    assert [started.for_api(through, c.api) for c in exp.conditions] == [
        "http://127.0.0.1:8080/v1/chat/completions",
        "http://127.0.0.1:8080/v1/messages",
        "http://127.0.0.1:8080/v1/responses",
    ]
    with pytest.raises(UsageError, match="llama-cpp-python does not speak it"):
        parse({"upstream": {"kind": "llama-cpp-python"}, "conditions": {"api": "anthropic"}})
    with pytest.raises(UsageError, match="api: the stub's pacing"):  # a URL endpoint streams its one format
        parse({"upstream": {"url": "http://h", "model": "m"}, "conditions": {"api": "anthropic"}})


def test_a_started_origins_first_stream_of_a_condition_warms_it_unmeasured(monkeypatch: pytest.MonkeyPatch) -> None:
    exp = parse({"upstream": {"url": "http://127.0.0.1:9", "model": "m"}, "runs": 2})
    assert exp.endpoint is not None
    exp.endpoint = replace(exp.endpoint, kind="llama-server")
    runner = MatrixRunner(exp, Path("/nonexistent"), console=Console(quiet=True))
    ttfts = iter([1966.0, 21.0, 22.0])  # the prompt's first stream, then cached
    monkeypatch.setattr(
        runner, "_endpoint_probe", lambda *a, **k: RunRecord("direct", "s", metrics(next(ttfts)), audited=False)
    )
    monkeypatch.setattr(runner, "write", lambda: None)
    runner._condition(Environment("loopback", False), exp.conditions[0], lambda what: None)
    (row,) = runner.rows
    assert row.runs == 2  # the warm-up is not among them
    assert row.ttft_ms_median == pytest.approx(21.5)


def test_the_progress_total_counts_every_stream_a_paired_condition_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    exp = parse({"upstream": {"url": "http://127.0.0.1:9", "model": "m"}, "runs": 3, "proxy": [{"name": "nginx"}]})
    assert exp.endpoint is not None
    exp.endpoint = replace(exp.endpoint, kind="llama-server")
    runner = MatrixRunner(exp, Path("/nonexistent"), console=Console(quiet=True))
    monkeypatch.setattr(
        runner, "_endpoint_probe", lambda env, url, label, **k: RunRecord(label, "s", metrics(100.0), audited=False)
    )
    monkeypatch.setattr(runner, "write", lambda: None)
    monkeypatch.setattr(runner, "_skips_http", lambda *a: False)
    env = Environment("loopback", False)
    proxy = SimpleNamespace(base_path="", url="http://127.0.0.1:1")
    env.running["nginx"] = SimpleNamespace(proxy=proxy, origin="http://127.0.0.1:1", alive=True)  # type: ignore[assignment]
    ticks: list[str] = []
    runner._condition(env, exp.conditions[0], ticks.append)
    assert len(ticks) == 3 * 3  # direct, nginx, direct per run
    assert runner._streams_per_condition() == len(ticks)  # the total was 2 * 3: the bar overran it
    (nginx,) = [r for r in runner.rows if r.proxy == "nginx"]
    assert nginx.pairing is not None
    assert (nginx.pairing.kept, nginx.pairing.directs) == (3, 6)
