from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tokenpath.audit import StreamLog
from tokenpath.errors import ProxyError, UsageError
from tokenpath.experiment.spec import ExclusionRule, load, parse, stub_pacing
from tokenpath.proxies.attached import AttachedProxy
from tokenpath.stub.config import MAX_FRAME_BYTES, MAX_TOKENS, Pacing

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_examples_load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # examples/real-endpoint.toml and https-endpoint.toml read their endpoint from the environment
    (tmp_path / "ca.pem").write_text("a CA")
    for name, value in {"TOKENPATH_URL": "https://api.example.com/v1", "TOKENPATH_MODEL": "some-model",
                        "OPENAI_API_KEY": "sk-x", "TOKENPATH_API_KEY": "sk-y",
                        "TOKENPATH_CACERT": str(tmp_path / "ca.pem")}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    for path in EXAMPLES.glob("*.toml"):
        exp = load(path)
        assert exp.paths[0].proxy == "direct"
        assert exp.conditions


def test_conditions_are_the_cross_product() -> None:
    conditions = {"interval_ms": [14, 50], "frame_bytes": [60, 1100], "link": ["loopback", "veth"], "tls": [False]}
    exp = parse({"conditions": conditions, "proxy": [{"name": "haproxy", "variants": ["stock", "http_no_delay"]}]})
    assert len(exp.conditions) == 8
    assert [p.label for p in exp.paths] == ["direct", "haproxy", "haproxy (http_no_delay)"]
    assert exp.runs == 10
    assert "max(2 ms, 20 % of the interval)" in exp.exclusion.describe()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"speed": 1}, "unknown keys"),
        ({"proxy": [{"name": "nginx", "variants": ["turbo"]}]}, "no variant 'turbo'"),
        ({"proxy": [{"name": "nosuchproxy"}]}, "no proxy 'nosuchproxy'"),
        ({"proxy": [{"name": "x", "command": "socat -"}]}, "{listen}"),
        ({"conditions": {"link": ["wifi"]}}, "link"),
        ({"conditions": {"frame_bytes": [2]}}, "frame_bytes"),
        ({"conditions": {"interval_ms": []}}, "must not be empty"),
        ({"runs": 0}, "runs"),
        ({"exclusion": {"tolerance_ms": -1}}, "tolerance_ms"),
    ],
)
def test_bad_experiments_say_what_is_wrong(data: dict[str, object], message: str) -> None:
    with pytest.raises(Exception, match=message) as info:
        parse(data)
    assert isinstance(info.value, UsageError | Exception)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("runs = [")
    with pytest.raises(UsageError, match=r"bad\.toml: not valid TOML"):
        load(bad)
    with pytest.raises(UsageError, match="cannot read"):
        load(tmp_path / "missing.toml")


def test_an_empty_file_is_refused_not_run_as_direct_alone(tmp_path: Path) -> None:
    """An empty file (or comments only) measured the direct path alone for a minute, the wrong file unsaid."""
    empty = tmp_path / "empty.toml"
    for text in ("", "# to do\n\n"):
        empty.write_text(text)
        with pytest.raises(UsageError, match=r"empty\.toml: empty: name the paths"):
            load(empty)
    empty.write_text("runs = 2\n")  # a direct-only run asked for is still one
    assert [p.label for p in load(empty).paths] == ["direct"]


def test_custom_proxy_command_placeholders() -> None:
    exp = parse(
        {"proxy": [{"name": "socat", "command": "socat TCP-LISTEN:{listen_port},bind={listen_host} TCP:{upstream}"}]}
    )
    assert exp.paths[1].proxy == "socat"
    from tokenpath.proxies.base import Endpoint, Site

    site = Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), Path("/tmp"))
    assert exp.proxy("socat").argv(site, Path()) == ["socat", "TCP-LISTEN:9001,bind=127.0.0.1", "TCP:127.0.0.1:8000"]


