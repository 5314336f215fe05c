"""`tokenpath gateway`'s flags reach the GatewayConfig it runs (the server replaced by a recorder), and a flag that
would not be read is refused: --strategy without --upstream (a file's pools say their own), and a JWT setting beside
no authentication (flag or file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tokenpath.cli import app
from tokenpath.errors import UsageError
from tokenpath.gateway import config, server

UPSTREAM = "http://127.0.0.1:9/v1"


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(server, "run", lambda cfg, announce, loop, log_level: calls.append((cfg, loop, log_level)))
    return calls


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["gateway", *args], env={"COLUMNS": "300"})


def test_every_flag_reaches_the_config(tmp_path: Path, ran: list[tuple[Any, ...]]) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    key.write_text("k")
    cert.write_text("c")
    out = run("--listen", "127.0.0.1:8181", "--upstream", UPSTREAM, "--upstream", "http://127.0.0.1:10/v1",
              "--strategy", "p2c_ewma", "--jwt-secret-env", "GW_SECRET", "--audience", "aud", "--issuer", "iss",
              "--workers", "3", "--metrics-listen", "127.0.0.1:9191", "--tls-cert", str(cert), "--tls-key", str(key),
              "--loop", "asyncio", "--log-level", "warning")  # fmt: skip
    assert out.exit_code == 0, out.output
    ((cfg, loop, log_level),) = ran
    assert (cfg.listen_host, cfg.listen_port) == ("127.0.0.1", 8181)
    (pool,) = cfg.pools
    assert [m.url for m in pool.members] == [UPSTREAM, "http://127.0.0.1:10/v1"]
    assert pool.strategy == "p2c_ewma"
    assert (cfg.auth.mode, cfg.auth.secret_env, cfg.auth.audience, cfg.auth.issuer) == (
        "jwt",
        "GW_SECRET",
        "aud",
        "iss",
    )
    assert cfg.workers == 3
    assert (cfg.metrics_host, cfg.metrics_port) == ("127.0.0.1", 9191)
    assert (cfg.tls_cert, cfg.tls_key) == (str(cert), str(key))
    assert (loop, log_level) == ("asyncio", "warning")


@pytest.mark.parametrize(
    ("flag", "field", "value"),
    [("--jwt-public-key", "public_key_file", "/etc/gw/key.pem"), ("--jwks-url", "jwks_url", "https://idp/jwks")],
)
def test_each_key_source_reaches_the_config(flag: str, field: str, value: str, ran: list[tuple[Any, ...]]) -> None:
    out = run("--upstream", UPSTREAM, flag, value)
    assert out.exit_code == 0, out.output
    assert getattr(ran[0][0].auth, field) == value


def test_no_auth_reaches_the_config_and_overrides_the_files_auth(tmp_path: Path, ran: list[tuple[Any, ...]]) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'[auth]\nsecret_env = "GW_SECRET"\n[[pool]]\nname = "p"\n[[pool.member]]\nurl = "{UPSTREAM}"\n')
    assert run("--config", str(path)).exit_code == 0
    assert run("--config", str(path), "--no-auth").exit_code == 0
    assert [cfg.auth.mode for cfg, _, _ in ran] == ["jwt", "none"]


def test_strategy_without_upstream_is_refused(tmp_path: Path, ran: list[tuple[Any, ...]]) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'[auth]\nmode = "none"\n[[pool]]\nname = "p"\n[[pool.member]]\nurl = "{UPSTREAM}"\n')
    for strategy in ("p2c_ewma", "round_robin"):  # typed at its default too: as unread as any other value
        out = run("--config", str(path), "--strategy", strategy)
        assert out.exit_code == 2, out.output
        assert "--strategy is not read without --upstream" in out.output
    assert ran == []


def test_a_files_key_is_named_as_the_file_spells_it_and_a_flag_as_typed(
    tmp_path: Path, ran: list[tuple[Any, ...]]
) -> None:
    """Two key sources: the file's stay its keys (`public_key_file` was shown as --jwt-public-key, a flag not
    typed); one given by its flag on this call is named as that flag."""
    path = tmp_path / "gateway.toml"
    member = f'[[pool]]\nname = "p"\n[[pool.member]]\nurl = "{UPSTREAM}"\n'
    path.write_text(f'[auth]\nsecret_env = "GW_SECRET"\npublic_key_file = "/k.pem"\n{member}')
    out = run("--config", str(path))
    assert out.exit_code == 2, out.output
    assert "(`secret_env`, `public_key_file` or `jwks_url`)" in out.output
    path.write_text(f'[auth]\nsecret_env = "GW_SECRET"\n{member}')
    out = run("--config", str(path), "--jwt-public-key", "/k.pem")
    assert out.exit_code == 2, out.output
    assert "(`secret_env`, --jwt-public-key or `jwks_url`)" in out.output
    out = run("--upstream", UPSTREAM, "--jwt-secret-env", "GW_SECRET", "--jwt-public-key", "/k.pem")  # no file
    assert "(--jwt-secret-env, --jwt-public-key or --jwks-url)" in out.output
    assert ran == []


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--jwt-secret-env", "GW_SECRET"), "--jwt-secret-env"),
        (("--jwt-public-key", "/k.pem"), "--jwt-public-key"),
        (("--jwks-url", "https://idp/jwks"), "--jwks-url"),
        (("--audience", "a", "--issuer", "i"), "--audience, --issuer"),
    ],
)
def test_a_jwt_flag_beside_no_auth_is_refused(flags: tuple[str, ...], named: str, ran: list[tuple[Any, ...]]) -> None:
    out = run("--upstream", UPSTREAM, "--no-auth", *flags)
    assert out.exit_code == 2, out.output
    assert f"{named} with auth mode none" in out.output
    assert ran == []


@pytest.mark.parametrize("field", config.JWT_ONLY)
def test_a_jwt_setting_in_a_file_with_mode_none_is_refused(field: str) -> None:
    value: object = ["HS256"] if field == "algorithms" else 7.0 if field.endswith("_s") else "x"
    data = {"auth": {"mode": "none", field: value}, "pool": [{"name": "p", "member": [{"url": UPSTREAM}]}]}
    with pytest.raises(UsageError, match=f"`{field}` with auth mode none"):
        config.from_dict(data)


@pytest.mark.parametrize(
    ("pool", "extra", "says"),
    [
        ({"ca_file": __file__}, {}, "`ca_file` with no https member"),
        ({"client_cert": __file__}, {}, "`client_cert` with no https member"),
        ({"claims": ["gold"]}, {}, "`claims` without auth `pool_claim`"),  # (on one pool they guard it: read)
        ({"models": ["*"]}, {}, "`models` with one pool"),  # written at its default value: as unread
        ({}, {"health": {"active_path": "/healthz"}}, "`active_path` with `active_interval_s` 0"),
        ({"models": ["gpt-*"]}, {}, "`models` with one pool: every request goes to it"),
        ({}, {"auth": {"secret_env": "S", "jwks_ttl_s": 60}}, "`jwks_ttl_s` without `jwks_url`"),
        (
            {},
            {"auth": {"public_key_file": __file__, "algorithms": ["RS256"], "jwks_min_refresh_s": 1}},
            "`jwks_min_refresh_s` without `jwks_url`",
        ),
    ],
)
def test_a_pool_or_health_setting_that_would_never_be_used_is_refused(
    pool: dict[str, object], extra: dict[str, object], says: str
) -> None:
    data = {"auth": {"mode": "none"}, "pool": [{"name": "p", "member": [{"url": UPSTREAM}], **pool}], **extra}
    with pytest.raises(UsageError, match=says):
        config.from_dict(data)


def test_the_same_settings_where_they_are_used_are_accepted() -> None:
    https = "https://127.0.0.1:9/v1"
    pools = [{"name": "p", "member": [{"url": https}], "ca_file": __file__, "claims": ["gold"]},
             {"name": "rest", "member": [{"url": UPSTREAM}]}]  # fmt: skip
    cfg = config.from_dict({"auth": {"secret_env": "S", "pool_claim": "tier"}, "pool": pools,
                            "health": {"active_path": "/healthz", "active_interval_s": 5}})  # fmt: skip
    assert cfg.pools[0].ca_file == __file__
    assert cfg.health.active_path == "/healthz"
    two = [
        {"name": "big", "member": [{"url": UPSTREAM}], "models": ["gpt-*"]},
        {"name": "rest", "member": [{"url": UPSTREAM}]},
    ]
    assert config.from_dict({"auth": {"mode": "none"}, "pool": two}).pools[0].models == ("gpt-*",)
    jwks = config.from_dict({"auth": {"jwks_url": "http://127.0.0.1:9/jwks", "algorithms": ["RS256"], "jwks_ttl_s": 60,
                                      "jwks_min_refresh_s": 1}, "pool": two[1:]})  # fmt: skip
    assert (jwks.auth.jwks_ttl_s, jwks.auth.jwks_min_refresh_s) == (60, 1)
    # `claims` on the only pool: it serves only those tokens (the others are a 403), so they are read
    one = config.from_dict({"auth": {"secret_env": "S", "pool_claim": "tier"},
                            "pool": [{"name": "p", "member": [{"url": UPSTREAM}], "claims": ["gold"]}]})  # fmt: skip
    assert one.pools[0].claims == ("gold",)


def test_a_pool_key_from_an_unset_variable_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's api_key_env is read for every request: unset, every request went upstream without a key."""
    from tokenpath.gateway.app import GatewayApp
    from tokenpath.gateway.auth import Authenticator

    monkeypatch.delenv("GW_POOL_KEY", raising=False)
    cfg = config.from_dict({"auth": {"mode": "none"}, "pool": [{"name": "p", "member": [{"url": UPSTREAM}],
                                                                  "api_key_env": "GW_POOL_KEY"}]})  # fmt: skip
    with pytest.raises(UsageError, match="`api_key_env` GW_POOL_KEY: that environment variable is empty"):
        GatewayApp(cfg, Authenticator(cfg.auth))
    monkeypatch.setenv("GW_POOL_KEY", "k")
    GatewayApp(cfg, Authenticator(cfg.auth))


