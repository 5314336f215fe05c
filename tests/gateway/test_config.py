"""Gateway configuration: the shipped example loads; mistakes are refused with where they are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokenpath.errors import UsageError
from tokenpath.gateway import config

EXAMPLE = Path(__file__).parents[2] / "examples" / "gateway" / "gateway.toml"


def test_the_shipped_example_loads() -> None:
    cfg = config.load(EXAMPLE)
    assert [p.name for p in cfg.pools] == ["small", "hosted", "large"]
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
            "keepalive_interval_s must be a number of seconds >= 0 (0: no keep-alives)",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"keepalive_interval_s": float("nan")},
                "pool": [{"member": [{"url": "http://h"}]}],
            },
            "keepalive_interval_s must be a number of seconds >= 0",
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
            "ws_ping_interval_s must be a number > 0",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"ws_max_fragments": 0},
                "pool": [{"member": [{"url": "http://h:1"}]}],
            },
            "ws_max_fragments must be >= 1",
        ),
        (
            {
                "auth": {"mode": "none"},
                "limits": {"ws_session_s": -1},
                "pool": [{"member": [{"url": "http://h:1"}]}],
            },
            "ws_session_s must be a number of seconds >= 0",
        ),
        ({"pool": [{"member": [{"url": "http://h:1"}]}]}, "exactly one key source"),
        (
            {"auth": {"jwks_url": "http://k", "algorithms": ["none"]}, "pool": [{"member": [{"url": "http://h:1"}]}]},
            "choose from",
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