def test_the_declared_tolerance_is_the_rule_applied() -> None:
    """Two writes 0.07 and 0.47 ms late: kept by the default rule, excluded by a declared 0.001 ms."""
    log = StreamLog.from_json({"stream_id": "s", "interval_ms": 50.0, "started_ns": 0, "state": "complete",
                               "writes": [[0, 0, 70_000, 60], [1, 50_000_000, 50_470_000, 60]]})  # fmt: skip
    assert ExclusionRule().judge(log).passed is True
    strict = ExclusionRule(0.001).judge(log)
    assert strict.passed is False
    assert strict.late_writes == 2
    assert strict.tolerance_ms == 0.001  # results.json shows the rule applied beside the figures
    assert strict.drift_max_ms == 0.47


def test_stub_headers_are_a_condition_axis() -> None:
    exp = parse({"conditions": {"interval_ms": [50], "stub_headers": [{}, {"X-Accel-Buffering": "no"}]}})
    assert [c.stub_headers for c in exp.conditions] == [(), (("X-Accel-Buffering", "no"),)]
    assert exp.conditions[1].label == "60 B @ 50 ms, loopback, stub sends X-Accel-Buffering: no"
    with pytest.raises(UsageError, match="set by the server"):
        parse({"conditions": {"stub_headers": [{"Content-Length": "5"}]}})
    with pytest.raises(UsageError, match="printable"):
        parse({"conditions": {"stub_headers": [{"X-A": "a\r\nSet-Cookie: x"}]}})


