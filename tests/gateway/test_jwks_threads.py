"""The JWKS cache's fetch threads (issue 33): a JWKS endpoint that answers slowly holds a fetch thread past the
refresh's deadline; every refresh asked for while that thread runs joins it, so however many refreshes fail, one
fetch thread is alive (it was one more per failed refresh)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading

import pytest

from tokenpath.gateway import jwks
from tokenpath.gateway.jwks import FETCH_THREAD_NAME, JWKSCache

SECRET = base64.urlsafe_b64encode(b"k" * 32).rstrip(b"=").decode()
JWKS_DOC = json.dumps({"keys": [{"kty": "oct", "k": SECRET, "kid": "k1", "alg": "HS256", "use": "sig"}]}).encode()


class SlowJWKS(JWKSCache):
    """A cache whose fetch blocks until the test lets it answer: a JWKS server that accepted the request and has not
    finished its answer, without the timing of a real one (its thread stays alive for as long as the test says)."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9/jwks.json", ttl_s=3600, min_refresh_s=0.0)
        self.answer = threading.Event()
        self.fetches = 0

    def _get(self) -> bytes:
        self.fetches += 1
        self.answer.wait(30)  # bounded, so a failing test cannot leave a thread for the whole run
        return JWKS_DOC


def fetch_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The JWKS fetch threads alive now that were not before (other tests' threads are not this test's)."""
    return [t for t in threading.enumerate() if t.name == FETCH_THREAD_NAME and t not in before]


def test_refreshes_against_a_slow_endpoint_leave_one_fetch_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each refresh gives up after 0.1 s instead of 6; the fetch itself never ends before the test lets it, so the
    # count below does not depend on how fast the machine is.
    monkeypatch.setattr(jwks, "FETCH_DEADLINE_S", 0.05)
    monkeypatch.setattr(jwks, "FETCH_GRACE_S", 0.05)
    before = set(threading.enumerate())
    cache = SlowJWKS()

    async def scenario() -> None:
        try:
            for _ in range(6):  # one after another: each fails by its deadline while the first thread still runs
                await cache.refresh()
            await asyncio.gather(*(cache.refresh() for _ in range(3)))  # and together: one more refresh, joined
            assert cache.errors == 7  # every one of them failed, as stale-if-error counts them
            assert len(fetch_threads(before)) == 1
            assert cache.fetches == 1
        finally:
            cache.answer.set()
            for thread in fetch_threads(before):
                thread.join(10)
        # The slow answer came and its thread ended: a refresh works again
        monkeypatch.setattr(jwks, "FETCH_DEADLINE_S", 10.0)
        await cache.refresh()
        assert "k1" in cache.keys

    asyncio.run(scenario())
