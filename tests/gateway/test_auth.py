"""JWT validation: every algorithm family accepted when allowed, and the negative suite, each refused with a reason.
JWKS from a real HTTP server on loopback: rotation, stale-if-error, rate-limited refresh on unknown kids."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import hashes, hmac, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.helpers import LoopbackHTTP, QuietHandler
from tokenpath.errors import UsageError
from tokenpath.gateway.auth import Authenticator, AuthError
from tokenpath.gateway.config import AuthConfig, GatewayConfig, Member, PoolConfig
from tokenpath.gateway.jwks import JWKSCache

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
SECRET = "s3cret-for-tests-only-" + "0123456789abcdef" * 3  # 70 bytes: enough for HS512


def pem(key: Any) -> bytes:
    data: bytes = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return data


def claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": "alice", "exp": now + 300, "iat": now, **extra}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("GW_TEST_SECRET", SECRET)
    return "GW_TEST_SECRET"


def public_key_auth(tmp_path: Path, key: Any, algorithms: tuple[str, ...], **kw: Any) -> Authenticator:
    path = tmp_path / "key.pem"
    path.write_bytes(pem(key))
    return Authenticator(AuthConfig(public_key_file=str(path), algorithms=algorithms, **kw))


def bearer(token: str) -> str:
    return f"Bearer {token}"


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
def test_hmac_tokens_pass(secret_env: str, alg: str) -> None:
    auth = Authenticator(AuthConfig(secret_env=secret_env, algorithms=("HS256", "HS384", "HS512")))
    principal = run(auth.authenticate(bearer(jwt.encode(claims(), SECRET, algorithm=alg))))
    assert principal.subject == "alice"


@pytest.mark.parametrize(("key", "alg"), [(RSA_KEY, "RS256"), (RSA_KEY, "PS256"), (EC_KEY, "ES256"), (ED_KEY, "EdDSA")])
def test_asymmetric_tokens_pass(tmp_path: Path, key: Any, alg: str) -> None:
    auth = public_key_auth(tmp_path, key, (alg,))
    assert run(auth.authenticate(bearer(jwt.encode(claims(tier="pro"), key, algorithm=alg)))).claims["tier"] == "pro"


def forge_hs256(payload: dict[str, Any], secret: bytes) -> str:
    """An HS256 token built by hand (PyJWT refuses to sign with a PEM as the HMAC secret, which is the attack)."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = f"{b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}.{b64(json.dumps(payload).encode())}"
    mac = hmac.HMAC(secret, hashes.SHA256())
    mac.update(signing_input.encode())
    return f"{signing_input}.{b64(mac.finalize())}"


def unsigned(payload: dict[str, Any]) -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    return f"{head}.{body}."


NEGATIVE = [
    ("missing", None, "missing bearer token"),
    ("not bearer", "Basic dXNlcjpwYXNz", "not a bearer token"),
    ("malformed", "Bearer not.a.jwt", "malformed token"),
    ("alg none", "NONE", "algorithm 'none' not allowed"),
    ("algorithm confusion", "CONFUSED", "algorithm 'HS256' not allowed"),
    ("expired", "EXPIRED", "token expired"),
    ("nbf in the future", "NBF", "not valid yet"),
    ("wrong issuer", "ISS", "wrong issuer"),
    ("wrong audience", "AUD", "wrong audience"),
    ("bad signature", "BADSIG", "bad signature"),
    ("no exp", "NOEXP", "lacks required claim 'exp'"),
    ("other key", "OTHERKEY", "bad signature"),
]


