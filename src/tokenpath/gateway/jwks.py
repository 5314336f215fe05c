"""A JWKS key cache: fetched once, refreshed in the background every TTL, kept when a refresh fails
(stale-if-error), and refreshed early, at most once per `min_refresh_s`, when a token names an unknown kid (key
rotation publishes the new key before tokens use it, so one early fetch finds it; a flood of made-up kids cannot
turn into a flood of fetches)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import jwt

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 5.0
MAX_JWKS_BYTES = 1 << 20


@dataclass(frozen=True)
class VerificationKey:
    key: Any  # what jwt.decode takes
    alg: str | None  # the algorithm the JWK declares, if it does


class JWKSCache:
    def __init__(self, url: str, ttl_s: float, min_refresh_s: float) -> None:
        self.url = url
        self.ttl_s = ttl_s
        self.min_refresh_s = min_refresh_s
        self.keys: dict[str, VerificationKey] = {}
        self.fetched_at: float | None = None  # monotonic time of the last successful fetch
        self.last_attempt: float = -1e18
        self.errors = 0  # refreshes that failed (stale-if-error kept the old keys)
        self._refreshing: asyncio.Task[None] | None = None
        self._background: asyncio.Task[None] | None = None

    def state(self) -> dict[str, object]:
        """What the health endpoint shows: how many keys, how old, how many refreshes failed (stale-if-error)."""
        age = None if self.fetched_at is None else round(time.monotonic() - self.fetched_at, 1)
        return {"keys": len(self.keys), "age_s": age, "refresh_failures": self.errors}

    async def start(self) -> None:
        await self.refresh()
        self._background = asyncio.get_running_loop().create_task(self._refresh_forever())

    async def close(self) -> None:
        if self._background is not None:
            self._background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._background

    async def key(self, kid: str) -> VerificationKey | None:
        found = self.keys.get(kid)
        if found is not None:
            return found
        if time.monotonic() - self.last_attempt >= self.min_refresh_s:
            await self.refresh()
        elif self._refreshing is not None:
            await asyncio.shield(self._refreshing)
        return self.keys.get(kid)

    async def refresh(self) -> None:
        """One fetch at a time; concurrent callers wait for the same one."""
        if self._refreshing is None:
            self._refreshing = asyncio.get_running_loop().create_task(self._fetch())
        task = self._refreshing
        try:
            await asyncio.shield(task)
        finally:
            if task.done() and self._refreshing is task:
                self._refreshing = None

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s)
            await self.refresh()

    async def _fetch(self) -> None:
        self.last_attempt = time.monotonic()
        try:
            raw = await asyncio.get_running_loop().run_in_executor(None, self._get)
            keys = parse_jwks(raw)
        except Exception as exc:  # stale-if-error: keep serving with the keys we have
            self.errors += 1
            log.warning("JWKS refresh from %s failed (%s); keeping %d cached keys", self.url, exc, len(self.keys))
            return
        self.keys = keys
        self.fetched_at = time.monotonic()

    def _get(self) -> bytes:
        req = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=FETCH_TIMEOUT_S) as resp:
            body: bytes = resp.read(MAX_JWKS_BYTES + 1)
        if len(body) > MAX_JWKS_BYTES:
            raise ValueError(f"JWKS larger than {MAX_JWKS_BYTES} bytes")
        return body


def parse_jwks(raw: bytes) -> dict[str, VerificationKey]:
    doc = json.loads(raw)
    keys: dict[str, VerificationKey] = {}
    for entry in doc.get("keys", []):
        kid = entry.get("kid")
        if not isinstance(kid, str) or entry.get("use", "sig") != "sig":
            continue
        try:
            jwk = jwt.PyJWK(entry)
        except jwt.PyJWTError as exc:
            log.warning("JWKS key %s skipped: %s", kid, exc)
            continue
        keys[kid] = VerificationKey(jwk.key, entry.get("alg"))
    if not keys:
        raise ValueError("JWKS holds no usable signing key")
    return keys
