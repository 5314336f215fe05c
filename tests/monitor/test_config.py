from __future__ import annotations

from pathlib import Path

import pytest

from tokenpath.errors import UsageError
from tokenpath.monitor.config import from_dict, load

TARGET = {"name": "edge", "url": "http://127.0.0.1:9/v1"}


def test_defaults_apply_to_every_target_and_a_target_overrides_them() -> None:
    cfg = from_dict({
        "monitor": {"interval_s": 7, "metrics_listen": "127.0.0.1:0"},
        "defaults": {"model": "m1", "max_tokens": 8, "idle_timeout_s": 3.5},
        "target": [TARGET, {"name": "b", "url": "http://127.0.0.1:10", "model": "m2", "interval_s": 2}],
    })  # fmt: skip
    a, b = cfg.targets
    assert (a.interval_s, b.interval_s) == (7, 2)
    assert a.routes["via"].model == "m1"
    assert b.routes["via"].model == "m2"
    assert a.routes["via"].max_tokens == 8
    assert a.routes["via"].idle_timeout_s == 3.5
    assert a.routes["via"].target.path == "/v1/chat/completions"
    assert list(a.routes) == ["via"]
    assert cfg.metrics_host_port == ("127.0.0.1", 0)


def test_a_direct_url_adds_a_route_with_the_same_request() -> None:
    cfg = from_dict({"target": [{**TARGET, "direct_url": "http://127.0.0.1:11", "headers": {"X-A": "1"},
                                 "body": {"temperature": 0}}]})  # fmt: skip
    via, direct = cfg.targets[0].routes["via"], cfg.targets[0].routes["direct"]
    assert direct.url == "http://127.0.0.1:11"
    assert (direct.headers, direct.extra_body, direct.model) == (via.headers, via.extra_body, via.model)
    assert via.headers == (("X-A", "1"),)
    assert via.extra_body == (("temperature", 0),)


def test_the_api_key_comes_from_the_environment_and_is_never_shown() -> None:
    cfg = from_dict({"target": [{**TARGET, "api_key_env": "K"}]}, env={"K": "sekrit"})
    probe = cfg.targets[0].routes["via"]
    assert probe.api_key == "sekrit"
    assert "sekrit" not in repr(cfg)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"target": [TARGET], "montor": {}}, "unknown key(s) ['montor']"),
        ({"target": [{**TARGET, "urll": "x"}]}, "unknown key(s) ['urll']"),
        ({"monitor": {"intervl_s": 1}, "target": [TARGET]}, "unknown key(s) ['intervl_s']"),
        ({"monitor": {"interval_s": "5s"}, "target": [TARGET]}, "`interval_s` must be a number"),
        ({"monitor": {"interval_s": 0.01}, "target": [TARGET]}, "between 0.1 and 86400"),
        ({"monitor": {"jitter": 0.9}, "target": [TARGET]}, "`jitter`"),
        ({"monitor": {"max_concurrency": 0}, "target": [TARGET]}, "`max_concurrency`"),
        ({"monitor": {"metrics_listen": "9465"}, "target": [TARGET]}, "expected HOST:PORT"),
        ({"target": [{**TARGET, "max_tokens": "8"}]}, "`max_tokens` must be a whole number"),
        ({"target": [{**TARGET, "insecure": "yes"}]}, "`insecure` must be true or false"),
        ({"target": [{**TARGET, "headers": ["X: y"]}]}, "`headers` must be a table"),
        ({"target": [{**TARGET, "headers": {"X": "a\r\nB: c"}}]}, "line break"),
        ({"target": [{**TARGET, "url": "ftp://h"}]}, "expected http:// or https://"),
        ({"target": [{**TARGET, "direct_url": "http://127.0.0.1:9/v1/chat/completions"}]}, "same endpoint"),
        ({"target": [{**TARGET, "api_key_env": "NOPE"}]}, "NOPE: that environment variable is not set"),
        ({"target": [{**TARGET, "cacert": "/nonexistent.pem"}]}, "no such file"),
        ({"target": [{**TARGET, "first_byte_timeout_s": 0}]}, "must be a number of seconds > 0"),
        ({"target": [{**TARGET, "name": "a b"}]}, "use letters, digits"),
        ({"target": [TARGET, TARGET]}, "unique: ['edge']"),
        ({"target": []}, "no [[target]]"),
        ({}, "no [[target]]"),
        ({"defaults": {"url": "http://x"}, "target": [TARGET]}, "`url` belongs to each [[target]]"),
    ],
)
def test_mistakes_are_refused_before_any_probe(data: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=__import__("re").escape(message)):
        from_dict(data, env={})