def test_an_attached_path_carries_what_its_requests_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path already running (`url`) takes the same request keys as a command target: its key is sent (it was
    checked and stored, never sent)."""
    from tokenpath.proxies.base import Endpoint, Site

    monkeypatch.setenv("SVC_KEY", "k-456")
    entry = {"name": "svc", "url": "http://127.0.0.1:9", "model": "svc::m", "headers": {"X-Team": "a"},
             "api_key_env": "SVC_KEY", "base_path": "/api/v1"}  # fmt: skip
    proxy = parse({"proxy": [entry]}).proxy("svc")
    site = Site(Endpoint("127.0.0.1", 9), Endpoint("127.0.0.1", 8000), Path("/tmp"))
    assert proxy.api_key(site) == "k-456"
    assert proxy.request_model("tokenpath-stub") == "svc::m"
    assert proxy.request_headers(site) == (("X-Team", "a"),)
    assert proxy.base_path == "/api/v1"


def test_a_command_target_carries_what_its_requests_need(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenpath.proxies.base import Endpoint, Site

    monkeypatch.setenv("GW_KEY", "k-123")
    entry = {"name": "gw", "command": "gw --listen {listen} --to {upstream}", "model": "tz::m",
             "headers": {"X-Route": "openai"}, "api_key_env": "GW_KEY", "base_path": "/openai/v1/"}  # fmt: skip
    exp = parse({"proxy": [entry]})
    proxy = exp.custom["gw"]
    site = Site(Endpoint("127.0.0.1", 9001), Endpoint("127.0.0.1", 8000), Path("/tmp"))
    assert proxy.request_model("tokenpath-stub") == "tz::m"
    assert proxy.request_headers(site) == (("X-Route", "openai"),)
    assert proxy.api_key(site) == "k-123"
    assert proxy.base_path == "/openai/v1"
    bad: tuple[tuple[dict[str, object], str], ...] = (
        ({"name": "nginx", "model": "m"}, "go with a `command` target"),
        ({"name": "gw", "command": "gw {listen} {upstream}", "api_key_env": "UNSET_KEY_VAR"}, "is not set"),
        ({"name": "gw", "command": "gw {listen} {upstream}", "headers": {"X": 1}}, "table of strings"),
        ({"name": "gw", "command": "gw {listen} {upstream}", "base_path": "v1"}, "must start with /"),
    )
    for wrong, message in bad:
        with pytest.raises(UsageError, match=message):
            parse({"proxy": [wrong]})


# --- a real endpoint: upstream = "$TOKENPATH_URL" -------------------------------------------------------------------


def test_an_upstream_url_from_the_environment_fronts_every_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EP_URL", "https://api.example.com/v1")
    monkeypatch.setenv("EP_KEY", "sk-secret")
    exp = parse({
        "upstream": {"url": "$EP_URL", "model": "m1", "api_key_env": "EP_KEY", "max_tokens": 9},
        "proxy": [{"name": "nginx"}], "conditions": {"tls": [False, True]},
    })  # fmt: skip
    assert exp.endpoint is not None
    assert exp.endpoint.url == "https://api.example.com/v1/chat/completions"
    assert exp.endpoint.via("http://127.0.0.1:9000") == "http://127.0.0.1:9000/v1/chat/completions"
    assert exp.endpoint.api_key() == "sk-secret"
    tls = exp.endpoint.upstream_tls()
    assert tls is not None
    assert tls.server_name == "api.example.com"
    assert tls.cacert is None  # the system store
    assert [c.label for c in exp.conditions] == [
        "endpoint https://api.example.com, loopback", "endpoint https://api.example.com, loopback, tls",
    ]  # fmt: skip
    document = exp.to_json()
    assert document["upstream"]["declared"] == "$EP_URL"
    assert document["upstream"]["audited"] is False
    assert "sk-secret" not in str(document)


def test_an_upstream_string_is_its_url_and_braces_expand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EP_HOST", "gpu-box:8000")
    with pytest.raises(UsageError, match="needs model"):
        parse({"upstream": "http://${EP_HOST}/v1"})
    exp = parse({"upstream": {"url": "http://${EP_HOST}/v1", "model": "m"}})
    assert exp.endpoint is not None
    assert exp.endpoint.target.origin == "http://gpu-box:8000"
    assert exp.endpoint.upstream_tls() is None
    assert exp.endpoint.max_tokens == 64  # bounded: every stream costs tokens


@pytest.mark.parametrize(
    ("upstream", "conditions", "message"),
    [
        ({"url": "$EP_UNSET", "model": "m"}, {}, r"\$EP_UNSET is not set"),
        ({"url": "https://h/v1", "model": "m", "api_key_env": "EP_UNSET"}, {}, "EP_UNSET: that environment"),
        ({"url": "https://h/v1", "model": "m", "colour": 1}, {}, "unknown keys"),
        ({"url": "ftp://h/v1", "model": "m"}, {}, "expected http"),
        ({"url": "http://h/v1", "model": "m", "cacert": "/etc/hostname"}, {}, "cacert is for an https"),
        ({"url": "https://h/v1", "model": "m", "cacert": "/no/such.pem"}, {}, "no such file"),
        ({"url": "https://h/v1", "model": "m", "max_tokens": 0}, {}, "max_tokens"),
        ({"url": "https://h/v1", "model": "m"}, {"interval_ms": [14]}, "paces its own stream"),
        ({"url": "https://h/v1", "model": "m"}, {"stub_headers": [{"X-A": "b"}]}, "paces its own stream"),
        ({"url": "https://h/v1", "model": "m"}, {"link": ["loopback", "veth"]}, "only loopback"),
        ({"url": "https://h/v1", "model": "m", "frames": 0}, {}, "unknown keys"),
        (42, {}, "URL string or an"),
    ],
)
def test_a_bad_upstream_is_refused_before_anything_runs(
    upstream: object, conditions: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        parse({"upstream": upstream, "conditions": conditions})


def test_a_path_already_running_is_declared_by_its_url() -> None:
    exp = parse({"stub": {"listen": "0.0.0.0:8000"},
                 "proxy": [{"name": "svc", "url": "http://svc:8080", "version": "x:1", "model": "m2"}]})  # fmt: skip
    assert exp.stub_listen is not None
    assert exp.stub_listen.hostport == "0.0.0.0:8000"
    proxy = exp.proxy("svc")
    assert proxy.attached
    assert proxy.version() == "x:1"
    assert proxy.request_model("tokenpath-stub") == "m2"
    assert exp.to_json()["attached_paths"] == {"svc": "http://svc:8080"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"proxy": [{"name": "a", "url": "http://a:1", "command": "x {listen} {upstream}"}]}, "no command or variants"),
        ({"proxy": [{"name": "a", "url": "ftp://a:1"}]}, "must be http://HOST:PORT or https://HOST:PORT"),
        ({"proxy": [{"name": "a", "url": "http://a:1", "cacert": __file__}]}, "cacert is for an https url"),
        ({"proxy": [{"name": "a", "url": "https://a:1", "cacert": "/nonexistent/ca.pem"}]}, "cacert .*: no such file"),
        ({"proxy": [{"name": "nginx", "cacert": __file__}]}, "cacert goes with an https `url`"),
        ({"proxy": [{"name": "a", "url": "http://a"}]}, "must be http://HOST:PORT"),
        ({"proxy": [{"name": "a", "url": "http://a:1/v1"}]}, "must be http://HOST:PORT"),
        ({"stub": {"listen": "8000"}}, r"\[stub\] listen must be HOST:PORT"),
        ({"stub": {"listen": "h:99999"}}, r"\[stub\] listen must be HOST:PORT"),
        ({"stub": {"port": 1}}, "unknown keys"),
    ],
)
def test_bad_attached_paths_and_stub_addresses_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises((UsageError, ProxyError), match=message):  # load() reports both as the file's error
        parse(data)


def test_frames_is_the_stubs_and_refused_against_an_endpoint() -> None:
    with pytest.raises(UsageError, match="max_tokens bounds each stream"):
        parse({"upstream": {"url": "https://h/v1", "model": "m"}, "frames": 10})


def test_an_attached_path_may_be_a_tls_ingress_with_its_own_ca() -> None:
    """Issue 21: `url = "https://..."` with `cacert`: measured in the TLS conditions, checked against that CA."""
    exp = parse({"proxy": [{"name": "ingress", "url": "https://127.0.0.1:8443", "cacert": __file__}],
                 "conditions": {"tls": [True, False]}})  # fmt: skip
    proxy = exp.proxy("ingress")
    assert isinstance(proxy, AttachedProxy)
    assert proxy.https
    assert proxy.cacert == str(Path(__file__).resolve())
    assert not proxy.tls_unsupported  # it terminates TLS itself
    assert "tls = true" in proxy.plain_unsupported  # and is skipped, saying so, where the condition is plain
    assert exp.to_json()["attached_paths"] == {"ingress": "https://127.0.0.1:8443"}


def test_the_websocket_table_is_the_client_s_fallback_policy() -> None:
    """`[websocket]`: Codex's policy by default (6 upgrades, 200 ms doubling, then SSE); `fallback = 0` none."""
    from tokenpath.probe.wsfallback import CODEX_ATTEMPTS, NO_FALLBACK, WsFallback

    ws = {"conditions": {"api": "responses", "transport": ["sse", "websocket"]}}
    assert parse({}).ws_fallback == WsFallback(CODEX_ATTEMPTS)
    exp = parse({**ws, "websocket": {"fallback": 2, "retry_delay_ms": 50}})
    assert exp.ws_fallback == WsFallback(2, 50)
    assert exp.to_json()["websocket"] == {"attempts": 2, "retry_delay_ms": 50, "upgrade_timeout_s": 15.0}
    assert parse({**ws, "websocket": {"fallback": 0}}).ws_fallback == NO_FALLBACK
    with pytest.raises(UsageError, match=r"\[websocket\]: unknown key"):
        parse({**ws, "websocket": {"attempts": 2}})
    with pytest.raises(UsageError, match=r"\[websocket\] must be a table"):
        parse({**ws, "websocket": 3})


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"fallback": 0, "retry_delay_ms": 50}, "retry_delay_ms with fallback = 0: nothing falls back"),
        ({"fallback": 0, "upgrade_timeout_s": 3}, "upgrade_timeout_s with fallback = 0"),
        ({"fallback": 1, "retry_delay_ms": 50}, "retry_delay_ms with fallback = 1: no upgrade is tried again"),
    ],
)
def test_a_websocket_key_the_policy_never_uses_is_refused(table: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse({"conditions": {"api": "responses", "transport": ["websocket"]}, "websocket": table})
    assert parse({"conditions": {"api": "responses", "transport": ["websocket"]}, "websocket": {"fallback": 1}})


def test_a_websocket_table_without_a_websocket_condition_is_refused() -> None:
    with pytest.raises(UsageError, match="no condition has transport"):
        parse({"websocket": {"fallback": 2}})
    with pytest.raises(UsageError, match="no condition has transport"):  # realtime has no SSE to fall back to
        parse({"conditions": {"api": "realtime", "transport": "websocket"}, "websocket": {"fallback": 2}})


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "svc", "url": "http://127.0.0.1:9", "version_command": "svc --version"},
        {"name": "gw", "command": "gw {listen} {upstream}", "version": "gw 1.0"},
        {"name": "nginx", "version": "1.99"},
        {"name": "nginx", "version_command": "nginx -v"},
    ],
)
def test_a_version_key_that_would_not_be_read_is_refused(entry: dict[str, object]) -> None:
    """Each kind of path reads one of the two (they were dropped in silence: the report said "unknown")."""
    with pytest.raises(UsageError, match="is not read here"):
        parse({"proxy": [entry]})


