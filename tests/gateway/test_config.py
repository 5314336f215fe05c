"""Gateway configuration: the shipped example loads; mistakes are refused with where they are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tokenpath.errors import UsageError
from tokenpath.gateway import config

EXAMPLE = Path(__file__).parents[2] / "examples" / "gateway" / "gateway.toml"


def test_the_shipped_example_loads() -> None:
    cfg = config.load(EXAMPLE)
    assert [p.name for p in cfg.pools] == ["small", "hosted", "large", "default"]
    assert cfg.pools[2].claims == ("pro",)
    assert not cfg.pools[-1].claims  # the catch-all, last: open to every token
    assert cfg.pools[-1].models == ("*",)
    assert cfg.pools[0].strategy == "p2c_ewma"
    hosted = cfg.pools[1]
    assert hosted.protocol == "h2"
    assert hosted.members[0].tls
    assert hosted.members[0].authority == "models.example.com"  # no default port in Host / :authority
    assert hosted.members[0].base_path == "/openai"
    assert cfg.pools[0].members[1].weight == 2
    assert cfg.auth.algorithms == ("HS256",)
    assert cfg.auth.pool_claim == "tier"
    assert cfg.listen_host == "127.0.0.1"
    assert cfg.workers == 2
    assert cfg.metrics_port == 9464
    assert cfg.limits.keepalive_interval_s < cfg.limits.idle_timeout_s


def test_the_readmes_table_of_the_gateways_limits_is_their_defaults() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    rows = re.findall(r"^  \| `(\w+_s)` \| ([\d.]+) \|", readme, re.MULTILINE)
    stated = {name: float(value) for name, value in rows}
    timeouts = {name for name in vars(config.Limits()) if name.endswith("timeout_s") and name != "header_timeout_s"}
    assert set(stated) == timeouts | {"keepalive_interval_s"}
    assert stated == {name: getattr(config.Limits(), name) for name in stated}


def test_defaults_bind_loopback_and_pick_safe_algorithms() -> None:
    cfg = config.from_dict({"auth": {"public_key_file": "k.pem"}, "pool": [{"member": [{"url": "http://h:1"}]}]})
    assert cfg.listen_host == "127.0.0.1"
    assert "HS256" not in cfg.auth.algorithms
    assert "RS256" in cfg.auth.algorithms
    hs = config.from_dict({"auth": {"secret_env": "X"}, "pool": [{"member": [{"url": "http://h:1"}]}]})
    assert set(hs.auth.algorithms) == {"HS256", "HS384", "HS512"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"auth": {"mode": "none"}}, "no pool"),
        ({"auth": {"mode": "none"}, "pool": [{"member": []}]}, "has no member"),
        ({"auth": {"mode": "none"}, "pool": [{"member": [{"url": "ftp://h"}]}]}, "expected http(s)://HOST[:PORT]"),
        ({"auth": {"mode": "none"}, "pool": [{"member": [{"url": "http://h:x"}]}]}, "port is not a number"),
        ({"auth": {"mode": "none"}, "pool": [{"protocol": "h3", "member": [{"url": "http://h:1"}]}]}, "http1 or h2"),
        (
            {"auth": {"mode": "none"}, "pool": [{"ca_file": "/nonexistent/ca.pem", "member": [{"url": "https://h"}]}]},
            "no such file: /nonexistent/ca.pem",
        ),
        (
            {"auth": {"mode": "none"}, "pool": [{"client_key": "/k.pem", "member": [{"url": "https://h"}]}]},
            "client_key without client_cert",
        ),
        ({"auth": {"mode": "none"}, "pool": [{"member": [{"url": "http://h:1", "weight": 0}]}]}, "weight"),
        ({"auth": {"mode": "none"}, "pool": [{"strategy": "random", "member": [{"url": "http://h:1"}]}]}, "strategy"),
        ({"auth": {"mode": "none", "colour": 1}}, "unknown key(s) ['colour']"),
        ({"auth": {"mode": "none"}, "limit": {}}, "unknown key(s) ['limit']"),
        ({"auth": {"mode": "none"}, "listen": "8080"}, "expected HOST:PORT"),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"max_body_bytes_in_flight": 1000},
                "pool": [{"member": [{"url": "http://h:1"}]}],
            },
            "max_body_bytes_in_flight must be >= max_body_bytes",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"keepalive_interval_s": -1},
                "pool": [{"member": [{"url": "http://h"}]}],
            },
            "limits: `keepalive_interval_s` must be a number of seconds >= 0 and <= 3600 (0: no keep-alives)",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"keepalive_interval_s": float("nan")},
                "pool": [{"member": [{"url": "http://h"}]}],
            },
            "`keepalive_interval_s` must be a number of seconds >= 0",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"keepalive_interval_s": 60, "idle_timeout_s": 60},
                "pool": [{"member": [{"url": "http://h:1"}]}],
            },
            "keepalive_interval_s (60) must be below idle_timeout_s (60)",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"ws_ping_interval_s": 0},
                "pool": [{"member": [{"url": "http://h:1"}]}],
            },
            "`ws_ping_interval_s` must be a number of seconds > 0",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"ws_max_fragments": 0},
                "pool": [{"member": [{"url": "http://h:1"}]}],
            },
            "`ws_max_fragments` must be a whole number >= 1",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"ws_session_s": -1},
                "pool": [{"member": [{"url": "http://h:1"}]}],
            },
            "`ws_session_s` must be a number of seconds >= 0",
        ),
        ({"pool": [{"member": [{"url": "http://h:1"}]}]}, "exactly one key source"),
        (
            {"auth": {"jwks_url": "http://k", "algorithms": ["none"]}, "pool": [{"member": [{"url": "http://h:1"}]}]},
            "choose from",
        ),
        (  # was taken for "not written" and the key source's defaults allowed
            {"auth": {"jwks_url": "http://k", "algorithms": []}, "pool": [{"member": [{"url": "http://h:1"}]}]},
            "auth algorithms []: choose from",
        ),
        (  # was let through: a claim named "" picked a pool whenever a token carried one
            {
                "auth": {"secret_env": "X", "pool_claim": ""},
                "pool": [{"claims": ["pro"], "member": [{"url": "http://h:1"}]}],
            },
            "auth `pool_claim` is empty",
        ),
    ],
)
def test_mistakes_are_refused_with_a_clear_message(data: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=__import__("re").escape(message)):
        config.from_dict(data)


def test_a_missing_or_broken_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="No such file"):
        config.load(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("listen = ")
    with pytest.raises(UsageError, match=r"bad\.toml"):
        config.load(bad)


def test_keepalives_are_on_by_default_and_the_gateways_own_limits_let_a_model_think() -> None:
    """The defaults' reasons (config.Limits), held: keep-alives reset a 60 s idle timer in front (AWS ALB, nginx)
    three times or more; the idle limit outlasts minutes of silent thinking yet ends before the openai and
    anthropic SDKs' own read timeout; 0 turns keep-alives off, and any interval below the idle limit is taken."""
    import anthropic
    import openai

    limits = config.Limits()
    assert 0 < limits.keepalive_interval_s <= 60 / 3
    assert limits.idle_timeout_s >= 300
    sdk_read_timeouts = [openai.DEFAULT_TIMEOUT.read, anthropic.DEFAULT_TIMEOUT.read]
    assert all(t is not None and limits.idle_timeout_s < t for t in sdk_read_timeouts), sdk_read_timeouts
    assert limits.keepalive_interval_s < limits.idle_timeout_s <= limits.total_timeout_s
    pool = [{"member": [{"url": "http://h:1"}]}]
    for every in (0, 0.25, 299.9):
        cfg = config.from_dict({"auth": {"mode": "none"}, "limits": {"keepalive_interval_s": every}, "pool": pool})
        assert cfg.limits.keepalive_interval_s == every
    # An idle limit below the default interval is taken as it was: the gateway is then the shortest idle timer on
    # the path, and only an interval the file sets is held to being below it.
    cfg = config.from_dict({"auth": {"mode": "none"}, "limits": {"idle_timeout_s": 4}, "pool": pool})
    assert cfg.limits.keepalive_interval_s == 15


