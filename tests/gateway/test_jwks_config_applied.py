"""The [auth] JWKS cache's keys, through the gateway in this process (config.from_dict, GatewayServer, requests on
loopback): `jwks_ttl_s` bounds how long a key the issuer removed is still trusted, `jwks_min_refresh_s` how soon an
unknown kid may fetch the key set again; and `retry_after_s` on the 503 of a request whose key fetch does not answer
in time. Each key is set far from its default (300 s, 10 s, 1 s), so the default gives another answer within the
test."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest

from tests.gateway.test_auth import EC_KEY, RSA_KEY, JWKSServer, claims, jwk
from tests.gateway.test_config_keys_applied import Gateway, RecordingMember, read_head
from tokenpath.gateway import app as gwapp


@pytest.fixture
def jwks_server() -> Iterator[JWKSServer]:
    server = JWKSServer()
    yield server
    server.close()


@pytest.fixture
def member() -> Iterator[RecordingMember]:
    server = RecordingMember()
    yield server
    server.close()


@contextlib.contextmanager
def jwt_gateway(member_url: str, jwks_url: str, limits: dict[str, Any] | None = None, **auth: Any) -> Iterator[Gateway]:
    gw = Gateway(member_url, auth={"jwks_url": jwks_url, "algorithms": ["RS256", "ES256"], **auth}, limits=limits or {})
    try:
        yield gw
    finally:
        gw.close()


def status_of(port: int, token: str) -> tuple[int, dict[str, str]]:
    raw = f"GET /v1/models HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), 15) as sock:
        sock.sendall(raw.encode())
        status, headers, _ = read_head(sock)
    return status, headers


def rs256(kid: str) -> str:
    return jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": kid})


def es256(kid: str) -> str:
    return jwt.encode(claims(), EC_KEY, algorithm="ES256", headers={"kid": kid})


def test_jwks_ttl_s_bounds_how_long_a_removed_key_is_trusted(jwks_server: JWKSServer, member: RecordingMember) -> None:
    """jwks_ttl_s = 1 (the least jwks_min_refresh_s allows): the issuer drops k1 from its key set, and within seconds
    a token signed with k1 is refused (the background refresh). With the default, 300 s, k1 would be trusted for
    five minutes. k1 is a known kid, so it never fetches: only the TTL can bring the change in."""
    jwks_server.keys = [jwk(RSA_KEY, "k1", "RS256")]
    with jwt_gateway(member.url, jwks_server.url, jwks_ttl_s=1, jwks_min_refresh_s=1) as gw:
        assert status_of(gw.port, rs256("k1"))[0] == 200
        jwks_server.keys = [jwk(EC_KEY, "k2", "ES256")]  # k1 revoked
        deadline = time.monotonic() + 8
        statuses = []
        while time.monotonic() < deadline:
            statuses.append(status_of(gw.port, rs256("k1"))[0])
            if statuses[-1] == 401:
                break
            time.sleep(0.05)
        assert statuses[-1] == 401, f"k1 still trusted after 8 s: {statuses[-3:]}"
        assert status_of(gw.port, es256("k2"))[0] == 200  # the refresh brought k2 in too
    assert jwks_server.hits >= 2


def test_jwks_min_refresh_s_is_how_soon_an_unknown_kid_fetches_again(
    jwks_server: JWKSServer, member: RecordingMember
) -> None:
    """jwks_min_refresh_s = 1 (its least): each time the issuer publishes a new key, 1.2 s later a token naming it
    fetches the key set and passes. With the default, 10 s after the start's fetch, both would be 401 unknown kid.
    The background refresh is an hour away (jwks_ttl_s), so every fetch after the first is an unknown kid's."""
    jwks_server.keys = [jwk(RSA_KEY, "k1", "RS256")]
    with jwt_gateway(member.url, jwks_server.url, jwks_ttl_s=3600, jwks_min_refresh_s=1) as gw:
        for round_, kid in enumerate(("k2", "k3"), start=2):
            time.sleep(1.2)
            jwks_server.keys = [*jwks_server.keys, jwk(EC_KEY, kid, "ES256")]
            assert status_of(gw.port, es256(kid))[0] == 200
            assert jwks_server.hits == round_


def test_retry_after_s_on_the_503_of_a_key_fetch_that_does_not_answer_in_time(
    jwks_server: JWKSServer, member: RecordingMember, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JWKS endpoint answers the start's fetch, then hangs: a token naming an unknown kid waits out the key
    wait (KEY_WAIT_S, 0.5 s here) and gets a 503 whose Retry-After is retry_after_s (9; the default says 1)."""
    monkeypatch.setattr(gwapp, "KEY_WAIT_S", 0.5)
    jwks_server.keys = [jwk(RSA_KEY, "k1", "RS256")]
    hang = threading.Event()
    handler = jwks_server.httpd.RequestHandlerClass
    answer = handler.do_GET  # type: ignore[attr-defined]

    def hanging(self: Any) -> None:  # a fetch after the start's waits until the test has its answer (10 s at most)
        if jwks_server.hits:
            hang.wait(10)
        answer(self)

    monkeypatch.setattr(handler, "do_GET", hanging)
    limits = {"retry_after_s": 9}
    with jwt_gateway(member.url, jwks_server.url, limits, jwks_ttl_s=3600, jwks_min_refresh_s=1) as gw:
        time.sleep(1.2)  # past jwks_min_refresh_s: the unknown kid fetches
        try:
            status, headers = status_of(gw.port, es256("k9"))
        finally:
            hang.set()
        jwks = gw.server.auth.jwks
        assert jwks is not None
        gw.bg.run(jwks.refresh())  # joins the fetch under way: nothing left pending when the loop closes
        assert status == 503
        assert headers["retry-after"] == "9"