def test_each_kind_of_path_reads_its_own_version_key() -> None:
    svc = {"name": "svc", "url": "http://127.0.0.1:9", "version": "svc 2.0"}
    gw = {"name": "gw", "command": "gw {listen} {upstream}", "version_command": "echo gw 3.0"}
    exp = parse({"proxy": [svc, gw]})
    assert exp.proxy("svc").version() == "svc 2.0"
    assert exp.proxy("gw").version() == "gw 3.0"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        (f"frames = {MAX_TOKENS + 1}", "frames"),
        ("frames = 9223372036854775807", "frames"),
        (f"[conditions]\nframe_bytes = [{MAX_FRAME_BYTES + 1}]", "frame_bytes"),
        ("[conditions]\nframe_bytes = [100000000000]\napi = 'anthropic'", "frame_bytes"),
        # Not planned (no keep-alive, pause or held head): bounded all the same, as the stub bounds every request.
        (f"frames = {MAX_TOKENS}\n[conditions]\ninterval_ms = [50]", "the stream would run"),
        (f"frames = {MAX_TOKENS}\n[conditions]\ninterval_ms = [1]\nframe_bytes = [1100]", "x frame_bytes"),
    ],
)
def test_a_stream_the_stub_would_refuse_fails_the_file(tmp_path: Path, toml: str, key: str) -> None:
    """Past the stub's limits every stream would be a 400 and the matrix would end with no valid runs: the file
    fails at load, in one line that names it and the key."""
    with pytest.raises(UsageError, match=rf"^{tmp_path / 'exp.toml'}: .*{key}") as info:
        load(write(tmp_path, toml))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("frames", "conditions"), [(MAX_TOKENS, {"interval_ms": [1]}), (2, {"frame_bytes": [MAX_FRAME_BYTES]})]
)
def test_a_stream_at_the_stubs_limits_is_accepted_by_the_file_and_the_stub(
    frames: int, conditions: dict[str, object]
) -> None:
    exp = parse({"frames": frames, "conditions": conditions})
    for cond in exp.conditions:
        Pacing.from_json(stub_pacing(cond, exp.frames, exp.ttft_ms).to_json())  # the stub's own check of a request


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "true", "0", "-1", '"x"', "[1]"])
def test_a_tolerance_that_is_not_a_positive_time_fails_the_file(tmp_path: Path, value: str) -> None:
    with pytest.raises(UsageError, match=r"exp\.toml: \[exclusion\] tolerance_ms: .* is not allowed"):
        load(write(tmp_path, f"[exclusion]\ntolerance_ms = {value}"))