# A value each numeric key could never be used with: not finite, of the wrong type, out of its range. Whole-number keys
# are also given a fraction and a bool; the walk below fails for a key that NUMBER_RULES has no rule for.
NUMBER_TABLES = {
    "limits": config.Limits,
    "health": config.HealthConfig,
    "auth": config.AuthConfig,
    "member": config.Member,
    "": config.GatewayConfig,
}


def _bad_values(rule: config.Rule) -> list[object]:
    bad: list[object] = [float("nan"), float("inf"), float("-inf"), -1, rule.high * 2 + 1, True, "1"]
    if rule.whole:
        bad.append(rule.low + 0.5)
    if rule.off is None:
        bad.append(rule.low if rule.above else rule.low - 1)
    return [v for v in bad if not (v == 0 and rule.off is not None)]


def _config_with(table: str, key: str, value: object) -> config.GatewayConfig:
    """A config valid but for `key` = `value`, built as the quick flags build one (then validate), which is also what
    from_dict ends in."""
    member = config.Member("http://127.0.0.1:1")
    auth = config.AuthConfig(jwks_url="https://idp.example/jwks", algorithms=("RS256",))
    top: dict[str, Any] = {}
    given: dict[str, Any] = {key: value}
    if table == "member":
        member = config.Member("http://127.0.0.1:1", **given)
    elif table == "auth":
        auth = config.AuthConfig(**{**auth.__dict__, **given})
    elif table == "limits":
        top["limits"] = config.Limits(**given)
    elif table == "health":
        top["health"] = config.HealthConfig(**given)
    else:
        top.update(given)
    return config.GatewayConfig(pools=(config.PoolConfig("p", (member,)),), auth=auth, **top)