def test_a_file_that_is_not_toml_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text("[[target]\nname=")
    with pytest.raises(UsageError, match="monitor config"):
        load(bad)
    with pytest.raises(UsageError, match="No such file"):
        load(tmp_path / "missing.toml")


def test_the_shipped_example_loads() -> None:
    example = Path(__file__).parents[2] / "examples" / "monitoring" / "monitor.toml"
    cfg = load(example, env={"OPENAI_API_KEY": "x"})
    assert cfg.targets


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"target": [{**TARGET, "total_timeout_s": 1e300}]},
         "target 'edge': `total_timeout_s` must be a number of seconds > 0 and <= 3600, not 1e+300"),
        ({"target": [{**TARGET, "connect_timeout_s": INF}]}, "`connect_timeout_s` must be a number of seconds > 0"),
        ({"target": [{**TARGET, "first_byte_timeout_s": NAN}]}, "`first_byte_timeout_s` must be a number of seconds"),
        ({"target": [{**TARGET, "idle_timeout_s": 3601}]}, "`idle_timeout_s` must be a number of seconds > 0 and <="),
        ({"target": [{**TARGET, "max_tokens": 10**12}]}, "`max_tokens` must be between 1 and 1e+06"),
        ({"target": [{**TARGET, "max_tokens": 0}]}, "`max_tokens` must be between 1 and"),
        ({"target": [{**TARGET, "interval_s": NAN}]}, "target 'edge': `interval_s` must be between 0.1 and 86400"),
        ({"monitor": {"interval_s": 1e300}, "target": [TARGET]}, "`interval_s` must be between 0.1 and 86400"),
        ({"monitor": {"jitter": NAN}, "target": [TARGET]}, "`jitter` must be between 0 and 0.5"),
        ({"monitor": {"coalescing_window": 10**15}, "target": [TARGET]}, "`coalescing_window` must be between 1"),
        ({"monitor": {"otlp_interval_s": INF}, "target": [TARGET]}, "`otlp_interval_s` must be between 0.1"),
        ({"monitor": {"max_concurrency": 10**9}, "target": [TARGET]}, "`max_concurrency` must be between 1 and 256"),
    ],
)  # fmt: skip
def test_every_number_is_bounded_and_finite_at_start(data: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=__import__("re").escape(message)):
        from_dict(data, env={})


def test_the_bounds_themselves_are_taken() -> None:
    cfg = from_dict({"target": [{**TARGET, "total_timeout_s": 3600, "connect_timeout_s": 0.001, "max_tokens": 1}]})
    assert cfg.targets[0].routes["via"].total_timeout_s == 3600


@pytest.mark.parametrize("name", ["a\n", "a\r\n", "\na", "a b"])
def test_a_target_name_with_a_line_break_is_refused(name: str) -> None:
    with pytest.raises(UsageError, match="use letters, digits"):
        from_dict({"target": [{**TARGET, "name": name}]}, env={})


@pytest.mark.parametrize("key", ["sk-abc\r", "sk abc", "sk-abc\u2013dash", "sk-abc\r\nX-Injected: yes"])
def test_a_key_a_header_cannot_carry_is_refused_at_start_unshown(key: str) -> None:
    """A key read from a CRLF .env file passed the start, then failed every probe (outcome `usage`) for ever."""
    with pytest.raises(UsageError, match="a request header cannot carry") as refused:
        from_dict({"target": [{**TARGET, "api_key_env": "K"}]}, env={"K": key})
    assert "sk" not in str(refused.value).replace("`api_key_env`", "")


def test_a_cacert_that_is_no_pem_is_refused_at_start(tmp_path: Path) -> None:
    """It was checked only to exist: every probe then failed with `[X509: NO_CERTIFICATE_OR_CRL_FOUND]`."""
    garbage = tmp_path / "bad.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(UsageError, match=r"^target 'edge': `cacert` .*bad\.pem"):
        from_dict({"target": [{**TARGET, "url": "https://127.0.0.1:9/v1", "cacert": str(garbage)}]})
