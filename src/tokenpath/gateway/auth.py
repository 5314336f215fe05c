"""JWT bearer authentication with PyJWT. Keys come from a shared secret (env var), a PEM public key file, or a
JWKS URL (see jwks.py). Only algorithms in the configured allow-list are ever tried; `exp` is required.

Algorithm confusion (an HS256 token "signed" with the RSA public key as the HMAC secret) cannot pass: HS algorithms
are allowed only with a shared secret (config validation), and PyJWT refuses an asymmetric key as an HMAC secret.

Verified tokens are cached (VerifiedTokens: a client sends the same token with every request for its lifetime, and
verifying it again costs a signature check per request). What a cached verification means, exactly:
- The key is the whole token string: a token differing in any byte (claims, signature) is checked afresh.
- It stands until the token's `exp` plus the configured leeway, the instant the uncached check would refuse it;
  past that the token is refused as expired, from the cache, without being decoded again.
- With a JWKS it stands only while the JWKS still holds the very key that verified it under the token's kid: a key
  removed (or replaced) by a refresh refuses (or re-checks) every token it verified, at the first request after
  that refresh. Revocation is therefore as fast as without the cache: the JWKS's TTL (`jwks_ttl_s`).
- Only successes are cached: a bad token is checked (and refused) every time, as before.
- Bounded: the least recently used entry goes first past MAX_VERIFIED_TOKENS (per worker process).
A single token cannot be revoked before its `exp` by anything but its key, with or without this cache: JWTs carry no
revocation of their own (short lifetimes are the remedy)."""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from jwt.algorithms import HMACAlgorithm

from tokenpath.errors import BadRequest, PeerError, UsageError
from tokenpath.gateway.config import AuthConfig
from tokenpath.gateway.jwks import JWKSCache, VerificationKey, bounded, too_short

# RFC 7518 3.2: an HMAC key at least the size of the hash. The secret must suit the largest HS algorithm allowed
# (PyJWT would otherwise warn on stderr for every such token).
MIN_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
# Tokens whose verification is kept, per worker: one per active client identity is the working set; an entry is a
# token (~0.3-1 KB) and its claims (~1 KB), so the bound holds the cache to a few MB.
MAX_VERIFIED_TOKENS = 4096


class AuthError(BadRequest):
    """The request's credentials are not acceptable. The message is the reason we log; never the token."""


class KeyNeeded(PeerError):
    """Not a failure: the token names a JWKS key id that is not cached, so `authenticate` fetches the JWKS
    (bounded), then checks. In the error tree only so that nothing escapes it."""

    def __init__(self, kid: str) -> None:
        super().__init__(kid)
        self.kid = kid


@dataclass(frozen=True)
class Principal:
    claims: dict[str, Any]

    @property
    def subject(self) -> str | None:
        sub = self.claims.get("sub")
        return str(sub) if sub is not None else None


ANONYMOUS = Principal({})


Verified = tuple[Principal, float, str | None, VerificationKey | None]


class VerifiedTokens:
    """A bounded LRU of verified tokens: token -> (principal, valid until, the JWKS kid and key that verified it, or
    None and None for the configured secret or public key)."""

    def __init__(self, max_entries: int = MAX_VERIFIED_TOKENS) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Verified] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token: str) -> Verified | None:
        entry = self._entries.get(token)
        if entry is not None:
            self._entries.move_to_end(token)
        return entry

    def put(self, token: str, verified: Verified) -> None:
        self._entries[token] = verified
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def drop(self, token: str) -> None:
        self._entries.pop(token, None)