def test_an_unset_pool_key_is_refused_before_any_worker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """With workers the app is made in each worker: the parent checks first, so the user reads a usage error, not a
    worker that failed."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the server started")

    monkeypatch.setattr(server, "Server", started)
    monkeypatch.delenv("GW_POOL_KEY", raising=False)
    pools = [{"name": "p", "member": [{"url": UPSTREAM}], "api_key_env": "GW_POOL_KEY"}]
    cfg = config.from_dict({"auth": {"mode": "none"}, "workers": 2, "listen": "127.0.0.1:0", "pool": pools})
    with pytest.raises(UsageError, match="`api_key_env` GW_POOL_KEY: that environment variable is empty"):
        server.run(cfg, lambda line: None)


def test_claims_without_pool_claim_are_refused() -> None:
    pools = [
        {"name": "p", "member": [{"url": UPSTREAM}], "claims": ["gold"]},
        {"name": "q", "member": [{"url": UPSTREAM}]},
    ]
    with pytest.raises(UsageError, match="`claims` without auth `pool_claim`"):
        config.from_dict({"auth": {"mode": "none"}, "pool": pools})


def test_a_pool_claim_that_no_pool_lists_is_refused() -> None:
    pools = [{"name": "p", "member": [{"url": UPSTREAM}]}]
    with pytest.raises(UsageError, match="`pool_claim` 'tier' with no pool's `claims`: it picks no pool"):
        config.from_dict({"auth": {"secret_env": "S", "pool_claim": "tier"}, "pool": pools})


@pytest.mark.parametrize("first", [{}, {"models": ["*"]}, {"models": ["llama-*", "*"]}])
def test_models_after_a_catch_all_pool_are_refused(first: dict[str, object]) -> None:
    """The first pool whose patterns match takes the model; one that says none (or `*`) takes every model, so a
    later pool's patterns are never tried."""
    pools = [{"name": "all", "member": [{"url": UPSTREAM}], **first},
             {"name": "gpt", "member": [{"url": UPSTREAM}], "models": ["gpt-*"]}]  # fmt: skip
    with pytest.raises(UsageError, match="pool 'gpt': `models` after pool 'all', whose patterns"):
        config.from_dict({"auth": {"mode": "none"}, "pool": pools})
    cfg = config.from_dict({"auth": {"mode": "none"}, "pool": pools[::-1]})  # the catch-all last: read
    assert [p.name for p in cfg.pools] == ["gpt", "all"]


@pytest.mark.parametrize(
    ("auth", "says"),
    [({"mode": "none", "leeway_s": 30.0}, "`leeway_s` with auth mode none"),  # its default value, written
     ({"secret_env": "S", "jwks_ttl_s": 300.0}, "`jwks_ttl_s` without `jwks_url`")],  # its default, written
)  # fmt: skip
def test_a_key_written_at_its_default_value_is_a_setting_too(auth: dict[str, object], says: str) -> None:
    """A key the file writes is a setting its user expects read, whatever its value (as a flag typed is)."""
    with pytest.raises(UsageError, match=says):
        config.from_dict({"auth": auth, "pool": [{"name": "p", "member": [{"url": UPSTREAM}]}]})
