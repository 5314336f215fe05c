"""A JWKS key cache: fetched once, refreshed in the background every TTL, kept when a refresh fails
(stale-if-error), and refreshed early, at most once per `min_refresh_s` (and never more often than once per
MIN_REFRESH_FLOOR_S, whatever the setting), when a token names an unknown kid (key rotation publishes the new key
before tokens use it, so one early fetch finds it; a flood of made-up kids cannot turn into a flood of fetches).

One fetch at a time, and one deadline for the whole of it (connect, TLS, every redirect, head and body), enforced
from outside the fetch thread: urllib's timeout is per socket operation, so a server trickling its head a byte at a
time, or a chain of slow redirects, would never trip it. At the deadline the event loop shuts down every socket the
fetch opened (`_Deadline.expire`), which wakes the fetch thread wherever it blocks on the network, and no socket
opens after it. A thread still alive past its deadline (only name resolution cannot be woken) is abandoned: the next
refresh starts a fetch of its own, and at most MAX_FETCH_THREADS fetch threads are ever alive per cache (a refresh
that would start one more fails at once, counted like any failed refresh)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt

from tokenpath.hostport import redacted

log = logging.getLogger(__name__)

FETCH_DEADLINE_S = 5.0  # one fetch, connect to last byte (redirects included): its sockets are shut down at this
FETCH_GRACE_S = 1.0  # how long past the deadline a refresh waits for the fetch thread before it counts as failed
FETCH_THREAD_NAME = "jwks-fetch"
MAX_FETCH_THREADS = 2  # alive per cache: the fetch under way, and one past its deadline that has not unwound yet
MIN_REFRESH_FLOOR_S = 1.0  # the least time between two fetches an unknown kid or the TTL can start, whatever set
MAX_JWKS_BYTES = 1 << 20
MAX_LOGGED_CHARS = 64  # a value from the JWKS or a token, in a log line or an error message


def bounded(value: object, limit: int = MAX_LOGGED_CHARS) -> str:
    """repr() of a value a peer chose (a kid, an alg), at most about `limit` characters: for a log line."""
    if isinstance(value, str):
        return repr(value[:limit]) + ("..." if len(value) > limit else "")
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(frozen=True)
class VerificationKey:
    key: Any  # what jwt.decode takes
    alg: str | None  # the algorithm the JWK declares, if it does


class _Deadline:
    """One fetch's deadline, enforced from outside the fetch thread. The fetch opens its sockets through `connect`
    (every connection urllib makes for it: redirects, a proxy's); `expire`, run by the event loop when the deadline
    passes, shuts each of them down, which ends any recv (TLS handshake, head, body) or send blocked on it, and
    makes every later `connect` fail. A socket is kept as a dup of its descriptor: the same kernel socket, still
    there when TLS has wrapped (and detached) the one http.client made."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []

    def left(self) -> float:
        """Seconds left; TimeoutError once the deadline passed."""
        left = self.at - time.monotonic()
        if self.expired or left <= 0:
            raise TimeoutError(f"JWKS fetch took longer than {self.seconds:g} s")
        return left

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            socks, self._socks = self._socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def release(self) -> None:
        """The fetch is over (the fetch thread's last step): its socket dups are closed."""
        with self._lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            sock.close()

    def _adopt(self, sock: socket.socket) -> None:
        with self._lock:
            if not self.expired:
                self._socks.append(sock.dup())
                return
        raise TimeoutError(f"JWKS fetch took longer than {self.seconds:g} s")

    def connect(self, address: tuple[str, int], timeout: Any = None, source_address: Any = None) -> socket.socket:
        """socket.create_connection, each attempt within what is left of the deadline, each socket adopted."""
        host, port = address
        if not isinstance(timeout, (int, float)):
            timeout = None  # socket's "global default" sentinel: the deadline alone
        error: OSError | None = None
        for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
            left = self.left()  # name resolution cannot be woken: checked after it
            sock = socket.socket(family, kind, proto)
            try:
                self._adopt(sock)
                sock.settimeout(left if timeout is None else min(timeout, left))
                if source_address:
                    sock.bind(source_address)
                sock.connect(sockaddr)
            except TimeoutError:
                sock.close()
                self.left()  # the deadline passed: that is the error, not this address's
                error = OSError(f"connect to {host}:{port} timed out")
            except OSError as exc:
                sock.close()
                error = exc
            else:
                if timeout is not None:
                    sock.settimeout(timeout)  # per operation, as urllib sets it; `expire` bounds the whole
                return sock
        raise error or OSError(f"getaddrinfo returned nothing for {host}")


class _Watched(urllib.request.AbstractHTTPHandler):
    """An http(s) handler whose connections open their sockets through a `_Deadline`."""

    deadline: _Deadline

    def do_open(self, http_class: Any, req: urllib.request.Request, **http_conn_args: Any) -> Any:
        deadline = self.deadline

        def connection(host: str, **kwargs: Any) -> Any:
            conn = http_class(host, **kwargs)
            conn._create_connection = deadline.connect
            return conn

        return super().do_open(connection, req, **http_conn_args)


class _HTTPHandler(_Watched, urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline


class _HTTPSHandler(_Watched, urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, but never from https to plain http: the key set would cross the network unprotected."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(req.full_url).scheme == "https" and urllib.parse.urlsplit(newurl).scheme != "https":
            raise urllib.error.URLError(f"redirect from https to {bounded(redacted(newurl), 200)} refused")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """urlopen's handlers (proxies from the environment, redirects, HTTP errors) for http and https only: no file://,
    ftp:// or data: (a redirect to one is an error, as is one from https to http), every connection under the
    fetch's deadline."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        _RedirectHandler(),
        urllib.request.HTTPErrorProcessor(),
        _HTTPHandler(deadline),
        _HTTPSHandler(deadline),
    ):
        opener.add_handler(handler)
    return opener


class JWKSCache:
    def __init__(self, url: str, ttl_s: float, min_refresh_s: float) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"JWKS URL {bounded(redacted(url), 200)}: only http:// and https:// are fetched")
        if not (isinstance(ttl_s, (int, float)) and math.isfinite(ttl_s) and ttl_s > 0):
            raise ValueError(f"jwks_ttl_s must be a finite number of seconds > 0, not {ttl_s!r}")
        if not (isinstance(min_refresh_s, (int, float)) and math.isfinite(min_refresh_s) and min_refresh_s >= 0):
            raise ValueError(f"jwks_min_refresh_s must be a finite number of seconds >= 0, not {min_refresh_s!r}")
        self.url = url
        self.shown = redacted(url)  # in log lines: a key set's URL may carry a token in its query
        self.ttl_s = ttl_s
        self.min_refresh_s = min_refresh_s
        self.keys: dict[str, VerificationKey] = {}
        self.fetched_at: float | None = None  # monotonic time of the last successful fetch
        self.last_attempt: float = -1e18
        self.errors = 0  # refreshes that failed (stale-if-error kept the old keys)
        self._refreshing: asyncio.Task[None] | None = None  # the fetch under way, which every refresh joins
        self._threads: list[threading.Thread] = []  # fetch threads started, pruned of the ended ones
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
        if self._refreshing is not None:
            return True
        return time.monotonic() - self.last_attempt >= max(self.min_refresh_s, MIN_REFRESH_FLOOR_S)

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
        """One fetch at a time; concurrent callers wait for the same one. Never longer than the deadline (plus the
        grace). A caller that stops waiting (cancelled) leaves the fetch to finish for the others."""
        task = self._refreshing
        if task is None:
            task = self._refreshing = asyncio.get_running_loop().create_task(self._fetch())
            task.add_done_callback(self._fetched)
        await asyncio.shield(task)

    def _fetched(self, task: asyncio.Task[None]) -> None:
        if self._refreshing is task:
            self._refreshing = None

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(max(self.ttl_s, MIN_REFRESH_FLOOR_S))
            await self.refresh()

    async def _fetch(self) -> None:
        self.last_attempt = time.monotonic()
        self._threads = [thread for thread in self._threads if thread.is_alive()]
        if len(self._threads) >= MAX_FETCH_THREADS:
            self.errors += 1
            log.warning(
                "JWKS refresh from %s not started: %d earlier fetches still run past their deadline; keeping %d "
                "cached keys",
                self.shown,
                len(self._threads),
                len(self.keys),
            )
            return
        loop = asyncio.get_running_loop()
        deadline = _Deadline(FETCH_DEADLINE_S)
        expiry = loop.call_later(FETCH_DEADLINE_S, deadline.expire)
        result, thread = _in_daemon_thread(lambda: self._get(deadline))
        self._threads.append(thread)
        try:
            raw = await asyncio.wait_for(result, FETCH_DEADLINE_S + FETCH_GRACE_S)
            keys = parse_jwks(raw)
        except Exception as exc:  # stale-if-error: keep serving with the keys we have
            self.errors += 1
            reason = "deadline passed" if deadline.expired or isinstance(exc, TimeoutError) else str(exc)
            reason = reason if len(reason) <= 200 else reason[:200] + "..."
            log.warning("JWKS refresh from %s failed (%s); keeping %d cached keys", self.shown, reason, len(self.keys))
            return
        finally:
            expiry.cancel()
            if thread.is_alive():
                deadline.expire()  # given up on (or cancelled): its sockets are shut now, its thread abandoned
        self.keys = keys
        self.fetched_at = time.monotonic()

    def _get(self, deadline: _Deadline) -> bytes:
        """Blocking fetch, all of it within `deadline` (see _Deadline): a read past it fails."""
        req = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        try:
            try:
                resp = _opener(deadline).open(req, timeout=min(FETCH_DEADLINE_S, deadline.left()))
            except urllib.error.HTTPError as exc:
                exc.close()  # it holds the connection; the status is all we keep
                raise ValueError(f"HTTP {exc.code}") from None
            with resp:
                body = bytearray()
                while len(body) <= MAX_JWKS_BYTES:
                    deadline.left()
                    piece = resp.read1(65536)
                    if not piece:
                        break
                    body += piece
        finally:
            deadline.release()
        if deadline.expired:
            deadline.left()  # a read the expiry cut short looks like the end of the body: it is not
        if len(body) > MAX_JWKS_BYTES:
            raise ValueError(f"JWKS larger than {MAX_JWKS_BYTES} bytes")
        return bytes(body)


def _in_daemon_thread(fn: Callable[[], bytes]) -> tuple[asyncio.Future[bytes], threading.Thread]:
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

    thread = threading.Thread(target=run, name=FETCH_THREAD_NAME, daemon=True)
    thread.start()
    return future, thread


def _settle(future: asyncio.Future[bytes], result: bytes, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def too_short(algorithm: Any, key: Any) -> str | None:
    """Why `key` is too short for `algorithm` (RFC 7518 3.2 for HMAC, 2048 bits for RSA), or None. PyJWT warns on
    stderr for every token such a key verifies (PyJWT >= 2.10 checks; an older one has no check, and no warning)."""
    check = getattr(algorithm, "check_key_length", None)
    reason: str | None = check(key) if check is not None else None
    return reason


def _describe(entry: dict[str, Any]) -> str:
    """A JWK in a log line: its kid, kty and alg, bounded; never its key material (`k` of an oct key is a secret)."""
    return " ".join(f"{name}={bounded(entry.get(name))}" for name in ("kid", "kty", "alg"))


def parse_jwks(raw: bytes) -> dict[str, VerificationKey]:
    """The signing keys of a JWKS document. A malformed entry is skipped (logged by kid/kty/alg only), the others
    kept; a document that is not a key set, or holds no usable signing key, is the failure."""
    doc = json.loads(raw)
    entries = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ValueError("JWKS is not an object with a `keys` list")
    keys: dict[str, VerificationKey] = {}
    skipped = 0
    for entry in entries:
        if not isinstance(entry, dict):
            skipped += 1
            log.warning("JWKS entry skipped: a JSON %s, not an object", type(entry).__name__)
            continue
        kid = entry.get("kid")
        if not isinstance(kid, str) or entry.get("use", "sig") != "sig":
            continue
        alg = entry.get("alg")
        reason = None if alg is None or isinstance(alg, str) else "its alg is not a string"
        if reason is None:
            try:
                jwk = jwt.PyJWK(entry)
            except Exception as exc:  # PyJWT's message quotes the whole JWK (an oct key's secret): the type only
                reason = f"not a usable key ({type(exc).__name__})"
            else:
                reason = too_short(jwk.Algorithm, jwk.key)  # PyJWT would warn on stderr for every token
        if reason is not None:
            skipped += 1
            log.warning("JWKS key skipped (%s): %s", _describe(entry), reason)
            continue
        keys[kid] = VerificationKey(jwk.key, alg)
    if not keys:
        raise ValueError(f"JWKS holds no usable signing key ({skipped} skipped)")
    return keys
