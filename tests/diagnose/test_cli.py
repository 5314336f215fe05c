"""`tokenpath diagnose`'s flags reach the probe config and the series (the series itself is scripted here: the real
processes are tests/e2e/test_diagnose.py); its exit codes and --json."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.diagnose.test_classify import Model, streaming, whole
from tokenpath.cli import app, common
from tokenpath.diagnose import measure, upgrade
from tokenpath.diagnose.classify import RunFigures
from tokenpath.diagnose.origin import PLAIN, OriginRun
from tokenpath.diagnose.series import Run
from tokenpath.diagnose.upgrade import UpgradeTried
from tokenpath.errors import PeerError
from tokenpath.probe.client import ProbeConfig
from tokenpath.probe.h3figures import BROWSER_H3_WINDOW
from tokenpath.probe.wsfallback import CODEX_ATTEMPTS, WsFallback
from tokenpath.probe.wsfigures import WsFigures
from tokenpath.stub.presets import PRESETS
from tokenpath.wire.httpversion import HttpVersion

URL = "http://127.0.0.1:9/v1/chat/completions"
HTTPS_URL = URL.replace("http:", "https:")
ROOT = Path(__file__).resolve().parents[2]


class Scripted:
    """Stands in for the network: whether a stub answers, and the figures each run would measure (by a model of
    the path, or a fixed list)."""

    def __init__(
        self, model: Model | list[RunFigures], stub: bool = True, head: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.model, self.stub, self.head = model, stub, head
        self.template: ProbeConfig | None = None
        self.planned: list[Run] = []
        self.asked: list[str] = []

    def is_stub(self, url: str, timeout_s: float = 2.0) -> bool:
        self.asked.append(url)
        return self.stub

    def run_series(
        self, template: ProbeConfig, runs: Sequence[Run], *_: object, **__: object
    ) -> list[measure.Measured]:
        self.template = template
        self.planned += runs
        if isinstance(self.model, list):
            by = {r.name: r for r in self.model}
            return [measure.Measured(by[r.name], self.head) for r in runs]
        return [measure.Measured(self.model(r.name), self.head) for r in runs]


def invoke(monkeypatch: pytest.MonkeyPatch, scripted: Scripted, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(measure, "is_stub", scripted.is_stub)
    monkeypatch.setattr(measure, "run_series", scripted.run_series)
    monkeypatch.setattr(measure, "stub_origin", lambda url, timeout_s=2.0: None)  # an older stub: it says nothing
    out = CliRunner().invoke(app, ["diagnose", *args])
    return out.exit_code, out.output


def unpaced_runs() -> list[RunFigures]:
    base = RunFigures("base", 8, (1,) * 8, (60,) * 8, tuple(10.0 * k for k in range(8)))
    return [base, RunFigures("browser", 8, (1,) * 8, (60,) * 8, tuple(10.0 * k for k in range(8)))]


def test_flags_reach_the_probe_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-test")
    s = Scripted(streaming)
    flags = ["--header", "X-A:1", "--api-key-env", "MY_KEY", "--model", "m1", "--max-tokens", "7", "--insecure"]
    code, _ = invoke(monkeypatch, s, HTTPS_URL, *flags, "--total-timeout", "9")
    assert code == 0
    t = s.template
    assert t is not None
    assert (t.url, t.headers, t.api_key, t.model, t.max_tokens) == (HTTPS_URL, (("X-A", "1"),), "sk-test", "m1", 7)
    assert t.tls.insecure is True
    assert t.total_timeout_s == 9


def test_cacert_reaches_the_tls_options(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(streaming)
    invoke(monkeypatch, s, HTTPS_URL, "--cacert", "/tmp/ca.pem")
    assert s.template is not None
    assert s.template.tls.cacert == "/tmp/ca.pem"


@pytest.mark.parametrize("flags", [["--cacert", "/tmp/ca.pem"], ["--insecure"], ["--max-tokens", "0"]])
def test_a_flag_that_would_not_apply_is_refused_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """--cacert and --insecure beside an http:// URL verify nothing; max_tokens 0 or below asks for no answer."""
    s = Scripted(streaming)
    code, out = invoke(monkeypatch, s, URL, *flags)
    assert code == 2, out
    assert flags[0] in out
    assert s.template is None
    assert s.asked == []