def test_every_numeric_key_of_every_table_has_a_rule_and_a_bad_value_is_refused_naming_it() -> None:
    """One rule per key (config.NUMBER_RULES): nan first_byte_timeout_s made every request a 500, connect_timeout_s
    -1 every one a 504, max_streams 0 every one a 503, leeway_s nan took tokens a year past their exp. Each key,
    given each value it could never be used with, is refused in one line that names its table and itself; its
    default is taken."""
    walked = 0
    for table, cls in NUMBER_TABLES.items():
        keys = config.numeric_keys(cls)
        assert keys, table
        assert set(keys) == set(config.NUMBER_RULES[table]), f"[{table}]: a numeric key without its rule, or stale"
        for key in keys:
            rule = config.NUMBER_RULES[table][key]
            for value in _bad_values(rule):
                with pytest.raises(UsageError, match=re.escape(f"`{key}` must be {rule.describe()}, not {value!r}")):
                    _config_with(table, key, value).validate()
                walked += 1
    assert walked > 150
    _config_with("", "workers", 1).validate()  # every default is in its range


@pytest.mark.parametrize(
    ("table", "key", "value"),
    [
        ("limits", "first_byte_timeout_s", "nan"),
        ("limits", "connect_timeout_s", -1),
        ("limits", "write_buffer_bytes", -1),
        ("limits", "header_timeout_s", -5),
        ("limits", "max_streams", 0),
        ("limits", "max_body_bytes", -1),
        ("limits", "retry_after_s", -3),
        ("limits", "max_streams", 2.5),
        ("health", "eject_after", 0),
        ("health", "cooldown_s", -10),
        ("health", "active_interval_s", "nan"),
        ("health", "active_interval_s", -1),
        ("auth", "leeway_s", "nan"),
        ("auth", "leeway_s", "inf"),
        ("auth", "leeway_s", 1e12),
        ("auth", "leeway_s", -1e9),
        ("auth", "leeway_s", 301),
        ("auth", "jwks_ttl_s", "nan"),
        ("auth", "jwks_ttl_s", 0),
        ("auth", "jwks_ttl_s", -1),
        ("auth", "jwks_min_refresh_s", 0),
        ("auth", "jwks_min_refresh_s", 0.5),
    ],
)
def test_a_toml_value_out_of_range_is_refused_in_one_line(table: str, key: str, value: object) -> None:
    """The reviewer's files, as TOML would give them (nan and inf as floats)."""
    if isinstance(value, str):
        value = float(value)
    data: dict[str, object] = {
        "auth": {"jwks_url": "https://idp.example/jwks", "algorithms": ["RS256"]},
        "pool": [{"name": "p", "member": [{"url": "http://127.0.0.1:1"}]}],
    }
    data[table] = {**data.get(table, {}), key: value}  # type: ignore[dict-item]
    with pytest.raises(UsageError, match=rf"{table}\]?: `{key}` must be ") as caught:  # "[limits]": the file's type
        config.from_dict(data)
    assert "\n" not in str(caught.value)


