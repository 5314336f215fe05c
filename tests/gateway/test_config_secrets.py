"""What a deployment's secrets meet at start (a hostile review's findings, 2026-12-07): a pool key a header cannot
carry, a secret given where its variable's name goes, a public key as the HS secret, credentials in the JWKS URL, an
encrypted mTLS key or a CA file that is no PEM are each refused at start in one line that never shows the secret;
the JWKS URL's query is masked in log lines; a bug's log line never holds the string it failed on."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tokenpath.errors import UsageError
from tokenpath.gateway import config
from tokenpath.gateway.auth import Authenticator
from tokenpath.gateway.config import AuthConfig
from tokenpath.gateway.failures import MAX_BUG_CHARS, bug_text
from tokenpath.gateway.jwks import JWKSCache
from tokenpath.gateway.server import GatewayServer
from tokenpath.gateway.tls import client_context
from tokenpath.serve.tlscert import self_signed

MEMBER = {"url": "http://127.0.0.1:9"}
KEY = "sk-live-0123456789"


def pool_with_key(monkeypatch: pytest.MonkeyPatch, key: str) -> config.GatewayConfig:
    monkeypatch.setenv("GW_TEST_POOL_KEY", key)
    return config.from_dict(
        {"auth": {"mode": "none"}, "pool": [{"name": "a", "api_key_env": "GW_TEST_POOL_KEY", "member": [MEMBER]}]}
    )


@pytest.mark.parametrize(
    ("key", "position"),
    [
        ("sk-abc\u2013dash", 7),  # an en dash a copy-paste gave: every request was a 500, the head in its log line
        ("sk-abc\r\nX-Injected: yes", 7),  # a header of its own in every upstream request
        ("sk-abc\r", 7),  # a key read from a CRLF .env file
        ("sk abc", 3),
        ("sk-abc\x7f", 7),
    ],
)
def test_a_pool_key_a_header_cannot_carry_is_refused_at_start_unshown(
    monkeypatch: pytest.MonkeyPatch, key: str, position: int
) -> None:
    cfg = pool_with_key(monkeypatch, key)
    with pytest.raises(UsageError) as refused:
        config.check_pool_keys(cfg)
    message = str(refused.value)
    assert "GW_TEST_POOL_KEY" in message
    assert f"at position {position} of {len(key)}" in message
    assert "sk-abc" not in message
    assert "sk abc" not in message


def test_a_pool_key_of_visible_ascii_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    config.check_pool_keys(pool_with_key(monkeypatch, "sk-proj_AZaz09.~+/="))


@pytest.mark.parametrize("where", ["secret_env", "api_key_env"])
@pytest.mark.parametrize("name", ["Zx9-my-actual-secret-value", "9LIVES", "MY KEY", ""])
def test_a_value_that_is_no_variable_name_is_refused_unshown(where: str, name: str) -> None:
    """The name of the variable goes there; a value that is not a name is most likely the secret itself."""
    pool: dict[str, Any] = {"name": "a", "member": [MEMBER]}
    auth: dict[str, Any] = {"algorithms": ["HS256"]}
    (auth if where == "secret_env" else pool)[where] = name
    if where == "api_key_env":
        auth = {"mode": "none"}
    with pytest.raises(UsageError) as refused:
        config.from_dict({"auth": auth, "pool": [pool]})
    assert "not an environment variable's name" in str(refused.value)
    assert not name or name not in str(refused.value)


def test_an_empty_audience_or_issuer_flag_is_refused_not_dropped() -> None:
    """`--audience ''` was dropped in silence (and a file's audience kept): refused as the file's own empty one is."""
    empty = {"audience": config.Overrides(audience=""), "issuer": config.Overrides(issuer="")}
    for key, flag in empty.items():
        flags = dataclasses.replace(flag, upstreams=("http://127.0.0.1:9",), secret_env="GW_SECRET")
        with pytest.raises(UsageError, match=f"an empty {key} matches no token"):
            config.from_dict(flags.apply({}))
        written = {"auth": {"secret_env": "GW_SECRET", key: "from-the-file"}, "pool": [{"member": [MEMBER]}]}
        with pytest.raises(UsageError, match=f"an empty {key} matches no token"):
            config.from_dict(flag.apply(written))


def test_a_public_key_given_as_the_shared_secret_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyJWT refuses it per token (every request a 401): refused at start instead, naming the variable only."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    public = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    monkeypatch.setenv("GW_TEST_PEM_SECRET", public)
    with pytest.raises(UsageError) as refused:
        Authenticator(AuthConfig(secret_env="GW_TEST_PEM_SECRET", algorithms=("HS256",)))
    assert "GW_TEST_PEM_SECRET" in str(refused.value)
    assert "public_key_file" in str(refused.value)
    assert "BEGIN" not in str(refused.value)


def test_credentials_in_the_jwks_url_are_refused_unshown() -> None:
    """urllib takes user:password@ for part of the host: such a URL never fetched, and was printed whole."""
    url = "http://user:PASSWORD123@127.0.0.1:47600/jwks"
    with pytest.raises(UsageError) as refused:
        config.check_jwks_url(url)
    assert "PASSWORD123" not in str(refused.value)
    assert "***@127.0.0.1:47600" in str(refused.value)


def test_the_jwks_urls_query_is_masked_in_its_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    cache = JWKSCache("http://127.0.0.1:1/jwks?access_token=QSECRET456", 300, 1)  # nothing listens on port 1
    with caplog.at_level(logging.WARNING):
        asyncio.run(cache.refresh())
    assert any("JWKS refresh from http://127.0.0.1:1/jwks?***" in r.getMessage() for r in caplog.records)
    assert "QSECRET456" not in caplog.text


def test_a_jwks_that_gives_no_key_at_start_is_one_error_and_no_task_left(caplog: pytest.LogCaptureFixture) -> None:
    """Its refresh task was left pending: asyncio's "Task was destroyed but it is pending!" after the error."""
    cfg = config.from_dict(
        {"auth": {"jwks_url": "http://127.0.0.1:1/jwks?token=QSECRET"}, "pool": [{"member": [MEMBER]}]}
    )

    async def start() -> None:
        server = GatewayServer(cfg)
        with pytest.raises(UsageError) as refused:
            await server.start()
        assert "QSECRET" not in str(refused.value)
        assert server.auth.jwks is not None
        task = server.auth.jwks._background
        assert task is not None
        assert task.cancelled()

    asyncio.run(start())


def encrypted_key_files(tmp_path: Path) -> tuple[Path, Path]:
    files = self_signed(tmp_path, ["127.0.0.1"])
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.pem"
    encryption = serialization.BestAvailableEncryption(b"hunter2")
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    return files.cert, encrypted


def test_an_encrypted_client_key_is_refused_never_prompted_for(tmp_path: Path) -> None:
    """OpenSSL asked for a pass phrase on the gateway's terminal, then a traceback: a one-line refusal instead."""
    cert, key = encrypted_key_files(tmp_path)
    with pytest.raises(UsageError) as refused:
        client_context(None, str(cert), str(key), ["http/1.1"], "pool 'a'")
    assert str(refused.value).startswith(f"pool 'a': cannot load `client_cert` {cert} with `client_key` {key}")
    assert "unencrypted private key" in str(refused.value)


def test_a_ca_file_that_is_no_pem_is_refused_in_one_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a certificate\n")
    with pytest.raises(UsageError, match=r"^pool 'a': cannot load `ca_file` .*garbage\.pem"):
        client_context(str(garbage), None, None, ["http/1.1"], "pool 'a'")


def test_a_bugs_text_is_its_class_and_message_never_the_string_it_failed_on() -> None:
    head = f"POST /v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer {KEY}\u2013\r\n\r\n"
    with pytest.raises(UnicodeEncodeError) as failed:
        head.encode("latin-1")
    assert KEY in repr(failed.value)  # what the log line and the access line carried
    text = bug_text(failed.value)
    assert text.startswith("UnicodeEncodeError: 'latin-1' codec can't encode character")
    assert KEY not in text
    assert len(bug_text(ValueError("x" * 1000))) == MAX_BUG_CHARS + 3


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/my base",
        "http://127.0.0.1:9/x\r\nX-Injected: yes",
        "http://exa mple.com",
        "http://h:9/mod\u00e8le",
    ],
)
def test_a_member_url_with_a_space_control_or_non_ascii_character_is_refused(url: str) -> None:
    """urlsplit drops CR, LF and tab in silence and keeps a space: `POST /my base/v1/... HTTP/1.1` went upstream."""
    with pytest.raises(UsageError, match="percent-encode it"):
        config.from_dict({"auth": {"mode": "none"}, "pool": [{"member": [{"url": url}]}]})