def test_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENPATH_URL", URL)
    s = Scripted(streaming)
    assert invoke(monkeypatch, s)[0] == 0
    assert s.asked == [URL]


def test_a_stub_behind_the_path_is_paced_and_an_endpoint_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(streaming, stub=True)
    invoke(monkeypatch, s, URL)
    assert [r.name for r in s.planned] == ["base", "slow", "large", "browser"]
    s = Scripted(unpaced_runs(), stub=False)
    code, out = invoke(monkeypatch, s, URL)
    assert code == 0
    assert [r.name for r in s.planned] == ["base", "browser"]
    assert "only the client's side varied" in out


def test_stub_url_is_checked_and_paces_the_series(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(streaming, stub=False)
    code, out = invoke(monkeypatch, s, URL, "--stub-url", "http://127.0.0.1:8")
    assert code == 2
    assert "http://127.0.0.1:8 does not answer" in out
    monkeypatch.setattr(measure, "is_stub", lambda url, timeout_s=2.0: url == "http://127.0.0.1:8")
    monkeypatch.setattr(measure, "run_series", s.run_series)
    assert CliRunner().invoke(app, ["diagnose", URL, "--stub-url", "http://127.0.0.1:8"]).exit_code == 0
    assert [r.name for r in s.planned] == ["base", "slow", "large", "browser"]


def test_held_exits_16_with_the_fix_and_json_keeps_stdout_a_document(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(whole, head=(("Server", "nginx/1.22.1"),))
    code, out = invoke(monkeypatch, s, URL)
    assert code == 16
    assert out.startswith(f"{URL}: holds the whole response")  # the verdict first
    assert "fix: proxy_buffering off;" in out
    assert "error" not in out  # a finding, not an error
    monkeypatch.setattr(measure, "run_series", s.run_series)
    result = CliRunner().invoke(app, ["diagnose", URL, "--json"])
    assert result.exit_code == 16
    doc = json.loads(result.stdout)
    assert doc["verdict"]["cause"] == "whole_response"


def test_proxy_flag_names_the_fix_and_takes_every_catalogue_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = invoke(monkeypatch, Scripted(whole), URL, "--proxy", "lighttpd")
    assert code == 16
    assert "fix: server.stream-response-body = 2" in out
    code, out = invoke(monkeypatch, Scripted(whole), URL, "--proxy", "squid")
    assert code == 16
    assert "fix: none measured" in out
    code, out = invoke(monkeypatch, Scripted(whole), URL, "--proxy", "nosuchproxy")
    assert code == 2
    assert "nosuchproxy" in out


def test_an_unnamed_proxy_gets_the_generic_fix_and_no_proxys_name(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = invoke(monkeypatch, Scripted(whole), URL)
    assert code == 16
    assert "in any proxy: turn response buffering off" in out
    assert "nginx" not in out


def test_unsure_exits_17(monkeypatch: pytest.MonkeyPatch) -> None:
    def model(name: str) -> RunFigures:
        return whole(name) if name == "slow" else streaming(name)

    code, out = invoke(monkeypatch, Scripted(model), URL)
    assert code == 17
    assert "unsure" in out
    assert "error" not in out


def test_a_hold_in_two_of_three_repeats_is_reported_intermittent_and_exits_16(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path that buffers base's stream the first and third time it is asked, every other stream never: the
    series disagrees, is measured again (base streams: still disagreeing), and again; base held in 2 of 3 is the
    verdict, with its fix line, not hidden behind the repeat that streamed."""
    calls: dict[str, int] = {}

    def model(name: str) -> RunFigures:
        calls[name] = calls.get(name, 0) + 1
        return whole(name) if name == "base" and calls[name] != 2 else streaming(name)

    code, out = invoke(monkeypatch, Scripted(model), URL, "--proxy", "nginx")
    assert code == 16, out
    first = out.splitlines()[0]
    assert "intermittent: holds in 2 of 3 runs (base); holds at least" in first
    assert "fix: " in out
    assert calls["base"] == 3
    assert "held repeats per run: base 2 of 3" in out


def test_a_closed_stdout_ends_quietly_with_the_verdicts_exit_code(tmp_path: object) -> None:
    """`diagnose URL | head -1` against a stub that holds nothing: exit 0 (not 1), nothing on stderr."""
    import subprocess
    import sys

    script = (
        "import sys; from tests.diagnose.test_cli import Scripted; from tests.diagnose.test_classify import whole;"
        "from tokenpath.diagnose import measure; s = Scripted(whole);"
        "measure.is_stub = s.is_stub; measure.run_series = s.run_series;"
        "from tokenpath.cli import app; sys.argv = ['tokenpath', 'diagnose', sys.argv[1]]; app()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, URL], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(ROOT)
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()  # as head -1 does once it has its line
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 16, err
    assert b"Error" not in err
    assert b"Broken pipe" not in err


def test_accept_encoding_and_api_and_http2_reach_the_series(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(streaming)
    code, out = invoke(monkeypatch, s, URL, "--accept-encoding", "browser", "--api", "anthropic", "--http2")
    assert code == 0, out
    assert s.template is not None
    assert s.template.api.value == "anthropic"
    assert s.template.http_version.value != "1.1"
    assert [r.accept_encoding for r in s.planned if r.name == "browser"] == ["gzip, deflate, br, zstd"]
    s = Scripted(streaming)
    assert invoke(monkeypatch, s, URL, "--accept-encoding", "identity")[0] == 0
    assert "browser" not in [r.name for r in s.planned]
    assert invoke(monkeypatch, Scripted(streaming), URL, "--h2-window", "default")[0] == 2


def test_no_url_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOKENPATH_URL", raising=False)
    assert invoke(monkeypatch, Scripted(streaming))[0] == 2


def test_a_stub_answering_as_a_real_origin_is_measured_again_as_a_plain_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind stock nginx, llama-cpp-python's preset: streamed by its X-Accel-Buffering alone (diagnose/origin.py);
    the origin's runs are the base schedule with the stub's `plain_origin` member."""
    s = Scripted(streaming, head=(("Server", "nginx/1.22.1"),))
    varied: list[dict[str, object]] = []

    def run_origin(template: ProbeConfig, runs: Sequence[OriginRun], *_: object) -> list[tuple[OriginRun, RunFigures]]:
        varied.extend(dict(r.member) for r in runs)
        model: dict[str, Model] = {PLAIN: whole, "only X-Accel-Buffering: no": streaming}
        return [(r, replace(model.get(r.name, whole)("base"), name=r.name)) for r in runs]

    monkeypatch.setattr(measure, "is_stub", s.is_stub)
    monkeypatch.setattr(measure, "run_series", s.run_series)
    monkeypatch.setattr(measure, "stub_origin", lambda url, timeout_s=2.0: PRESETS["llama-cpp-python"])
    monkeypatch.setattr(measure, "run_origin", run_origin)
    out = CliRunner().invoke(app, ["diagnose", URL])
    assert out.exit_code == 0
    assert varied == [
        {"plain_origin": True},
        {"plain_origin": True, "headers": {"X-Accel-Buffering": "no"}},
        {"plain_origin": True, "headers": {"Cache-Control": "no-store"}},
    ]
    assert (
        "origin: this path streams only because the origin sends X-Accel-Buffering: no; an origin that does not "
        "will be held: add proxy_buffering off;" in out.output
    )


def test_origin_runs_that_fail_leave_the_verdict_standing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stub dies (or the path cuts) during the origin's runs: the verdict measured stands, with a note."""
    s = Scripted(streaming, head=(("Server", "nginx/1.22.1"),))

    def run_origin(*_: object) -> list[tuple[OriginRun, RunFigures]]:
        raise PeerError("connection refused")

    monkeypatch.setattr(measure, "is_stub", s.is_stub)
    monkeypatch.setattr(measure, "run_series", s.run_series)
    monkeypatch.setattr(measure, "stub_origin", lambda url, timeout_s=2.0: PRESETS["llama-cpp-python"])
    monkeypatch.setattr(measure, "run_origin", run_origin)
    out = CliRunner().invoke(app, ["diagnose", URL])
    assert out.exit_code == 0, out.output
    assert "note: the origin's runs (a plain origin, each behaviour alone) failed: connection refused" in out.output
    assert "streams only because" not in out.output


def ws_invoke(
    monkeypatch: pytest.MonkeyPatch, scripted: Scripted, upgraded: bool, *args: str
) -> tuple[int, str, list[WsFallback]]:
    """diagnose with the upgrade scripted: carried (101) or refused (405, the fallback measured)."""
    policies: list[WsFallback] = []

    def tried(
        template: ProbeConfig, run: Run, probe: object, policy: WsFallback, bound_s: float | None = None
    ) -> UpgradeTried:
        assert template.transport == "websocket"
        assert bound_s == min(template.total_timeout_s, upgrade.UPGRADE_CHECK_S)  # the check's waits are bounded
        policies.append(policy)
        if upgraded:
            return UpgradeTried(WsFigures(True, 101, 1.0), policy)
        fell = WsFigures(False, 405, 1.0, attempts=policy.attempts, fell_back=True, fallback_ms=700.0)
        return UpgradeTried(WsFigures(False, 405, 1.0), policy, fell)

    monkeypatch.setattr(upgrade, "try_upgrade", tried)
    code, out = invoke(monkeypatch, scripted, URL, "--api", "responses", "--transport", "websocket", *args)
    return code, out, policies


def test_transport_websocket_runs_the_series_over_websocket_where_the_upgrade_is_carried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = Scripted(streaming)
    code, out, policies = ws_invoke(monkeypatch, s, True, "--json")
    assert code == 0, out
    assert s.template is not None
    assert s.template.transport == "websocket"
    assert "browser" not in [r.name for r in s.planned]  # no compressing client over WebSocket
    assert policies == [WsFallback(CODEX_ATTEMPTS)]  # Codex's policy unless told
    assert json.loads(out[out.index("{") : out.rindex("}") + 1])["websocket"]["carried"] is True


def test_a_refused_upgrade_exits_21_with_the_fallbacks_cost_and_the_series_over_sse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = Scripted(streaming, head=(("Server", "nginx/1.22.1"),))
    flags = ("--ws-fallback", "2", "--ws-retry-delay-ms", "10", "--ws-upgrade-timeout", "3")
    code, out, policies = ws_invoke(monkeypatch, s, False, *flags)
    assert code == 21, out
    assert s.template is not None
    assert s.template.transport == "sse"
    assert "browser" in [r.name for r in s.planned]  # the SSE series keeps its compressing client
    assert policies == [WsFallback(2, 10.0, 3.0)]  # --ws-fallback, --ws-retry-delay-ms, --ws-upgrade-timeout
    assert "websocket: not carried" in out
    assert "proxy_set_header Upgrade $http_upgrade" in out  # nginx's own line, from its head
    assert "fallback: 2 failed upgrades" in out


def test_the_upgrade_check_says_how_long_it_may_wait_before_it_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex's policy on a path that leaves every upgrade unanswered waits 6 x 15 s: said up front, with the bound."""
    said: list[str] = []

    def tried(
        template: ProbeConfig, run: Run, probe: object, policy: WsFallback, bound_s: float | None = None
    ) -> UpgradeTried:
        said.append(out_so_far.getvalue())
        return UpgradeTried(WsFigures(True, 101, 1.0), policy)

    out_so_far = io.StringIO()
    monkeypatch.setattr(upgrade, "try_upgrade", tried)
    monkeypatch.setattr(common.err_console, "_file", out_so_far)  # its own stream, unpinned after
    code, out = invoke(monkeypatch, Scripted(streaming), URL, "--api", "responses", "--transport", "websocket")
    assert code == 0, out
    assert "6 upgrades of up to 15 s each, 6.2 s of waits between them" in said[0]
    assert "waits at most 30 s on upgrades in all, a cost past that is said as 'at least'" in said[0]


def test_what_websocket_cannot_do_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = invoke(monkeypatch, Scripted(streaming), URL, "--transport", "websocket")
    assert code == 2
    assert "--transport" in out
    assert "--api" in out
    code, out = invoke(monkeypatch, Scripted(streaming), URL, "--ws-fallback", "2")
    assert code == 2
    assert "--transport websocket" in out
    argv = (URL, "--api", "responses", "--transport", "websocket")
    code, out = invoke(monkeypatch, Scripted(streaming), *argv, "--client", "chromium")
    assert code == 2
    assert "raw client" in out
    code, out = invoke(monkeypatch, Scripted(streaming), *argv, "--http2")
    assert code == 2
    assert "HTTP/1.1 upgrade" in out


def test_http3_and_its_window_reach_the_series(monkeypatch: pytest.MonkeyPatch) -> None:
    https = "https://127.0.0.1:9/v1/chat/completions"
    s = Scripted(streaming)
    code, out = invoke(monkeypatch, s, https, "--http3", "--h3-window", "browser")
    assert code == 0, out
    assert s.template is not None
    assert s.template.http_version is HttpVersion.HTTP3
    assert s.template.h3_window == BROWSER_H3_WINDOW


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("https://127.0.0.1:9/v1", "--h3-window", "browser"), "--h3-window is HTTP/3's"),
        (("https://127.0.0.1:9/v1", "--http3", "--http2"), "pick one HTTP version"),
        ((URL, "--http3"), "--http3 needs an https:// URL"),
        (("https://127.0.0.1:9/v1", "--http3", "--client", "chromium"), "--http3 is the raw client's"),
        (
            ("https://127.0.0.1:9/v1", "--http3", "--api", "responses", "--transport", "websocket"),
            "does not run over HTTP/3",
        ),
    ],
)
def test_what_http3_cannot_do_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], says: str
) -> None:
    s = Scripted(streaming)
    code, out = invoke(monkeypatch, s, *args)
    assert code == 2, out
    assert says in " ".join(out.split())
    assert s.template is None  # nothing ran


