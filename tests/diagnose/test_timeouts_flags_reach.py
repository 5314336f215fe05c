"""`tokenpath timeouts`' flags that an audit found unasserted reach the SurveyConfig it runs and what it writes:
--min (with --max and --resolution, whose refusals tests/diagnose/test_timeouts_cli.py asserts), --no-keepalives,
--html, and a NAME=URL target's name. The survey is replaced by a recorder of its config that finds nothing: no stub,
no proxy, no stream. Each value given differs from the flag's default, so a CLI that dropped the flag fails here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import invoked_once
from tokenpath.diagnose import limits
from tokenpath.diagnose.limits import DEFAULT_MAX_S, DEFAULT_MIN_S, DEFAULT_RESOLUTION_S, PathLimits, SurveyConfig

URL = "http://127.0.0.1:9"


@pytest.fixture
def surveys(monkeypatch: pytest.MonkeyPatch) -> list[SurveyConfig]:
    seen: list[SurveyConfig] = []

    async def survey(cfg: SurveyConfig, on_try: Any) -> list[PathLimits]:
        seen.append(cfg)
        return [PathLimits(url, (), None) for url in cfg.targets]

    monkeypatch.setattr(limits, "survey", survey)
    return seen


def timeouts(surveys: list[SurveyConfig], *args: str) -> tuple[SurveyConfig, str]:
    return invoked_once(surveys, "timeouts", *args)


def test_min_max_and_resolution_reach_the_survey(surveys: list[SurveyConfig]) -> None:
    cfg, _ = timeouts(surveys, URL, "--min", "0.5", "--max", "20", "--resolution", "0.25")
    assert (DEFAULT_MIN_S, DEFAULT_MAX_S, DEFAULT_RESOLUTION_S) == (1.0, 300.0, 1.0)  # so each value below differs
    assert (cfg.min_s, cfg.max_s, cfg.resolution_s) == (0.5, 20.0, 0.25)


def test_min_is_in_the_json_bounds(surveys: list[SurveyConfig]) -> None:
    _, stdout = timeouts(surveys, URL, "--min", "2.5", "--json")
    assert json.loads(stdout)["bounds"]["min_s"] == 2.5


def test_no_keepalives_reaches_the_survey(surveys: list[SurveyConfig]) -> None:
    cfg, _ = timeouts(surveys, URL, "--no-keepalives")  # the default: None, tried where the format has them
    assert cfg.keepalives is False
    assert cfg.tries_keepalives is False


def test_keepalives_reaches_the_survey(surveys: list[SurveyConfig]) -> None:
    cfg, _ = timeouts(surveys, URL, "--keepalives")
    assert cfg.keepalives is True  # required, not merely tried where the format has them


def test_a_named_target_is_surveyed_by_its_url_and_reported_by_its_name(surveys: list[SurveyConfig]) -> None:
    cfg, stdout = timeouts(surveys, f"nginx={URL}", "http://127.0.0.1:10", "--json")
    assert cfg.targets == (URL, "http://127.0.0.1:10")  # the name is no part of the URL asked
    assert [path["proxy"] for path in json.loads(stdout)["paths"]] == ["nginx", None]


def test_html_writes_the_survey_page(surveys: list[SurveyConfig], tmp_path: Path) -> None:
    page = tmp_path / "timeouts.html"
    timeouts(surveys, f"nginx={URL}", "--html", str(page))  # the default: no page
    html = page.read_text()
    assert html.startswith("<!doctype html>")
    assert 'id="timeouts"' in html
    assert "nginx" in html  # the target's name labels its row
