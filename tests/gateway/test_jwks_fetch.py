"""The JWKS cache against a hostile or broken JWKS server (review 69): one deadline for the whole fetch (a head
trickled a byte at a time, a chain of slow redirects), a malformed entry skipped rather than the whole key set, a
floor under the fetches an unknown kid or the TTL can start, and a TTL that would never (or always) refresh refused
at construction. Every server here is on 127.0.0.1 and stopped by its test."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.gateway.test_auth import EC_KEY, RSA_KEY, JWKSServer, bearer, claims, jwk
from tokenpath.errors import UsageError
from tokenpath.gateway import jwks
from tokenpath.gateway.auth import Authenticator, AuthError
from tokenpath.gateway.config import AuthConfig
from tokenpath.gateway.jwks import FETCH_THREAD_NAME, MIN_REFRESH_FLOOR_S, JWKSCache, parse_jwks

GOOD_DOC = json.dumps({"keys": [jwk(RSA_KEY, "k1", "RS256")]}).encode()


class RawServer:
    """A JWKS server on loopback that answers each connection with `answer(conn, n)` (n: the connection's number,
    from 1), every connection in its own thread; counts connections. `stop` ends them all: each answer waits on it,
    never on a bare sleep, so the test's end ends every thread of the server."""

    def __init__(self, answer: Callable[[socket.socket, int], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()
        self.hits = 0
        self.threads: list[threading.Thread] = []
        self._answer = answer
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self.threads.append(accept)

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.hits += 1
            thread = threading.Thread(target=self._serve, args=(conn, self.hits), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _serve(self, conn: socket.socket, n: int) -> None:
        with conn:
            try:
                conn.settimeout(30)
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    data += piece
                self._answer(conn, n)
            except OSError:
                pass  # the client gave up (the point of most tests here)

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way (close alone does not)
        self.listener.close()
        for thread in self.threads:
            thread.join(10)


def good_answer(conn: socket.socket) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    conn.sendall(head % len(GOOD_DOC) + GOOD_DOC)


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> float:
    """A 1 s fetch deadline (5 s in production); urllib's per-operation timeout is the same 1 s, so a server
    sending a byte every 0.2 s never trips it: only the deadline can end such a fetch."""
    monkeypatch.setattr(jwks, "FETCH_DEADLINE_S", 1.0)
    monkeypatch.setattr(jwks, "FETCH_GRACE_S", 0.5)
    return 1.0


def fetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == FETCH_THREAD_NAME]


def wait_fetch_threads_gone(before: set[threading.Thread], timeout: float) -> list[threading.Thread]:
    """Join this test's fetch threads for up to `timeout` s in all; the ones still alive."""
    end = time.monotonic() + timeout
    alive = [t for t in fetch_threads() if t not in before]
    for thread in alive:
        thread.join(max(0.0, end - time.monotonic()))
    return [t for t in alive if t.is_alive()]


@pytest.fixture
def trickling_head() -> Iterator[RawServer]:
    """The first connection gets its response head a byte every 0.2 s, forever (http.client takes 100 header lines
    of 64 KiB: hours at this pace); any later one gets the key set at once."""

    def answer(conn: socket.socket, n: int) -> None:
        if n > 1:
            good_answer(conn)
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        while not server.stop.wait(0.2):
            conn.sendall(b"x")

    server = RawServer(answer)
    yield server
    server.close()


def test_a_trickled_head_is_cut_at_the_deadline_and_the_next_refresh_fetches(
    trickling_head: RawServer, short_deadline: float
) -> None:
    """Before: the deadline covered only the body, so the fetch thread read the trickled head for days, and every
    later refresh joined that thread instead of fetching: removed keys stayed trusted, new ones were refused."""
    before = set(threading.enumerate())

    async def scenario() -> None:
        cache = JWKSCache(trickling_head.url + "/jwks.json", ttl_s=3600, min_refresh_s=10)
        await cache.refresh()
        assert cache.errors == 1
        assert not cache.keys
        # the fetch's socket was shut at the deadline: its thread ends (it would read the head for hours)
        assert wait_fetch_threads_gone(before, 10) == []
        await cache.refresh()  # a fetch of its own, answered at once
        assert trickling_head.hits == 2
        assert set(cache.keys) == {"k1"}

    asyncio.run(scenario())


@pytest.fixture
def slow_redirects() -> Iterator[RawServer]:
    """Every request is answered after 0.6 s (under the per-operation timeout) by a redirect to the next path:
    urllib follows 10, so without one deadline over them all a fetch took more than 6 s."""

    def answer(conn: socket.socket, n: int) -> None:
        if not server.stop.wait(0.6):
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /r/%d\r\nContent-Length: 0\r\n\r\n" % n)

    server = RawServer(answer)
    yield server
    server.close()


def test_a_chain_of_slow_redirects_is_cut_at_the_deadline(slow_redirects: RawServer, short_deadline: float) -> None:
    before = set(threading.enumerate())

    async def scenario() -> None:
        cache = JWKSCache(slow_redirects.url + "/r/0", ttl_s=3600, min_refresh_s=10)
        await cache.refresh()
        assert cache.errors == 1
        hits = slow_redirects.hits
        await asyncio.sleep(2)  # the chain, had it gone on, would have made 3 more requests by now
        assert slow_redirects.hits == hits, "the fetch went on following redirects past its deadline"
        assert wait_fetch_threads_gone(before, 10) == []

    asyncio.run(scenario())


def test_a_redirect_to_another_scheme_is_not_followed(short_deadline: float) -> None:
    def answer(conn: socket.socket, n: int) -> None:
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n")

    server = RawServer(answer)
    try:

        async def scenario() -> None:
            cache = JWKSCache(server.url + "/jwks.json", ttl_s=3600, min_refresh_s=10)
            await cache.refresh()
            assert cache.errors == 1
            assert not cache.keys

        asyncio.run(scenario())
    finally:
        server.close()


# A malformed entry ------------------------------------------------------------------------------------------

OCT_SECRET = base64.urlsafe_b64encode(b"oct-secret-never-logged-" + b"z" * 40).rstrip(b"=").decode()
GOOD = jwk(RSA_KEY, "good", "RS256")
BAD_ENTRIES: list[Any] = [
    "hello",
    7,
    None,
    ["a"],
    {**jwk(EC_KEY, "alg-list", "ES256"), "alg": ["ES256"]},
    {**jwk(EC_KEY, "alg-int", "ES256"), "alg": 5},
    {"kty": "RSA", "kid": "n-int", "n": 123, "e": "AQAB"},
    {"kty": "RSA", "kid": "n-null", "n": None, "e": "AQAB"},
    {"kty": None, "kid": "kty-null"},
    {"kty": ["RSA"], "kid": "kty-list"},
    {"kty": "EC", "kid": "ec-bad", "crv": "P-256", "x": "AAAA", "y": "AAAA"},
    {"kty": "OKP", "kid": "x25519", "crv": "X25519", "x": "AAAA"},
    {**GOOD, "kid": "alg-unknown", "alg": "XX999"},
    {**GOOD, "kid": "n-bad-b64", "n": "!!!!"},
    {"kty": "oct", "kid": "oct-short", "k": base64.urlsafe_b64encode(b"short").rstrip(b"=").decode(), "alg": "HS256"},
    {"kid": "no-kty", "k": OCT_SECRET},
    {"kty": "oct", "kid": "oct-bad-alg", "k": OCT_SECRET, "alg": "RS256"},
    {"kty": "oct", "kid": "x" * 5000, "k": OCT_SECRET, "alg": ["x" * 5000]},
]


def test_a_malformed_entry_is_skipped_and_the_good_keys_kept(caplog: pytest.LogCaptureFixture) -> None:
    """Before: "hello" (AttributeError) or `"alg": ["RS256"]` (TypeError) failed the whole parse, so the gateway
    refused to start, or ran on stale keys; the skip warning logged the whole JWK, an oct key's secret `k` too."""
    caplog.set_level(logging.WARNING, logger="tokenpath.gateway.jwks")
    keys = parse_jwks(json.dumps({"keys": [BAD_ENTRIES[0], GOOD, *BAD_ENTRIES[1:]]}).encode())
    assert set(keys) == {"good"}
    assert keys["good"].alg == "RS256"
    text = caplog.text
    assert OCT_SECRET not in text
    assert "oct-secret" not in text
    assert all(len(r.getMessage()) < 400 for r in caplog.records)  # kid and alg bounded
    assert len(caplog.records) >= len(BAD_ENTRIES) - 1  # each bad entry said (an oct key with no alg is usable)


@pytest.mark.parametrize(
    "doc",
    [b"[]", b"null", b'{"keys": {"a": 1}}', b'{"keys": null}', b'{"keys": ["hello", 5]}', b'{"keys": []}'],
    ids=["list", "null", "keys-object", "keys-null", "only-bad", "empty"],
)
def test_a_key_set_with_no_good_key_is_the_failure(doc: bytes) -> None:
    with pytest.raises(ValueError, match="JWKS"):
        parse_jwks(doc)


@pytest.fixture(name="server")
def jwks_server() -> Iterator[JWKSServer]:
    """A key set's server on loopback, closed after the test."""
    serving = JWKSServer()
    yield serving
    serving.close()


def test_a_refresh_keeps_the_good_keys_of_a_key_set_with_a_bad_entry(server: JWKSServer) -> None:
    server.keys = [GOOD, *BAD_ENTRIES]

    async def scenario() -> None:
        cache = JWKSCache(server.url, ttl_s=3600, min_refresh_s=10)
        await cache.start()
        try:
            assert set(cache.keys) == {"good"}
            assert cache.errors == 0
        finally:
            await cache.close()

    asyncio.run(scenario())


def test_a_jwks_key_too_short_is_skipped_never_a_warning_per_token(server: JWKSServer) -> None:
    """PyJWT warns on stderr (InsecureKeyLengthWarning, not JSON) for each token a key shorter than its algorithm
    wants verifies: such a key is not taken from the key set."""
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    keys = parse_jwks(json.dumps({"keys": [GOOD, jwk(weak, "weak", "RS256")]}).encode())
    assert set(keys) == {"good"}
    server.keys = [GOOD, jwk(weak, "weak", "RS256")]

    async def scenario() -> None:
        cache = JWKSCache(server.url, ttl_s=3600, min_refresh_s=10)
        auth = Authenticator(AuthConfig(jwks_url=server.url, algorithms=("RS256",)), jwks=cache)
        await cache.start()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyJWT warns signing with it too: the test's business, not the gateway's
            token = jwt.encode(claims(), weak, algorithm="RS256", headers={"kid": "weak"})
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with pytest.raises(AuthError, match="unknown kid"):
                    await auth.authenticate(bearer(token))
            assert [w for w in caught if issubclass(w.category, jwt.InsecureKeyLengthWarning)] == []
        finally:
            await cache.close()

    asyncio.run(scenario())


# How often a fetch may start ----------------------------------------------------------------------------------


def test_unknown_kids_never_start_more_than_one_fetch_per_floor_even_with_min_refresh_0(server: JWKSServer) -> None:
    """The config refuses jwks_min_refresh_s below 1 s; the cache holds its own floor, so that a setting that slips
    through cannot let an unauthenticated flood of made-up kids drive fetches at the identity provider."""
    server.keys = [GOOD]

    async def scenario() -> None:
        cache = JWKSCache(server.url, ttl_s=3600, min_refresh_s=0)
        auth = Authenticator(AuthConfig(jwks_url=server.url, algorithms=("RS256",)), jwks=cache)
        await cache.start()
        try:
            t0 = time.monotonic()
            for i in range(100):  # one after another
                token = jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": f"nope{i}"})
                with pytest.raises(AuthError, match="unknown kid"):
                    await auth.authenticate(bearer(token))
            tokens = [jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": f"x{i}"}) for i in range(100)]
            results = await asyncio.gather(*(auth.authenticate(bearer(t)) for t in tokens), return_exceptions=True)
            assert all(isinstance(r, AuthError) for r in results)
            elapsed = time.monotonic() - t0
            # the start's fetch, and at most one per floor since (one more for the interval under way)
            assert server.hits <= 2 + math.floor(elapsed / MIN_REFRESH_FLOOR_S), (server.hits, elapsed)
        finally:
            await cache.close()

    asyncio.run(scenario())


def test_a_tiny_ttl_refreshes_no_more_than_once_per_floor(server: JWKSServer) -> None:
    server.keys = [GOOD]

    async def scenario() -> None:
        cache = JWKSCache(server.url, ttl_s=0.001, min_refresh_s=10)
        t0 = time.monotonic()
        await cache.start()
        try:
            await asyncio.sleep(1.5)
        finally:
            await cache.close()
        elapsed = time.monotonic() - t0
        assert 1 <= server.hits <= 2 + math.floor(elapsed / MIN_REFRESH_FLOOR_S), (server.hits, elapsed)

    asyncio.run(scenario())


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -math.inf, 0, 0.0, -1, -1e9])
def test_a_ttl_that_never_or_always_refreshes_is_refused(ttl: float) -> None:
    """nan never refreshed (every comparison false), 0 or less refreshed ~1,000 times a second."""
    with pytest.raises(ValueError, match="jwks_ttl_s"):
        JWKSCache("http://127.0.0.1:9/jwks.json", ttl_s=ttl, min_refresh_s=10)
    with pytest.raises(UsageError, match="jwks_ttl_s"):
        Authenticator(AuthConfig(jwks_url="http://127.0.0.1:9/jwks.json", algorithms=("RS256",), jwks_ttl_s=ttl))


@pytest.mark.parametrize("min_refresh", [math.nan, math.inf, -1])
def test_a_min_refresh_that_is_no_interval_is_refused(min_refresh: float) -> None:
    with pytest.raises(ValueError, match="jwks_min_refresh_s"):
        JWKSCache("http://127.0.0.1:9/jwks.json", ttl_s=300, min_refresh_s=min_refresh)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/jwks", "data:application/json,{}", "jwks"])
def test_only_http_and_https_key_sets_are_fetched(url: str) -> None:
    with pytest.raises(ValueError, match="only http"):
        JWKSCache(url, ttl_s=300, min_refresh_s=10)


def test_a_redirect_from_https_to_http_is_refused() -> None:
    """The config takes http:// only to loopback; a redirect must not downgrade an https key set either."""
    import urllib.error
    import urllib.request

    handler = jwks._RedirectHandler()
    req = urllib.request.Request("https://idp.example/jwks.json")
    with pytest.raises(urllib.error.URLError, match="from https to"):
        handler.redirect_request(req, None, 302, "Found", {}, "http://idp.example/jwks.json")
    assert handler.redirect_request(req, None, 302, "Found", {}, "https://idp.example/v2/jwks.json") is not None
