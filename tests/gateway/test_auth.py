"""JWT validation: every algorithm family accepted when allowed, and the negative suite, each refused with a reason.
JWKS from a real HTTP server on loopback: rotation, stale-if-error, rate-limited refresh on unknown kids."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import warnings
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
from tokenpath.gateway.config import AuthConfig, GatewayConfig, Member, PoolConfig, default_algorithms
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
        # 1 s: the least min_refresh_s there is (jwks.MIN_REFRESH_FLOOR_S)
        cache = JWKSCache(jwks_server.url, ttl_s=3600, min_refresh_s=1.0)
        auth = Authenticator(AuthConfig(jwks_url=jwks_server.url, algorithms=("RS256", "ES256")), jwks=cache)
        await cache.start()
        try:
            old = jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": "k1"})
            assert (await auth.authenticate(bearer(old))).subject == "alice"
            assert jwks_server.hits == 1  # cached: no fetch per request

            # rotation: the issuer publishes k2, then signs with it; the unknown kid triggers one early refresh
            jwks_server.keys = [jwk(RSA_KEY, "k1", "RS256"), jwk(new_key, "k2", "ES256")]
            await asyncio.sleep(1.05)
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


# --- what is refused at start, and what a hostile token can put in a log line (review 69) ---


def test_a_long_alg_is_logged_bounded(secret_env: str) -> None:
    """An unauthenticated token with an 11 KB `alg` made an 11.7 KB log line: the reason is bounded as the
    unknown kid's is (64 characters, repr'd)."""
    auth = Authenticator(AuthConfig(secret_env=secret_env, algorithms=("HS256",)))
    for alg in ("A" * 11_000, ["B" * 11_000], {"x": "C" * 11_000}):
        with pytest.raises(AuthError) as refused:
            auth.check(bearer(_hs256({"alg": alg, "typ": "JWT"}, claims())))
        assert len(str(refused.value)) < 120, len(str(refused.value))
        assert "not allowed" in str(refused.value)
    with pytest.raises(AuthError, match="algorithm 'none' not allowed"):  # a short one as it was
        auth.check(bearer(unsigned(claims())))


def write_key(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "key.pem"
    path.write_bytes(data)
    return str(path)


P384_KEY = ec.generate_private_key(ec.SECP384R1())
WEAK_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=1024)


@pytest.mark.parametrize(
    ("data", "algorithms", "reason"),
    [
        (b"my-hostname\n", ("RS256",), "not a PEM public key, which cannot verify RS256"),
        (b"", ("ES256",), "not a PEM public key"),
        (b"\xff\xfe\x00binary", ("EdDSA",), "not a PEM public key"),
        (pem(RSA_KEY), ("ES256",), "an RSA key \\(2048 bits\\), which cannot verify ES256"),
        (pem(RSA_KEY), ("RS256", "EdDSA"), "cannot verify EdDSA"),
        (pem(EC_KEY), ("RS256",), "an EC key on secp256r1, which cannot verify RS256"),
        (pem(P384_KEY), ("ES256",), "an EC key on secp384r1, which cannot verify ES256"),
        (pem(EC_KEY), ("ES384",), "secp256r1, which cannot verify ES384"),
        (pem(ED_KEY), ("PS256",), "an Ed25519 key, which cannot verify PS256"),
        (pem(WEAK_RSA_KEY), ("RS256",), "1024 bits long"),
        (pem(RSA_KEY), ("ES256", "EdDSA"), "an RSA key .*, which cannot verify ES256"),
    ],
    ids=["text", "empty", "binary", "rsa-for-es256", "rsa-for-eddsa", "ec-for-rs256", "p384-for-es256",
         "p256-for-es384", "ed25519-for-ps256", "rsa-1024", "rsa-for-es-and-eddsa"],
)  # fmt: skip
def test_a_public_key_file_that_cannot_verify_every_algorithm_is_refused_at_start(
    tmp_path: Path, data: bytes, algorithms: tuple[str, ...], reason: str
) -> None:
    """Before: a file that is no key, or a key of another family, started fine and then 401ed every token."""
    path = write_key(tmp_path, data)
    with pytest.raises(UsageError, match=reason) as refused:
        Authenticator(AuthConfig(public_key_file=path, algorithms=algorithms))
    message = str(refused.value)
    assert path in message
    assert "\n" not in message


@pytest.mark.parametrize(("key", "fits"), [(RSA_KEY, ["RS256", "PS256"]), (EC_KEY, ["ES256"]), (ED_KEY, ["EdDSA"])])
def test_a_public_key_with_the_default_algorithms_verifies_those_it_fits(
    tmp_path: Path, key: Any, fits: list[str]
) -> None:
    """The default allow-list names every family and one key is of one: the key keeps the defaults it fits."""
    cfg = AuthConfig(public_key_file=write_key(tmp_path, pem(key)))
    defaults = AuthConfig(**{**cfg.__dict__, "algorithms": default_algorithms(cfg)})
    auth = Authenticator(defaults, algorithms_written=False)
    assert auth.algorithms == fits
    assert auth.check(bearer(jwt.encode(claims(), key, algorithm=fits[0]))).subject == "alice"
    with pytest.raises(UsageError):  # the same list written: every algorithm of it must fit the key
        Authenticator(defaults)
    no_key = AuthConfig(public_key_file=write_key(tmp_path, b"no key"), algorithms=default_algorithms(cfg))
    with pytest.raises(UsageError, match="verifies none of"):  # a file that is no key still is refused
        Authenticator(no_key, algorithms_written=False)


def test_a_32_byte_secret_with_the_default_algorithms_starts_and_verifies_hs256_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default list for a secret (HS256, HS384, HS512) narrowed to what the secret is long enough for: a
    32-byte secret kept working; written, the same list is refused (HS512 needs 64 bytes)."""
    monkeypatch.setenv("GW_DEFAULT_SECRET", "d" * 32)
    cfg = AuthConfig(secret_env="GW_DEFAULT_SECRET", algorithms=default_algorithms(AuthConfig(secret_env="x")))
    auth = Authenticator(cfg, algorithms_written=False)
    assert auth.algorithms == ["HS256"]
    assert auth.check(bearer(jwt.encode(claims(), "d" * 32, algorithm="HS256"))).subject == "alice"
    with pytest.raises(AuthError):
        auth.check(bearer(jwt.encode(claims(), "d" * 64, algorithm="HS512")))  # refused by its alg
    with pytest.raises(UsageError, match="HS512 needs at least 64"):
        Authenticator(cfg)
    monkeypatch.setenv("GW_DEFAULT_SECRET", "d" * 31)
    with pytest.raises(UsageError, match="HS256 needs at least 32"):
        Authenticator(cfg, algorithms_written=False)