class Authenticator:
    def __init__(
        self,
        cfg: AuthConfig,
        jwks: JWKSCache | None = None,
        clock: Callable[[], float] = time.time,  # wall clock: `exp` is seconds since the epoch
        max_verified: int = MAX_VERIFIED_TOKENS,
        algorithms_written: bool = True,  # False: the allow-list is the default for the key source, narrowed to the key
    ) -> None:
        self.cfg = cfg
        self.algorithms = list(cfg.algorithms)
        self._key: Any = None
        self.jwks = jwks
        self.clock = clock
        self.verified = VerifiedTokens(max_verified)
        if cfg.mode != "jwt":
            return
        if cfg.secret_env:
            secret = os.environ.get(cfg.secret_env)
            if not secret:
                raise UsageError(f"`secret_env` {cfg.secret_env}: that environment variable is empty")
            self._key = secret.encode()
            try:  # PyJWT refuses a PEM or SSH key as an HMAC secret: at start, not as a 401 for every token
                HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(self._key)
            except jwt.InvalidKeyError:
                raise UsageError(
                    f"`secret_env` {cfg.secret_env}: holds a public key or certificate, not a shared secret; give "
                    "the public key as `public_key_file` (RS/PS/ES/EdDSA) instead"
                ) from None
            self.algorithms = fitting_secret(cfg.secret_env, len(self._key), self.algorithms, algorithms_written)
        elif cfg.public_key_file:
            try:
                raw = Path(cfg.public_key_file).read_bytes()
            except OSError as exc:
                raise UsageError(f"`public_key_file` {cfg.public_key_file}: {exc.strerror}") from None
            if b"PRIVATE KEY" in raw:
                raise UsageError("`public_key_file` is a private key; give the gateway the public half only")
            # The default allow-list names every family, and one key is of one: it verifies the defaults it fits
            defaulted = not algorithms_written
            self._key, self.algorithms = load_public_key(cfg.public_key_file, raw, self.algorithms, defaulted)
        elif cfg.jwks_url and self.jwks is None:
            try:
                self.jwks = JWKSCache(cfg.jwks_url, cfg.jwks_ttl_s, cfg.jwks_min_refresh_s)
            except ValueError as exc:
                raise UsageError(f"[auth] {exc}") from None
        required = ["exp"] + (["iss"] if cfg.issuer else []) + (["aud"] if cfg.audience else [])
        # A key too short for its algorithm is refused (a 401), never a warning on stderr for each token: the
        # configured secret and public key are checked at start, a JWKS's keys when it is fetched.
        self._options = {
            "require": required,
            "verify_aud": cfg.audience is not None,
            "enforce_minimum_key_length": True,
        }

    @property
    def enabled(self) -> bool:
        return self.cfg.mode == "jwt"

    def check(self, authorization: str | None) -> Principal:
        """Verify with the keys at hand, without waiting: raises AuthError, or KeyNeeded for an uncached kid.
        Every malformed token is an AuthError (a 401), never an exception from deeper down."""
        if not self.enabled:
            return ANONYMOUS
        try:
            return self._check(authorization, may_fetch=True)
        except (AuthError, KeyNeeded):
            raise
        except Exception as exc:  # whatever PyJWT or a key object raises on a crafted token is still a 401
            raise AuthError(f"invalid token: {type(exc).__name__}") from None

    async def authenticate(self, authorization: str | None) -> Principal:
        """check(), fetching the JWKS once when the token names a kid we do not have (the fetch is bounded)."""
        try:
            return self.check(authorization)
        except KeyNeeded as need:
            assert self.jwks is not None
            await self.jwks.fetch_for(need.kid)
        try:
            return self._check(authorization, may_fetch=False)
        except AuthError:
            raise
        except Exception as exc:
            raise AuthError(f"invalid token: {type(exc).__name__}") from None

    def _check(self, authorization: str | None, may_fetch: bool) -> Principal:
        if not authorization:
            raise AuthError("missing bearer token")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError("authorization is not a bearer token")
        hit = self.verified.get(token)
        if hit is not None:
            principal, until, held_kid, verified_with = hit
            if self.clock() >= until:
                self.verified.drop(token)
                raise AuthError("token expired")
            # A refresh builds new key objects: a token is re-verified once per refresh, which is what lets a key
            # removed or replaced in the JWKS stop the tokens it verified.
            if held_kid is None or (self.jwks is not None and self.jwks.cached(held_kid) is verified_with):
                return principal
            self.verified.drop(token)  # its key left the JWKS (or was replaced): checked afresh below
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthError(f"malformed token: {exc}") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:  # includes "none": never in the allow-list
            raise AuthError(f"algorithm {bounded(alg)} not allowed")
        if "crit" in header:  # RFC 7515 4.1.11: we understand no extension, so a critical one is a rejection
            raise AuthError("token has critical header extensions we do not support")
        key = self._key
        kid = None
        found: VerificationKey | None = None
        if self.jwks is not None:
            kid = header.get("kid")
            if not isinstance(kid, str):
                raise AuthError("token has no kid and the keys come from a JWKS")
            found = self.jwks.cached(kid)
            if found is None:
                if may_fetch and self.jwks.may_fetch():
                    raise KeyNeeded(kid)
                raise AuthError(f"unknown kid {bounded(kid)}")
            if found.alg is not None and found.alg != alg:
                raise AuthError(f"kid {bounded(kid)} is a {found.alg} key, the token says {alg}")
            key = found.key
        principal = Principal(self._decode(token, key, alg))
        exp = principal.claims["exp"]  # required, and checked numeric by PyJWT
        self.verified.put(token, (principal, float(exp) + self.cfg.leeway_s, kid, found))
        return principal

    def _decode(self, token: str, key: Any, alg: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=self.cfg.audience,
                issuer=self.cfg.issuer,
                leeway=self.cfg.leeway_s,
                options=self._options,  # type: ignore[arg-type]
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("token expired") from None
        except jwt.ImmatureSignatureError:
            raise AuthError("token not valid yet (nbf/iat in the future)") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"token lacks required claim {exc.claim!r}") from None
        except jwt.InvalidAudienceError:
            raise AuthError("wrong audience") from None
        except jwt.InvalidIssuerError:
            raise AuthError("wrong issuer") from None
        except jwt.InvalidSignatureError:
            raise AuthError("bad signature") from None
        except (jwt.InvalidKeyError, jwt.InvalidAlgorithmError) as exc:
            raise AuthError(f"key does not fit the algorithm: {exc}") from None
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid token: {type(exc).__name__}: {exc}") from None
        return claims