@pytest.mark.parametrize("value", ['"abc"', "[1]", "-5", "nan", "inf", "true"])
def test_a_ttft_that_is_not_a_time_fails_the_file(tmp_path: Path, value: str) -> None:
    with pytest.raises(UsageError, match=r"exp\.toml: ttft_ms: .* is not allowed"):
        load(write(tmp_path, f"ttft_ms = {value}"))


def test_a_ttft_of_zero_and_a_whole_tolerance_are_numbers() -> None:
    exp = parse({"ttft_ms": 0, "exclusion": {"tolerance_ms": 3}})
    assert (exp.ttft_ms, exp.exclusion.tolerance_ms) == (0.0, 3.0)


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match=r"binary\.toml: not UTF-8 text"):
        load(path)


def test_a_name_must_be_a_string(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"exp\.toml: name must be a string"):
        load(write(tmp_path, "name = 5"))


def test_a_replayed_recording_with_a_bad_source_is_named_so(tmp_path: Path) -> None:
    recording = json.loads((EXAMPLES / "origins" / "llama-server.chat.json").read_text())
    (tmp_path / "bad.json").write_text(json.dumps({**recording, "source": "xy"}))
    toml = '[conditions]\norigin = ["replay:bad.json"]'
    with pytest.raises(UsageError, match=r"exp\.toml: \[conditions\] origin: recording .*bad\.json: .*source"):
        load(write(tmp_path, toml))