def test_leeway_is_clock_skew_minutes_at_most_and_the_jwks_timers_are_at_least_a_second() -> None:
    rules = config.NUMBER_RULES["auth"]
    assert (rules["leeway_s"].low, rules["leeway_s"].high) == (0, 300)
    assert rules["jwks_min_refresh_s"].low == 1
    pool = [{"name": "p", "member": [{"url": "http://127.0.0.1:1"}]}]
    jwks = {"jwks_url": "https://idp.example/jwks", "algorithms": ["RS256"]}
    for leeway in (0, 0.5, 300):
        assert config.from_dict({"auth": {**jwks, "leeway_s": leeway}, "pool": pool}).auth.leeway_s == leeway
    ok = config.from_dict({"auth": {**jwks, "jwks_ttl_s": 1, "jwks_min_refresh_s": 1}, "pool": pool})
    assert (ok.auth.jwks_ttl_s, ok.auth.jwks_min_refresh_s) == (1, 1)
    with pytest.raises(UsageError, match=r"`jwks_ttl_s` \(5\) must be >= `jwks_min_refresh_s` \(10\)"):
        config.from_dict({"auth": {**jwks, "jwks_ttl_s": 5}, "pool": pool})


@pytest.mark.parametrize(
    ("url", "taken"),
    [
        ("https://idp.example/.well-known/jwks.json", True),
        ("http://127.0.0.1:9/jwks", True),
        ("http://127.1.2.3/jwks", True),
        ("http://[::1]:9/jwks", True),
        ("http://localhost:9/jwks", True),
        ("http://idp.example/jwks", False),
        ("http://10.0.0.1/jwks", False),
        ("http://localhost.evil.example/jwks", False),
        ("file:///etc/jwks.json", False),
        ("ftp://idp.example/jwks", False),
        ("data:application/json,{}", False),
        ("https:///jwks", False),
    ],
)
def test_the_signing_keys_come_over_https_or_from_this_host(url: str, taken: bool) -> None:
    """Over plain http anyone on the path can substitute the signing keys (and so sign any token)."""
    data = {"auth": {"jwks_url": url, "algorithms": ["RS256"]}, "pool": [{"member": [{"url": "http://h:1"}]}]}
    if taken:
        assert config.from_dict(data).auth.jwks_url == url
        return
    with pytest.raises(UsageError, match=r"auth: `jwks_url` .*expected https://.*loopback host \(127\.0\.0\.0/8, ::1"):
        config.from_dict(data)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://admin:pw@127.0.0.1:1", "credentials in a member URL"),
        ("http://admin@127.0.0.1:1/v1", "credentials in a member URL"),
        ("http://127.0.0.1:1/base?token=membersecret", "a query or fragment"),
        ("http://127.0.0.1:1/base?", "a query or fragment"),
        ("http://127.0.0.1:1/base#frag", "a query or fragment"),
    ],
)
def test_a_member_url_with_credentials_a_query_or_a_fragment_is_refused_without_printing_them(
    url: str, says: str
) -> None:
    """userinfo was never sent (no Basic auth) and then shown in the metrics label, the access log and /health; a
    query was dropped in silence."""
    data = {"auth": {"mode": "none"}, "pool": [{"name": "p", "member": [{"url": url}]}]}
    with pytest.raises(UsageError, match=f"pool 'p': member .*{re.escape(says)}.*`api_key_env`") as caught:
        config.from_dict(data)
    assert "pw" not in str(caught.value)
    assert "membersecret" not in str(caught.value)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"workers": "2"}, "`workers` must be a whole number, not '2'"),
        ({"workers": True}, "`workers` must be a whole number, not True"),
        ({"workers": 0}, "`workers` must be a whole number >= 1"),
        ({"listen": 8080}, "`listen` must be a string, not 8080"),
        ({"metrics_listen": 9464}, "`metrics_listen` must be a string"),
        ({"tls_cert": 5, "tls_key": 5}, "`tls_cert` must be a string, not 5"),
        ({"request_id_header": 5}, "`request_id_header` must be a string, not 5"),
        ({"pool": {"member": []}}, "`pool` must be an array of tables"),
    ],
)
def test_a_top_level_key_of_the_wrong_type_is_a_usage_error_not_a_traceback(data: dict[str, object], says: str) -> None:
    base: dict[str, object] = {"auth": {"mode": "none"}, "pool": [{"member": [{"url": "http://h:1"}]}]}
    with pytest.raises(UsageError, match=re.escape(says)):
        config.from_dict({**base, **data})


