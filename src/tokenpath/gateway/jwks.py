"""A JWKS key cache: fetched once, refreshed in the background every TTL, kept when a refresh fails
(stale-if-error), and refreshed early, at most once per `min_refresh_s`, when a token names an unknown kid (key
rotation publishes the new key before tokens use it, so one early fetch finds it; a flood of made-up kids cannot
turn into a flood of fetches).

One fetch thread per cache at most: a fetch runs in a daemon thread and is waited for up to its deadline (plus a
grace). A thread can outlive that wait (urllib's timeout is per socket operation, so a server that answers its head
slowly holds the thread past the deadline), and a refresh asked for while it still runs joins it rather than
starting another thread, so a slow JWKS server costs one thread, however many refreshes it fails."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt

log = logging.getLogger(__name__)

FETCH_DEADLINE_S = 5.0  # one fetch, connect to last byte: a server trickling bytes cannot hold it longer
FETCH_GRACE_S = 1.0  # how long past the deadline a refresh waits for the fetch thread before it counts as failed
FETCH_THREAD_NAME = "jwks-fetch"
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
        self._in_flight: asyncio.Future[bytes] | None = None  # the fetch thread's result, while the thread runs
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

    def cached(self, kid: str) -> VerificationKey | None:
        return self.keys.get(kid)

    def may_fetch(self) -> bool:
        """An unknown kid may trigger a fetch now (or join the one under way)."""
        return self._refreshing is not None or time.monotonic() - self.last_attempt >= self.min_refresh_s

    async def fetch_for(self, kid: str) -> None:
        """Fetch (or wait for the fetch under way) because a token names `kid`; returns within the deadline."""
        if kid in self.keys:
            return
        if self.may_fetch():
            await self.refresh()

    async def key(self, kid: str) -> VerificationKey | None:
        await self.fetch_for(kid)
        return self.keys.get(kid)

    async def refresh(self) -> None:
        """One fetch at a time; concurrent callers wait for the same one. Never longer than the deadline."""
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
        if self._in_flight is None or self._in_flight.done():
            self._in_flight = _in_daemon_thread(self._get)
        # else: the thread of a refresh that gave up on it still runs; joined, never started twice
        try:
            # shielded: giving up the wait leaves the thread's result for the next refresh to join
            raw = await asyncio.wait_for(asyncio.shield(self._in_flight), FETCH_DEADLINE_S + FETCH_GRACE_S)
            keys = parse_jwks(raw)
        except Exception as exc:  # stale-if-error: keep serving with the keys we have
            self.errors += 1
            reason = "deadline passed" if isinstance(exc, TimeoutError) else str(exc)
            log.warning("JWKS refresh from %s failed (%s); keeping %d cached keys", self.url, reason, len(self.keys))
            return
        self.keys = keys
        self.fetched_at = time.monotonic()

    def _get(self) -> bytes:
        """Blocking fetch with one deadline for the whole of it: urllib's timeout is per socket operation, so a
        server sending a byte every few seconds would never trip it; here each read gets what is left."""
        deadline = time.monotonic() + FETCH_DEADLINE_S
        req = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        try:
            resp = urllib.request.urlopen(req, timeout=FETCH_DEADLINE_S)
        except urllib.error.HTTPError as exc:
            exc.close()  # it holds the connection; the status is all we keep
            raise ValueError(f"HTTP {exc.code}") from None
        with resp:
            body = bytearray()
            while len(body) <= MAX_JWKS_BYTES:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"JWKS fetch took longer than {FETCH_DEADLINE_S:g} s")
                with contextlib.suppress(AttributeError):
                    resp.fp.raw._sock.settimeout(left)  # the socket under http.client's buffered reader
                piece = resp.read1(65536)
                if not piece:
                    break
                body += piece
        if len(body) > MAX_JWKS_BYTES:
            raise ValueError(f"JWKS larger than {MAX_JWKS_BYTES} bytes")
        return bytes(body)


def _in_daemon_thread(fn: Callable[[], bytes]) -> asyncio.Future[bytes]:
    """Start a blocking call in a daemon thread; its result (or exception) settles the future returned. A daemon
    thread, not the default executor's: those are joined at interpreter exit, so a fetch stuck in the kernel would
    hold up the process's shutdown after SIGTERM."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bytes] = loop.create_future()

    def run() -> None:
        result = b""
        exc: BaseException | None = None
        try:
            result = fn()
        except BaseException as error:  # handed to the awaiting coroutine
            exc = error
        # A thread that outlived its loop (the gateway shut down while the fetch ran): no one is waiting for it
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, result, exc)

    threading.Thread(target=run, name=FETCH_THREAD_NAME, daemon=True).start()
    return future


def _settle(future: asyncio.Future[bytes], result: bytes, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


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