def test_an_accept_encoding_of_the_users_own_is_the_compressing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scripted(streaming)
    assert invoke(monkeypatch, s, URL, "--accept-encoding", "gzip")[0] == 0
    assert [r.accept_encoding for r in s.planned if r.name == "browser"] == ["gzip"]  # not the browser's default


def test_the_h2_window_reaches_the_series(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenpath.wire.h2client import BROWSER_WINDOW

    s = Scripted(streaming)
    assert invoke(monkeypatch, s, URL, "--http2", "--h2-window", "browser")[0] == 0
    assert s.template is not None
    assert s.template.h2_window == BROWSER_WINDOW


def test_client_chromium_runs_every_stream_of_the_series_in_the_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    """The series' probe is the browser's (started once for the series), never the raw socket's."""
    import contextlib

    from tokenpath.probe import browser

    started: list[ProbeConfig] = []
    streamed: list[tuple[object, ProbeConfig]] = []

    @contextlib.contextmanager
    def chromium(cfg: ProbeConfig) -> Iterator[str]:
        started.append(cfg)
        yield "the browser"

    def browser_stream(running: object, cfg: ProbeConfig) -> object:
        streamed.append((running, cfg))
        raise PeerError("scripted: no page")  # what a stream returns is the series' own business, not this test's

    monkeypatch.setattr(browser, "chromium", chromium)
    monkeypatch.setattr(browser, "browser_stream", browser_stream)
    s = Scripted(streaming)
    probes: list[object] = []

    def run_series(
        template: ProbeConfig, runs: Sequence[Run], probe: Callable[[ProbeConfig], object], *rest: object
    ) -> list[measure.Measured]:
        probes.append(probe)
        with pytest.raises(PeerError, match="scripted"):
            probe(template)
        return s.run_series(template, runs)

    monkeypatch.setattr(measure, "is_stub", s.is_stub)
    monkeypatch.setattr(measure, "run_series", run_series)
    monkeypatch.setattr(measure, "stub_origin", lambda url, timeout_s=2.0: None)
    out = CliRunner().invoke(app, ["diagnose", URL, "--client", "chromium"])
    assert out.exit_code == 0, out.output
    assert len(started) == 1
    assert [running for running, _ in streamed] == ["the browser"] * len(probes)
    assert "headless Chromium" in out.output


@pytest.mark.parametrize("given", ["Accept-Encoding: gzip", "accept-encoding:br"])
def test_an_accept_encoding_header_is_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """The series sets each run's Accept-Encoding (none, then the compressing client's): one given as a header is
    refused at once, naming the flag that says it, not after the identity runs were sent compressed."""
    s = Scripted(streaming)
    code, out = invoke(monkeypatch, s, URL, "--header", given)
    assert code == 2
    assert "--accept-encoding" in out
    assert "sets each run's Accept-Encoding itself" in out
    assert "given twice" not in out
    assert s.asked == []  # nothing asked of the path: not its health ...
    assert s.planned == []  # ... not a run
