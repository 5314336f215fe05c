"""A diagnosis assembled from figures and heads: the proxy (--proxy or its headers), the fix, the exit code, the
--json document and the text, the verdict first."""

from __future__ import annotations

import json

import pytest

from tests.diagnose.test_classify import Model, grown, streaming, timer, whole
from tokenpath.diagnose.classify import RunFigures
from tokenpath.diagnose.report import Diagnosis, diagnosis, dumps, lines
from tokenpath.errors import DiagnosisUnsure, PathHeld, UsageError

NGINX = [("Server", "nginx/1.22.1")]


def of(model: Model, heads: list[list[tuple[str, str]]], proxy: str | None = None, ttfb: float = 1.0) -> Diagnosis:
    verdict, runs = grown(model, ttfb=ttfb)
    return diagnosis("http://p", True, runs, verdict, heads, proxy)


def test_recognised_proxy_gets_its_fix_line_and_source() -> None:
    d = of(whole, [[], NGINX])
    assert d.recognised is not None
    assert (d.recognised.proxy, d.recognised.by) == ("nginx", "Server: nginx/1.22.1")
    assert d.fix is not None
    text = lines(d)
    assert text[0].startswith("http://p: holds the whole response")
    assert "fix: proxy_buffering off;" in text
    assert any(line.strip().startswith("source: https://nginx.org/") for line in text)


def test_proxy_option_names_a_proxy_its_headers_do_not() -> None:
    d = of(timer, [[]], proxy="haproxy")
    assert d.recognised is not None
    assert d.recognised.by == "--proxy"
    assert d.fix is not None
    assert d.fix.line == "option http-no-delay"
    assert d.generic is None


def test_unrecognised_holding_proxy_gets_the_rule_and_a_generic_fix() -> None:
    d = of(timer, [[]])
    assert d.fix is None
    assert d.generic is not None
    assert "200 ms" in d.generic
    text = "\n".join(lines(d))
    assert "--proxy NAME" in text
    assert "haproxy" not in text.lower()


def test_unknown_proxy_name_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="nosuch"):
        of(whole, [[]], proxy="nosuch")


def test_exit_codes() -> None:
    assert of(whole, [[]]).exit_code == PathHeld.exit_code == 16
    assert of(streaming, [NGINX]).exit_code == 0

    def disagree(name: str, ttfb: float = 1.0) -> RunFigures:
        return whole(name, ttfb=ttfb) if name == "slow" else streaming(name, ttfb=ttfb)

    assert of(disagree, [[]]).exit_code == DiagnosisUnsure.exit_code == 17


def test_a_head_only_hold_is_exit_0_with_a_note_and_no_fix() -> None:
    d = of(streaming, [NGINX], ttfb=160.0)
    assert d.exit_code == 0
    assert d.fix is None
    assert any(line.startswith("note: the response head waited") for line in lines(d))


def test_a_streaming_path_gets_no_fix_even_when_recognised() -> None:
    d = of(streaming, [NGINX])
    assert d.fix is None
    assert d.recognised is not None


def test_json_document() -> None:
    doc = json.loads(dumps(of(whole, [NGINX])))
    assert doc["schema_version"] == 6
    assert doc["websocket"] is None  # over SSE: no upgrade tried
    assert doc["paced"] is True
    assert doc["bound"]["stream_bytes"] == 64 * 1024
    assert doc["verdict"]["cause"] == "whole_response"
    assert doc["verdict"]["held"] is True
    assert doc["proxy"] == {"name": "nginx", "by": "Server: nginx/1.22.1"}
    assert doc["fix"]["source"].startswith("https://nginx.org/")
    assert [r["name"] for r in doc["runs"]][:4] == ["base", "slow", "large", "browser"]
    assert doc["runs"][0]["bursts"] == [12]
    assert doc["runs"][0]["frames_per_read"] == 12
