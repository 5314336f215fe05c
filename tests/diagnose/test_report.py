"""A diagnosis assembled from figures and heads: the proxy (--proxy or its headers), the fix, the exit outcome, the
--json document and the text."""

from __future__ import annotations

import json

import pytest

from tests.diagnose.test_classify import series, streaming, timer, whole
from tokenpath.diagnose.report import diagnosis, dumps, lines
from tokenpath.errors import DiagnosisUnsure, PathHeld, UsageError

NGINX = [("Server", "nginx/1.22.1")]


def test_recognised_proxy_gets_its_fix_line_and_source() -> None:
    d = diagnosis("http://p", True, series(whole), [[], NGINX])
    assert d.recognised is not None
    assert d.recognised.proxy == "nginx"
    assert d.recognised.by == "Server: nginx/1.22.1"
    assert d.fix is not None
    assert d.fix.line.startswith("proxy_buffering off;")
    text = "\n".join(lines(d))
    assert "fix: proxy_buffering off;" in text
    assert "source: https://nginx.org/" in text


def test_proxy_option_names_a_proxy_its_headers_do_not() -> None:
    d = diagnosis("http://p", True, series(timer), [[]], proxy="haproxy")
    assert d.recognised is not None
    assert d.recognised.by == "--proxy"
    assert d.fix is not None
    assert d.fix.line == "option http-no-delay"
    assert d.hint is None


def test_unrecognised_holding_proxy_gets_a_hint_not_a_fix() -> None:
    d = diagnosis("http://p", True, series(timer), [[]])
    assert d.fix is None
    assert d.hint is not None
    assert "haproxy" in d.hint
    assert any("--proxy NAME" in line for line in lines(d))


def test_unknown_proxy_name_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="`proxy` 'squid'"):
        diagnosis("http://p", True, series(whole), [[]], proxy="squid")


def test_outcomes_carry_the_exit_codes() -> None:
    held = diagnosis("http://p", True, series(whole), [[]]).outcome()
    assert isinstance(held, PathHeld)
    assert held.exit_code == 16
    runs = series(streaming)
    runs[1] = timer("slow", 120.0, 60)
    unsure = diagnosis("http://p", True, runs, [[]]).outcome()
    assert isinstance(unsure, DiagnosisUnsure)
    assert unsure.exit_code == 17
    assert diagnosis("http://p", True, series(streaming), [NGINX]).outcome() is None


def test_a_streaming_path_gets_no_fix_even_when_recognised() -> None:
    d = diagnosis("http://p", True, series(streaming), [NGINX])
    assert d.fix is None
    assert d.recognised is not None


def test_json_document() -> None:
    doc = json.loads(dumps(diagnosis("http://p", True, series(whole), [NGINX])))
    assert doc["schema_version"] == 1
    assert doc["paced"] is True
    assert doc["verdict"]["cause"] == "whole_response"
    assert doc["verdict"]["held"] is True
    assert doc["proxy"] == {"name": "nginx", "by": "Server: nginx/1.22.1"}
    assert doc["fix"]["source"].startswith("https://nginx.org/")
    assert [r["name"] for r in doc["runs"]] == ["base", "slow", "large", "browser"]
    assert doc["runs"][0]["bursts"] == [12]
    assert doc["runs"][0]["frames_per_read"] == 12
