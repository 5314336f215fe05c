"""Every `tokenpath monitor` flag is read where it is given, or refused: the one --url target's request flags reach
its target, and a flag the call's mode never reads (a --url flag beside a config file, a long-running flag with
--once, a --once flag without it, a target's flag with --exporter) is an error naming it, never dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.cli.monitor import ONCE_ONLY, SERVICE_ONLY, URL_TARGET
from tokenpath.monitor import exporter, service

URL = "http://127.0.0.1:9/v1"
# A value for each flag, away from its default (a flag at its default changes nothing, so it cannot be ignored).
GIVEN = {
    "direct_url": ["--direct-url", "http://127.0.0.1:8/v1"],
    "name": ["--name", "edge"],
    "model": ["--model", "gpt-x"],
    "api": ["--api", "anthropic"],
    "accept_encoding": ["--accept-encoding", "gzip"],
    "http2": ["--http2"],
    "h2_window": ["--h2-window", "browser"],
    "http3": ["--http3"],
    "h3_window": ["--h3-window", "browser"],
    "transport": ["--transport", "websocket"],
    "api_key_env": ["--api-key-env", "SOME_KEY"],
    "header": ["--header", "X-Team: a"],
    "max_tokens": ["--max-tokens", "7"],
    "body_json_text": ["--body-json", '{"temperature": 0}'],
    "cacert": ["--cacert", __file__],
    "insecure": ["--insecure"],
    "interval": ["--interval", "3"],
    "metrics_listen": ["--metrics-listen", "127.0.0.1:9999"],
    "metric_names": ["--metric-names", "otel"],
    "otlp_endpoint": ["--otlp-endpoint", "http://127.0.0.1:4318"],
    "probes": ["--probes", "2"],
    "fail_on": ["--fail-on", "fpr>1.5"],
    "json_out": ["--json"],
}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the monitor would have run: serving and probing replaced by recorders."""
    calls: list[Any] = []
    monkeypatch.setattr(exporter, "serve", lambda cfg, announce: calls.append(cfg))
    monkeypatch.setattr(service, "serve", lambda cfg, announce: calls.append(cfg))

    def once(cfg: Any, probes: int, rules: Any) -> tuple[list[Any], list[Any]]:
        calls.append((cfg, probes, rules))
        return [], []

    monkeypatch.setattr(service, "once", once)
    return calls


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["monitor", *args], env={"COLUMNS": "400"})


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "monitor.toml"
    path.write_text(f'[[target]]\nname = "a"\nurl = "{URL}"\n')
    return str(path)


@pytest.mark.parametrize("field", URL_TARGET)
def test_a_url_target_flag_beside_a_config_file_is_refused(field: str, config: str, served: list[Any]) -> None:
    out = run(config, *GIVEN[field])
    assert out.exit_code == 2, out.output
    assert f"{GIVEN[field][0]} is not read with a config file" in out.output
    assert served == []


@pytest.mark.parametrize("field", [f for f in SERVICE_ONLY if f != "otlp_endpoint"])  # that one has its own message
def test_a_long_running_flag_with_once_is_refused(field: str, served: list[Any]) -> None:
    out = run("--url", URL, "--once", *GIVEN[field])
    assert out.exit_code == 2, out.output
    assert f"{GIVEN[field][0]} is not read by --once" in out.output
    assert served == []


@pytest.mark.parametrize("probes", ["2", "5"])  # 5 is its default: typed, it is as unread as any other value
def test_probes_without_once_is_refused(probes: str, served: list[Any]) -> None:
    out = run("--url", URL, "--probes", probes)
    assert out.exit_code == 2, out.output
    assert "--probes is not read without --once" in out.output
    assert served == []


@pytest.mark.parametrize("field", [*URL_TARGET, *ONCE_ONLY, "interval"])
def test_a_flag_the_exporter_never_reads_is_refused(field: str, served: list[Any]) -> None:
    out = run("--exporter", *GIVEN[field])
    assert out.exit_code == 2, out.output
    assert GIVEN[field][0] in out.output
    assert served == []


def test_several_unread_flags_are_named_together(config: str, served: list[Any]) -> None:
    out = run(config, "--model", "m", "--json", "--once")
    assert out.exit_code == 2, out.output
    assert "--model is not read with a config file" in out.output
    out = run(config, "--model", "m", "--insecure")
    assert "--model, --insecure are not read with a config file" in out.output


def test_the_url_targets_flags_reach_its_target(served: list[Any]) -> None:
    args = [a for f in ("name", "model", "header", "max_tokens", "body_json_text", "insecure", "interval") for a in
            GIVEN[f]]  # fmt: skip
    out = run("--url", URL, "--direct-url", "http://127.0.0.1:8/v1", *args)
    assert out.exit_code == 0, out.output
    (cfg,) = served
    (target,) = cfg.targets
    spec = target.spec
    assert spec.name == "edge"
    assert (spec.model, spec.max_tokens, spec.insecure) == ("gpt-x", 7, True)
    assert spec.headers == {"X-Team": "a"}
    assert spec.body == {"temperature": 0}
    assert target.interval_s == 3
    assert set(target.routes) == {"via", "direct"}
    via = target.routes["via"]
    assert via.model == "gpt-x"
    assert via.max_tokens == 7
    assert ("X-Team", "a") in via.headers
    assert via.tls.insecure


def test_the_url_targets_transport_reaches_it(served: list[Any]) -> None:
    out = run("--url", URL, "--transport", "websocket", "--api", "responses")
    assert out.exit_code == 0, out.output
    assert served[0].targets[0].spec.transport == "websocket"


def test_the_log_level_is_the_one_given(monkeypatch: pytest.MonkeyPatch, served: list[Any]) -> None:
    import tokenpath.jsonlog

    levels: list[str] = []
    monkeypatch.setattr(tokenpath.jsonlog, "configure_logging", lambda level: levels.append(level))
    assert run("--url", URL, "--log-level", "warning").exit_code == 0
    assert run("--exporter", "--log-level", "error").exit_code == 0
    assert levels == ["warning", "error"]


@pytest.mark.parametrize("rules", ["", " ", ","])
def test_an_empty_fail_on_is_refused_not_a_gate_left_open(rules: str, served: list[Any]) -> None:
    result = run("--url", URL, "--once", "--fail-on", rules)  # RULES=; ... --fail-on "$RULES"
    assert result.exit_code == 2
    assert "--fail-on is empty: give at least one rule, e.g. 'ttft_p95>2s'" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert served == []  # nothing probed
    assert run("--url", URL, "--fail-on", rules).exit_code == 2  # without --once too