CMD = "socat TCP-LISTEN:{listen_port},bind={listen_host} TCP:{upstream}"


@pytest.mark.parametrize(
    ("proxies", "said"),
    [
        ([{"name": "pass"}, {"name": "pass"}], "path 'pass' is declared twice"),  # its runs joined one row
        ([{"name": "nginx", "variants": ["stock", "stock"]}], "path 'nginx' is declared twice"),
        ([{"name": "c", "url": "http://127.0.0.1:9"}, {"name": "c", "url": "http://127.0.0.1:10"}], "'c' is declared"),
        ([{"name": "nginx (http_1_1)", "command": CMD}, {"name": "nginx", "variants": ["http_1_1"]}], "declared twice"),
        ([{"name": "nginx", "command": CMD}, {"name": "nginx", "variants": ["http_1_1"]}], "'nginx' names two"),
        ([{"name": "direct", "command": CMD}], "'direct' is a name tokenpath measures itself"),  # taken as the floor
        ([{"name": "cork", "url": "http://127.0.0.1:9"}], "'cork' is a name"),  # replaced the certified control
        ([{"name": "h3-buffer", "command": CMD}], "'h3-buffer' is a name"),
        ([{"name": "x\nx-injected: {image: evil}", "command": CMD}], "one printable line"),  # a compose key
        ([{"name": "cork\x1b[2J", "command": CMD}], "one printable line"),  # cleared the terminal
        ([{"name": "", "command": CMD}], "one printable line of 1 to 100"),
        ([{"name": "n" * 101, "command": CMD}], "one printable line of 1 to 100"),
    ],
)
def test_each_path_is_named_once_and_plainly(proxies: list[dict[str, Any]], said: str) -> None:
    with pytest.raises(UsageError, match=re.escape(said)):
        parse({"proxy": proxies})


def test_a_custom_path_beside_catalogue_ones_is_still_taken() -> None:
    exp = parse({"proxy": [{"name": "mine", "command": CMD}, {"name": "nginx", "variants": ["stock", "http_1_1"]}]})
    assert [p.label for p in exp.paths] == ["direct", "mine", "nginx", "nginx (http_1_1)"]


def test_runs_are_bounded() -> None:
    assert parse({"runs": 1000}).runs == 1000
    with pytest.raises(UsageError, match=r"runs must be a whole number from 1 to 1000 \(streams per path"):
        parse({"runs": 1001})


def test_an_upstream_header_named_as_a_key_header_beside_its_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", "sk-x")
    upstream = {"url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "UPSTREAM_KEY"}
    with pytest.raises(UsageError, match="x-api-key is given twice"):
        parse({"upstream": {**upstream, "headers": {"x-api-key": "y"}}})
    assert parse({"upstream": {**upstream, "headers": {"X-Team": "y"}}}).endpoint is not None


def test_an_exclusion_tolerance_past_a_minute_is_refused() -> None:
    """1e300 was taken: nothing was ever excluded."""
    with pytest.raises(UsageError, match=r"tolerance_ms: 1e\+300 is not allowed \(a positive number of ms up to 60000"):
        parse({"exclusion": {"tolerance_ms": 1e300}})
    assert parse({"exclusion": {"tolerance_ms": 60_000}}).exclusion.tolerance_ms == 60_000
