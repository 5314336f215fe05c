"""`tokenpath timeouts`' flags reach the survey's config (the survey itself scripted here; the real streams are
tests/diagnose/test_limitprobe_client.py and tests/e2e/test_timeouts.py): --api and --http2 as probe takes them,
--keepalives refused for a format that has none, the JSON saying what was asked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.diagnose import limits
from tokenpath.diagnose.limits import PathLimits, SurveyConfig
from tokenpath.wire.apis import Api
from tokenpath.wire.httpversion import HttpVersion

URL = "http://127.0.0.1:9"


def invoke(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, list[SurveyConfig]]:
    seen: list[SurveyConfig] = []

    async def survey(cfg: SurveyConfig, on_try: Any) -> list[PathLimits]:
        seen.append(cfg)
        return [PathLimits(url, (), None) for url in cfg.targets]

    monkeypatch.setattr(limits, "survey", survey)
    out = CliRunner().invoke(app, ["timeouts", URL, "--min", "0.5", "--max", "2", "--resolution", "0.5", *args])
    return out.exit_code, out.output, seen


def test_api_and_http2_reach_the_survey(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, seen = invoke(monkeypatch, "--api", "anthropic", "--http2", "--json")
    assert code == 0, out
    assert seen[0].api is Api.ANTHROPIC
    assert seen[0].http_version is HttpVersion.HTTP2
    doc = json.loads(out)
    assert (doc["api"], doc["http_version"]) == ("anthropic", "2")


def test_the_defaults_are_openai_over_http1(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, seen = invoke(monkeypatch)
    assert code == 0, out
    assert (seen[0].api, seen[0].http_version, seen[0].tries_keepalives) == (Api.OPENAI, HttpVersion.HTTP11, True)


def test_what_it_cannot_do_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, seen = invoke(monkeypatch, "--api", "bedrock", "--keepalives")
    assert code != 0
    assert "no keep-alive" in out
    code, out, seen = invoke(monkeypatch, "--api", "nope")
    assert code != 0
    assert "--api" in out
    assert not seen


def test_what_the_stub_would_refuse_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, seen = invoke(monkeypatch, "--max", "4000")
    assert code == 2, out
    assert "3600 s" in out
    code, out, seen = invoke(monkeypatch, "--max", "1100", "--resolution", "0.02")
    assert code == 2, out
    assert "100000" in out
    code, out, seen = invoke(monkeypatch, "--api", "realtime")
    assert code == 2, out
    assert "WebSocket-only" in out
    assert not seen


def test_the_http2_help_names_only_h2c(monkeypatch: pytest.MonkeyPatch) -> None:
    out = CliRunner().invoke(app, ["timeouts", "--help"], env={"COLUMNS": "200"})
    assert "--http2" in out.output
    assert "ALPN h2 over TLS" not in out.output