def fitting_secret(env: str, length: int, algorithms: list[str], written: bool = True) -> list[str]:
    """The HS algorithms a shared secret of `length` bytes may verify: a written allow-list whole, or refused when
    one of them needs a longer secret; the default list (HS256, HS384, HS512) narrowed to those the secret is long
    enough for (a 32-byte secret, long enough for HS256, still starts). Names the variable, never the value."""
    if not written:
        fits = [alg for alg in algorithms if MIN_SECRET_BYTES.get(alg, 0) <= length]
        if fits:
            return fits
        algorithms = algorithms[:1]
    hs = [alg for alg in algorithms if alg in MIN_SECRET_BYTES] or ["HS256"]
    widest = max(hs, key=MIN_SECRET_BYTES.__getitem__)
    if length < MIN_SECRET_BYTES[widest]:
        raise UsageError(
            f"the secret in {env} is {length} bytes; {widest} needs at least {MIN_SECRET_BYTES[widest]} "
            f"(RFC 7518 3.2): use a longer secret, or list only the HS algorithms you use in `algorithms`"
        )
    return algorithms


def key_kind(raw: bytes) -> str:
    """What a PEM (or OpenSSH) public key is, in words, for an error message."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    try:
        if raw.lstrip().startswith(b"ssh-") or raw.lstrip().startswith(b"ecdsa-"):
            key: Any = serialization.load_ssh_public_key(raw.strip())
        else:
            key = serialization.load_pem_public_key(raw)
    except Exception:
        return "not a PEM public key"
    if isinstance(key, rsa.RSAPublicKey):
        return f"an RSA key ({key.key_size} bits)"
    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"an EC key on {key.curve.name}"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "an Ed25519 key"
    if isinstance(key, ed448.Ed448PublicKey):
        return "an Ed448 key"
    return f"a {type(key).__name__}"


FAMILIES = "RS*/PS* need an RSA key, ES256 an EC P-256 key, ES384 an EC P-384 key, EdDSA an Ed25519/Ed448 key"


def load_public_key(path: str, raw: bytes, algorithms: list[str], defaulted: bool) -> tuple[Any, list[str]]:
    """Parse `public_key_file` at start, as PyJWT would for each allowed algorithm: a file that is no public key, or
    a key of another family (or curve) than an algorithm needs, or one too short, is refused now rather than a 401
    for every token. With the default allow-list, the algorithms the key fits are kept (one at least). Returns the
    parsed key (what jwt.decode takes, parsed once) and the algorithms it verifies."""
    key: Any = None
    fits: list[str] = []
    for alg in algorithms:
        algorithm = jwt.get_algorithm_by_name(alg)
        try:
            parsed = algorithm.prepare_key(raw)
        except Exception:
            if defaulted:
                continue
            raise UsageError(
                f"`public_key_file` {path}: {key_kind(raw)}, which cannot verify {alg} ({FAMILIES})"
            ) from None
        short = too_short(algorithm, parsed)
        if short:
            raise UsageError(f"`public_key_file` {path}: {short}")
        key = parsed
        fits.append(alg)
    if not fits:
        raise UsageError(
            f"`public_key_file` {path}: {key_kind(raw)}, which verifies none of {', '.join(algorithms)} ({FAMILIES})"
        )
    return key, fits
