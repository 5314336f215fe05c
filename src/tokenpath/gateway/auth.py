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

from tokenpath.errors import BadRequest, PeerError, UsageError
from tokenpath.gateway.config import AuthConfig
from tokenpath.gateway.jwks import JWKSCache, VerificationKey

MIN_SECRET_BYTES = 32  # RFC 7518 3.2: at least the hash size for HS256
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
            if len(self._key) < MIN_SECRET_BYTES:
                raise UsageError(
                    f"the secret in {cfg.secret_env} is {len(self._key)} bytes; HMAC JWT "
                    f"secrets need at least {MIN_SECRET_BYTES} (RFC 7518 3.2)"
                )
        elif cfg.public_key_file:
            try:
                self._key = Path(cfg.public_key_file).read_bytes()
            except OSError as exc:
                raise UsageError(f"`public_key_file` {cfg.public_key_file}: {exc.strerror}") from None
            if b"PRIVATE KEY" in self._key:
                raise UsageError("`public_key_file` is a private key; give the gateway the public half only")
        elif cfg.jwks_url and self.jwks is None:
            self.jwks = JWKSCache(cfg.jwks_url, cfg.jwks_ttl_s, cfg.jwks_min_refresh_s)
        required = ["exp"] + (["iss"] if cfg.issuer else []) + (["aud"] if cfg.audience else [])
        self._options = {"require": required, "verify_aud": cfg.audience is not None}

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
            raise AuthError(f"algorithm {alg!r} not allowed")
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
                raise AuthError(f"unknown kid {kid[:64]!r}")
            if found.alg is not None and found.alg != alg:
                raise AuthError(f"kid {kid!r} is a {found.alg} key, the token says {alg}")
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