@pytest.mark.parametrize(("case", "header", "reason"), NEGATIVE, ids=[c[0] for c in NEGATIVE])
def test_negative_suite_each_refused_with_its_reason(
    tmp_path: Path, case: str, header: str | None, reason: str
) -> None:
    auth = public_key_auth(tmp_path, RSA_KEY, ("RS256",), issuer="https://issuer", audience="tokenpath")
    good = {"iss": "https://issuer", "aud": "tokenpath"}
    tokens = {
        "NONE": unsigned(claims(**good)),
        "CONFUSED": forge_hs256(claims(**good), pem(RSA_KEY)),
        "EXPIRED": jwt.encode(claims(**good, exp=int(time.time()) - 120), RSA_KEY, algorithm="RS256"),
        "NBF": jwt.encode(claims(**good, nbf=int(time.time()) + 600), RSA_KEY, algorithm="RS256"),
        "ISS": jwt.encode(claims(iss="https://evil", aud="tokenpath"), RSA_KEY, algorithm="RS256"),
        "AUD": jwt.encode(claims(iss="https://issuer", aud="someone-else"), RSA_KEY, algorithm="RS256"),
        "NOEXP": jwt.encode({"sub": "a", **good}, RSA_KEY, algorithm="RS256"),
        "OTHERKEY": jwt.encode(
            claims(**good), rsa.generate_private_key(public_exponent=65537, key_size=2048), algorithm="RS256"
        ),
    }
    valid = jwt.encode(claims(**good), RSA_KEY, algorithm="RS256")
    tokens["BADSIG"] = valid[:-6] + ("AAAAAA" if not valid.endswith("AAAAAA") else "BBBBBB")
    value = None if header is None else (bearer(tokens[header]) if header in tokens else header)
    with pytest.raises(AuthError, match=reason):
        run(auth.authenticate(value))
    assert run(auth.authenticate(bearer(valid))).subject == "alice"  # the same authenticator takes a good one


def test_expiry_within_the_leeway_still_passes(tmp_path: Path) -> None:
    auth = public_key_auth(tmp_path, EC_KEY, ("ES256",), leeway_s=30)
    token = jwt.encode(claims(exp=int(time.time()) - 10), EC_KEY, algorithm="ES256")
    assert run(auth.authenticate(bearer(token))).subject == "alice"


def test_config_refuses_what_would_open_algorithm_confusion(secret_env: str, tmp_path: Path) -> None:
    pools = (PoolConfig("p", (Member("http://127.0.0.1:1"),)),)
    with pytest.raises(UsageError, match="algorithm confusion"):
        GatewayConfig(pools, auth=AuthConfig(public_key_file="k.pem", algorithms=("RS256", "HS256"))).validate()
    with pytest.raises(UsageError, match="exactly one key source"):
        GatewayConfig(pools, auth=AuthConfig(algorithms=("RS256",))).validate()
    with pytest.raises(UsageError, match="only verifies HS"):
        GatewayConfig(pools, auth=AuthConfig(secret_env=secret_env, algorithms=("RS256",))).validate()
    private = tmp_path / "private.pem"
    private.write_bytes(RSA_KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))  # fmt: skip
    with pytest.raises(UsageError, match="private key"):
        Authenticator(AuthConfig(public_key_file=str(private), algorithms=("RS256",)))


# JWKS ---------------------------------------------------------------------------------------------------


def jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
    algo = jwt.get_algorithm_by_name(alg)
    data: dict[str, Any] = json.loads(algo.to_jwk(key.public_key()))
    return {**data, "kid": kid, "alg": alg, "use": "sig"}


