"""The JWKS cache's fetch threads (issue 33, review 69): a fetch that outlives its deadline (here one that ignores
it, as a thread stuck in name resolution would: the one wait the deadline cannot cut) is abandoned; the next
refresh starts a fetch of its own instead of joining it, and however many refreshes fail, at most
MAX_FETCH_THREADS fetch threads are alive."""

from __future__ import annotations

import asyncio
import base64
import json
import threading

import pytest

from tokenpath.gateway import jwks
from tokenpath.gateway.jwks import FETCH_THREAD_NAME, MAX_FETCH_THREADS, JWKSCache

SECRET = base64.urlsafe_b64encode(b"k" * 32).rstrip(b"=").decode()
JWKS_DOC = json.dumps({"keys": [{"kty": "oct", "k": SECRET, "kid": "k1", "alg": "HS256", "use": "sig"}]}).encode()


class StuckJWKS(JWKSCache):
    """A cache whose fetches block until the test lets them answer, deaf to their deadline: a fetch thread stuck
    where the deadline's socket shutdown cannot reach it, without the timing of a real one."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9/jwks.json", ttl_s=3600, min_refresh_s=0.0)
        self.answer = threading.Event()
        self.fetches = 0

    def _get(self, deadline: jwks._Deadline) -> bytes:
        self.fetches += 1
        self.answer.wait(30)  # bounded, so a failing test cannot leave a thread for the whole run
        return JWKS_DOC


def fetch_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The JWKS fetch threads alive now that were not before (other tests' threads are not this test's)."""
    return [t for t in threading.enumerate() if t.name == FETCH_THREAD_NAME and t not in before]


def test_refreshes_against_stuck_fetches_abandon_them_and_keep_the_threads_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each refresh gives up after 0.1 s instead of 6; the fetches never end before the test lets them, so the
    # counts below do not depend on how fast the machine is.
    monkeypatch.setattr(jwks, "FETCH_DEADLINE_S", 0.05)
    monkeypatch.setattr(jwks, "FETCH_GRACE_S", 0.05)
    before = set(threading.enumerate())
    cache = StuckJWKS()

    async def scenario() -> None:
        try:
            for _ in range(6):  # one after another: each fails, the first ones by their deadline
                await cache.refresh()
            await asyncio.gather(*(cache.refresh() for _ in range(3)))  # and together: one more refresh, joined
            assert cache.errors == 7  # every one of them failed, as stale-if-error counts them
            # the first stuck fetch did not hold the second back (it was abandoned), and no more threads than that
            assert cache.fetches == MAX_FETCH_THREADS == 2
            assert len(fetch_threads(before)) == MAX_FETCH_THREADS
        finally:
            cache.answer.set()
            for thread in fetch_threads(before):
                thread.join(10)
        # The stuck fetches ended: a refresh works again
        monkeypatch.setattr(jwks, "FETCH_DEADLINE_S", 10.0)
        await cache.refresh()
        assert "k1" in cache.keys
        assert cache.fetches == 3

    asyncio.run(scenario())
