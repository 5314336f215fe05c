"""`tokenpath diagnose`'s flags reach the probe config and the series (the series itself is scripted here: the real
processes are tests/e2e/test_diagnose.py); its exit codes and --json."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from typer.testing import CliRunner

from tests.diagnose.test_classify import series, streaming, whole
from tokenpath.cli import app
from tokenpath.diagnose import measure
from tokenpath.diagnose.classify import RunFigures
from tokenpath.diagnose.series import Run
from tokenpath.probe.client import ProbeConfig

URL = "http://127.0.0.1:9/v1/chat/completions"


class Scripted:
    """Stands in for the network: whether a stub answers, and the figures each run would measure."""

    def __init__(self, runs: list[RunFigures], stub: bool = True, head: tuple[tuple[str, str], ...] = ()) -> None:
        self.runs, self.stub, self.head = runs, stub, head
        self.template: ProbeConfig | None = None
        self.planned: list[Run] = []
        self.asked: list[str] = []

    def is_stub(self, url: str, timeout_s: float = 2.0) -> bool:
        self.asked.append(url)
        return self.stub

    def run_series(self, template: ProbeConfig, runs: Sequence[Run], probe: object = None) -> list[measure.Measured]:
        self.template, self.planned = template, list(runs)
        by = {r.name: r for r in self.runs}
        return [measure.Measured(by[r.name], self.head) for r in runs]


def invoke(monkeypatch: pytest.MonkeyPatch, scripted: Scripted, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(measure, "is_stub", scripted.is_stub)
    monkeypatch.setattr(measure, "run_series", scripted.run_series)
    out = CliRunner().invoke(app, ["diagnose", *args])
    return out.exit_code, out.output


def unpaced_runs() -> list[RunFigures]:
    base = RunFigures("base", 8, (1,) * 8, (60,) * 8, tuple(10.0 * k for k in range(8)))
    return [base, RunFigures("browser", 8, (1,) * 8, (60,) * 8, tuple(10.0 * k for k in range(8)))]


def test_flags_reach_the_probe_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-test")
    s = Scripted(series(streaming))
    code, _ = invoke(monkeypatch, s, URL, "--header", "X-A:1", "--api-key-env", "MY_KEY", "--model", "m1",
                     "--max-tokens", "7", "--insecure", "--total-timeout", "9")  # fmt: skip
    assert code == 0
    t = s.template
    assert t is not None
    assert (t.url, t.headers, t.api_key, t.model, t.max_tokens) == (URL, (("X-A", "1"),), "sk-test", "m1", 7)
    assert t.tls.insecure is True
    assert t.total_timeout_s == 9


def test_cacert_reaches_the_tls_options(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(series(streaming))
    invoke(monkeypatch, s, URL, "--cacert", "/tmp/ca.pem")
    assert s.template is not None
    assert s.template.tls.cacert == "/tmp/ca.pem"


def test_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENPATH_URL", URL)
    s = Scripted(series(streaming))
    assert invoke(monkeypatch, s)[0] == 0
    assert s.asked == [URL]


def test_a_stub_behind_the_path_is_paced_and_an_endpoint_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(series(streaming), stub=True)
    invoke(monkeypatch, s, URL)
    assert [r.name for r in s.planned] == ["base", "slow", "large", "browser"]
    s = Scripted(unpaced_runs(), stub=False)
    code, out = invoke(monkeypatch, s, URL)
    assert code == 0
    assert [r.name for r in s.planned] == ["base", "browser"]
    assert "only the client's side varied" in out


def test_stub_url_is_checked_and_paces_the_series(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(series(streaming), stub=False)
    code, out = invoke(monkeypatch, s, URL, "--stub-url", "http://127.0.0.1:8")
    assert code == 2
    assert "--stub-url http://127.0.0.1:8 does not answer" in out
    monkeypatch.setattr(measure, "is_stub", lambda url, timeout_s=2.0: url == "http://127.0.0.1:8")
    monkeypatch.setattr(measure, "run_series", s.run_series)
    assert CliRunner().invoke(app, ["diagnose", URL, "--stub-url", "http://127.0.0.1:8"]).exit_code == 0
    assert [r.name for r in s.planned] == ["base", "slow", "large", "browser"]


def test_held_exits_16_with_the_fix_and_json_keeps_stdout_a_document(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(series(whole), head=(("Server", "nginx/1.22.1"),))
    code, out = invoke(monkeypatch, s, URL)
    assert code == 16
    assert "fix: proxy_buffering off;" in out
    monkeypatch.setattr(measure, "run_series", s.run_series)
    result = CliRunner().invoke(app, ["diagnose", URL, "--json"])
    assert result.exit_code == 16
    doc = json.loads(result.stdout)
    assert doc["verdict"]["cause"] == "whole_response"


def test_proxy_flag_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = invoke(monkeypatch, Scripted(series(whole)), URL, "--proxy", "apache2")
    assert code == 16
    assert "fix: flushpackets=on" in out
    code, out = invoke(monkeypatch, Scripted(series(whole)), URL, "--proxy", "squid")
    assert code == 2
    assert "--proxy 'squid'" in out


def test_unsure_exits_17(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = series(streaming)
    runs[1] = whole("slow", 120.0, 60)
    code, out = invoke(monkeypatch, Scripted(runs), URL)
    assert code == 17
    assert "unsure" in out


def test_no_url_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOKENPATH_URL", raising=False)
    assert invoke(monkeypatch, Scripted(series(streaming)))[0] == 2