class JWKSServer(LoopbackHTTP):
    """A JWKS endpoint on loopback whose key set (or failure) the test controls; counts requests."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.fail = False
        self.hits = 0
        outer = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                if outer.fail:
                    self.send_error(503)
                    return
                body = json.dumps({"keys": outer.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)
        self.url += "/jwks.json"


@pytest.fixture
def jwks_server() -> Iterator[JWKSServer]:
    server = JWKSServer()
    yield server
    server.close()


def test_jwks_rotation_stale_if_error_and_rate_limited_unknown_kids(jwks_server: JWKSServer) -> None:
    new_key = ec.generate_private_key(ec.SECP256R1())
    jwks_server.keys = [jwk(RSA_KEY, "k1", "RS256")]

    async def scenario() -> None:
        cache = JWKSCache(jwks_server.url, ttl_s=3600, min_refresh_s=0.3)
        auth = Authenticator(AuthConfig(jwks_url=jwks_server.url, algorithms=("RS256", "ES256")), jwks=cache)
        await cache.start()
        try:
            old = jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": "k1"})
            assert (await auth.authenticate(bearer(old))).subject == "alice"
            assert jwks_server.hits == 1  # cached: no fetch per request

            # rotation: the issuer publishes k2, then signs with it; the unknown kid triggers one early refresh
            jwks_server.keys = [jwk(RSA_KEY, "k1", "RS256"), jwk(new_key, "k2", "ES256")]
            await asyncio.sleep(0.35)
            rotated = jwt.encode(claims(), new_key, algorithm="ES256", headers={"kid": "k2"})
            assert (await auth.authenticate(bearer(rotated))).subject == "alice"
            assert jwks_server.hits == 2

            # a flood of made-up kids costs at most one fetch per min_refresh_s
            for i in range(20):
                forged = jwt.encode(claims(), new_key, algorithm="ES256", headers={"kid": f"nope{i}"})
                with pytest.raises(AuthError, match="unknown kid"):
                    await auth.authenticate(bearer(forged))
            assert jwks_server.hits <= 3

            # a key declared for one algorithm cannot verify a token claiming another
            wrong = jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": "k2"})
            with pytest.raises(AuthError, match="is a ES256 key"):
                await auth.authenticate(bearer(wrong))

            # stale-if-error: the JWKS endpoint fails; the cached keys keep working
            jwks_server.fail = True
            await asyncio.sleep(0.35)
            await cache.refresh()
            assert cache.errors == 1
            assert cache.state()["refresh_failures"] == 1  # what /_tokenpath/health shows an operator
            assert cache.state()["keys"] == len(cache.keys) > 0
            assert (await auth.authenticate(bearer(rotated))).subject == "alice"
        finally:
            await cache.close()

    asyncio.run(scenario())


def test_jwks_refreshes_in_the_background(jwks_server: JWKSServer) -> None:
    jwks_server.keys = [jwk(RSA_KEY, "k1", "RS256")]

    async def scenario() -> None:
        cache = JWKSCache(jwks_server.url, ttl_s=0.2, min_refresh_s=10)
        await cache.start()
        try:
            jwks_server.keys = [jwk(EC_KEY, "k9", "ES256")]
            for _ in range(100):  # bounded: 5 s at most
                if "k9" in cache.keys:
                    break
                await asyncio.sleep(0.05)
            assert set(cache.keys) == {"k9"}  # k1 was retired by the issuer and dropped on refresh
        finally:
            await cache.close()

    asyncio.run(scenario())


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _hs256(header: dict[str, Any], payload: dict[str, Any]) -> str:
    """A token PyJWT would refuse to make (non-string kid, crit): signed by hand with the shared secret."""
    signing_input = f"{_b64(header)}.{_b64(payload)}"
    mac = hmac.HMAC(SECRET.encode(), hashes.SHA256())
    mac.update(signing_input.encode())
    return f"{signing_input}.{base64.urlsafe_b64encode(mac.finalize()).rstrip(b'=').decode()}"


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "HS256", "typ": "JWT", "crit": ["exp"]},
        {"alg": "HS256", "typ": "JWT", "crit": "x"},
        {"alg": "HS256", "kid": 5},
        {"alg": "HS256", "kid": ["a"]},
        {"alg": ["HS256"]},
        {"alg": None},
    ],
    ids=["crit-list", "crit-string", "kid-int", "kid-list", "alg-list", "alg-null"],
)
def test_crafted_headers_are_a_401_not_a_crash(secret_env: str, header: dict[str, Any]) -> None:
    auth = Authenticator(AuthConfig(secret_env=secret_env, algorithms=("HS256",)))
    with pytest.raises(AuthError):
        auth.check(bearer(_hs256(header, claims())))
    with pytest.raises(AuthError):
        run(auth.authenticate(bearer(_hs256(header, claims()))))


@pytest.mark.parametrize("token", ["W10.e30.x", "bnVsbA.e30.x", "e30.W10.x", "a.b.c", "x" * 5000, "...."])
def test_malformed_tokens_are_a_401(secret_env: str, token: str) -> None:
    auth = Authenticator(AuthConfig(secret_env=secret_env, algorithms=("HS256",)))
    with pytest.raises(AuthError):
        auth.check(bearer(token))


def test_a_trickling_jwks_server_cannot_hold_a_request_past_the_fetch_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket
    import threading

    from tokenpath.gateway import jwks as jwks_module

    monkeypatch.setattr(jwks_module, "FETCH_DEADLINE_S", 1.0)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:  # a JWKS server sending one byte every 0.3 s, forever
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                while not stop.is_set():
                    try:
                        conn.sendall(b"{")
                    except OSError:
                        break
                    stop.wait(0.3)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/jwks.json"

    async def scenario() -> float:
        cache = JWKSCache(url, ttl_s=3600, min_refresh_s=0.0)
        auth = Authenticator(AuthConfig(jwks_url=url, algorithms=("ES256",)), jwks=cache)
        token = jwt.encode(claims(), EC_KEY, algorithm="ES256", headers={"kid": "unknown"})
        t0 = time.monotonic()
        with pytest.raises(AuthError, match="unknown kid"):
            await auth.authenticate(bearer(token))
        assert cache.errors == 1  # the fetch failed by its deadline, counted as a refresh failure
        return time.monotonic() - t0

    try:
        elapsed = run(scenario())
        assert elapsed < 3.0, elapsed  # deadline 1 s (+1 s grace on the waiting side); was unbounded
    finally:
        stop.set()
        listener.close()


# --- the verified-token cache (auth.VerifiedTokens): revocation semantics as auth.py's docstring states them ---


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_a_cached_token_is_not_verified_again_until_its_exp_then_refused(
    secret_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    auth = Authenticator(AuthConfig(secret_env=secret_env, algorithms=("HS256",), leeway_s=5), clock=clock)
    decodes: list[str] = []
    decode = auth._decode

    def counting(token: str, key: Any, alg: str) -> dict[str, Any]:
        decodes.append(token)
        return decode(token, key, alg)

    monkeypatch.setattr(auth, "_decode", counting)
    exp = int(clock.now) + 60
    token = jwt.encode(claims(exp=exp), SECRET, algorithm="HS256")
    for _ in range(3):
        assert auth.check(bearer(token)).subject == "alice"
    assert len(decodes) == 1  # the signature was checked once
    clock.now = exp + 4.9  # within the leeway: the uncached check would still pass it
    assert auth.check(bearer(token)).subject == "alice"
    clock.now = exp + 5  # past exp + leeway: refused from the cache, never decoded again
    with pytest.raises(AuthError, match="expired"):
        auth.check(bearer(token))
    assert len(decodes) == 1


def test_only_verified_tokens_are_cached_and_the_cache_is_bounded(secret_env: str) -> None:
    auth = Authenticator(AuthConfig(secret_env=secret_env, algorithms=("HS256",)), max_verified=8)
    forged = jwt.encode(claims(), "another-secret-" + "x" * 32, algorithm="HS256")
    for _ in range(2):
        with pytest.raises(AuthError, match="bad signature"):
            auth.check(bearer(forged))
    assert len(auth.verified) == 0
    for i in range(20):
        auth.check(bearer(jwt.encode(claims(n=i), SECRET, algorithm="HS256")))
    assert len(auth.verified) == 8
    first = jwt.encode(claims(n=0), SECRET, algorithm="HS256")
    assert auth.verified.get(first) is None  # least recently used: gone first


def test_a_key_removed_from_the_jwks_refuses_the_tokens_it_verified_even_if_cached(jwks_server: JWKSServer) -> None:
    jwks_server.keys = [jwk(RSA_KEY, "k1", "RS256"), jwk(EC_KEY, "k2", "ES256")]

    async def scenario() -> None:
        cache = JWKSCache(jwks_server.url, ttl_s=3600, min_refresh_s=3600)
        auth = Authenticator(AuthConfig(jwks_url=jwks_server.url, algorithms=("RS256", "ES256")), jwks=cache)
        await cache.start()
        try:
            revoked = jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": "k1"})
            kept = jwt.encode(claims(), EC_KEY, algorithm="ES256", headers={"kid": "k2"})
            for token in (revoked, kept, revoked, kept):
                assert (await auth.authenticate(bearer(token))).subject == "alice"
            assert len(auth.verified) == 2
            jwks_server.keys = [jwk(EC_KEY, "k2", "ES256")]  # the issuer revokes k1
            await cache.refresh()
            with pytest.raises(AuthError, match="unknown kid"):
                auth.check(bearer(revoked))
            assert auth.check(bearer(kept)).subject == "alice"  # re-verified with the refreshed k2, then cached
            # a kid whose key is replaced: the old signature no longer verifies
            jwks_server.keys = [jwk(RSA_KEY, "k2", "RS256")]
            await cache.refresh()
            with pytest.raises(AuthError):
                auth.check(bearer(kept))
        finally:
            await cache.close()

    asyncio.run(scenario())