def test_the_gateway_tells_its_authenticator_whether_the_file_wrote_algorithms(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tokenpath.gateway import config as gwconfig
    from tokenpath.gateway.server import GatewayServer

    monkeypatch.setenv("GW_DEFAULT_SECRET", "d" * 32)
    pool: list[dict[str, Any]] = [{"name": "p", "member": [{"url": "http://127.0.0.1:9"}]}]
    base: dict[str, Any] = {"auth": {"secret_env": "GW_DEFAULT_SECRET"}, "pool": pool}
    assert GatewayServer(gwconfig.from_dict(base)).auth.algorithms == ["HS256"]
    written = {"auth": {"secret_env": "GW_DEFAULT_SECRET", "algorithms": ["HS256", "HS384", "HS512"]}, "pool": pool}
    with pytest.raises(UsageError, match="HS512 needs at least 64"):
        GatewayServer(gwconfig.from_dict(written))


@pytest.mark.parametrize(
    ("length", "algorithms", "needs"),
    [
        (31, ("HS256",), "HS256 needs at least 32"),
        (47, ("HS256", "HS384"), "HS384 needs at least 48"),
        (48, ("HS512",), "HS512 needs at least 64"),
        (63, ("HS256", "HS384", "HS512"), "HS512 needs at least 64"),
    ],
)
def test_a_secret_shorter_than_its_largest_hs_algorithm_needs_is_refused(
    monkeypatch: pytest.MonkeyPatch, length: int, algorithms: tuple[str, ...], needs: str
) -> None:
    """RFC 7518 3.2: an HMAC key at least the hash's size. 32 bytes was accepted for HS384/HS512, and PyJWT then
    printed a (non-JSON) InsecureKeyLengthWarning on stderr for every such token."""
    secret = "q" * (length - 5) + "Z9x!k"
    monkeypatch.setenv("GW_SHORT_SECRET", secret)
    with pytest.raises(UsageError, match=needs) as refused:
        Authenticator(AuthConfig(secret_env="GW_SHORT_SECRET", algorithms=algorithms))
    message = str(refused.value)
    assert "GW_SHORT_SECRET" in message
    assert secret not in message
    assert "Z9x!k" not in message
    assert "\n" not in message


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
def test_a_secret_long_enough_verifies_without_a_warning(monkeypatch: pytest.MonkeyPatch, alg: str) -> None:
    size = {"HS256": 32, "HS384": 48, "HS512": 64}[alg]
    monkeypatch.setenv("GW_EXACT_SECRET", "s" * size)
    auth = Authenticator(AuthConfig(secret_env="GW_EXACT_SECRET", algorithms=(alg,)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an InsecureKeyLengthWarning would be an error here
        assert auth.check(bearer(jwt.encode(claims(), "s" * size, algorithm=alg))).subject == "alice"
