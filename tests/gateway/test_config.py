"""Gateway configuration: the shipped example loads; mistakes are refused with where they are."""

from __future__ import annotations

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
