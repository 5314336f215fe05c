"""The gateway's JWT check per request, in process: a token verified every time (the cache bypassed) against the
verified-token cache (gateway.auth.VerifiedTokens), HS256 with a shared secret and RS256 with a public key.

    .venv/bin/python bench/jwt_cache.py [--n 20000]
"""

from __future__ import annotations

import argparse
import os
import time

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tokenpath.gateway.auth import Authenticator
from tokenpath.gateway.config import AuthConfig

SECRET = "bench-only-secret-" + "0123456789abcdef" * 3


def per_check_us(auth: Authenticator, header: str, n: int, cached: bool) -> float:
    auth.check(header)
    start = time.perf_counter()
    for _ in range(n):
        if not cached:
            auth.verified.drop(header.split(" ", 1)[1])
        auth.check(header)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args()
    now = int(time.time())
    claims = {"sub": "alice", "iat": now, "exp": now + 3600, "tier": "pro"}
    os.environ["TOKENPATH_BENCH_SECRET"] = SECRET
    hs = Authenticator(AuthConfig(secret_env="TOKENPATH_BENCH_SECRET", algorithms=("HS256",)))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    path = "/tmp/tokenpath-bench-jwt.pem"
    with open(path, "wb") as f:
        f.write(pem)
    rs = Authenticator(AuthConfig(public_key_file=path, algorithms=("RS256",)))
    cases = [("HS256", hs, jwt.encode(claims, SECRET, algorithm="HS256")),
             ("RS256", rs, jwt.encode(claims, key, algorithm="RS256"))]  # fmt: skip
    print(f"JWT check per request (us), {args.n} checks of one token, in process:")
    for name, auth, token in cases:
        header = f"Bearer {token}"
        n = args.n if name == "HS256" else args.n // 10
        verified = per_check_us(auth, header, n, cached=False)
        cached = per_check_us(auth, header, n, cached=True)
        print(f"  {name}: verified every time {verified:.1f}, cached {cached:.2f} ({verified / cached:.0f} x)")
    os.unlink(path)


if __name__ == "__main__":
    main()