@pytest.mark.parametrize(
    "name",
    [
        "X-Id: 1\r\nX-Injected: yes\r\nX-Req",
        "X-Id\n",
        "X Id",
        "",
        "X-Idé",
        "Authorization",
        "host",
        "Connection",
        "Transfer-Encoding",
        "Content-Length",
        "x-api-key",
        "X-Forwarded-For",
        "Cookie",
        "Upgrade",
    ],
)
def test_request_id_header_is_a_header_name_the_gateway_does_not_own(name: str) -> None:
    """It is written raw on the upstream request and the client's response: CR/LF there injected headers, and a
    framing or credential name would overwrite the header that carries them."""
    data = {"auth": {"mode": "none"}, "request_id_header": name, "pool": [{"member": [{"url": "http://h:1"}]}]}
    with pytest.raises(UsageError, match=r"^gateway config: `request_id_header` ") as caught:
        config.from_dict(data)
    assert "\n" not in str(caught.value).replace(repr(name), "")


def test_request_id_header_takes_any_other_token() -> None:
    for name in ("X-Request-Id", "X-Trace-Token", "x_amzn_trace_id", "Request-Id"):
        data = {"auth": {"mode": "none"}, "request_id_header": name, "pool": [{"member": [{"url": "http://h:1"}]}]}
        assert config.from_dict(data).request_id_header == name


@pytest.mark.parametrize("weight", [0, 1001, 2_000_000, 1.5, True])
def test_a_weight_is_a_whole_number_up_to_1000(weight: object) -> None:
    """Each unit of weight is an entry of the round-robin ring: 2e6 took 1.2 s to build, larger ran out of memory."""
    data = {"auth": {"mode": "none"}, "pool": [{"name": "p", "member": [{"url": "http://h:1", "weight": weight}]}]}
    says = r"(pool 'p': member 'http://h:1'|\[pool 0 member\]): `weight` must be a whole"
    with pytest.raises(UsageError, match=says):
        config.from_dict(data)
    data["pool"][0]["member"][0]["weight"] = 1000  # type: ignore[index]
    assert config.from_dict(data).pools[0].members[0].weight == 1000


@pytest.mark.parametrize("key", ["audience", "issuer"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_audience_or_issuer_is_refused(key: str, value: str) -> None:
    """An empty audience matched no token: every request was a 401."""
    data = {"auth": {"secret_env": "S", key: value}, "pool": [{"member": [{"url": "http://h:1"}]}]}
    with pytest.raises(UsageError, match=f"auth: `{key}` "):
        config.from_dict(data)
