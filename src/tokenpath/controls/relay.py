"""Byte-level TCP relays (any HTTP traffic) whose upstream→client timing follows a Policy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import cast

from tokenpath.controls.h2hold import H2BufferPolicy, sniff_h2
from tokenpath.controls.policies import (
    CORK_BYTES,
    CORK_MS,
    H2_MODES,
    MODES,
    BufferLimitExceeded,
    Mode,
    Policy,
    make_policy,
)
from tokenpath.errors import UsageError
from tokenpath.hostport import join_hostport
from tokenpath.serve.flow import ReadGate
from tokenpath.serve.http import bound_port
from tokenpath.serve.priority import raise_priority, tighten_timer_slack
from tokenpath.serve.runner import Config, Server

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
MAX_CORK_MS = 60_000.0  # a hold longer than a minute is no cork: 1e300 held a short response for ever
# A client that takes nothing of what is queued for it for this long is dropped (the stub's STALL_S): a buffer
# relay writes a held response whole, up to MAX_BUFFER_BYTES, and a client that never read kept it for ever.
STALL_S = 30.0
# What the upstream may send before the client's first bytes chose a policy: an h2 server's SETTINGS (tens of bytes).
MAX_EARLY_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class RelayConfig:
    upstream_host: str
    upstream_port: int
    mode: Mode = "pass"
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    cork_bytes: int = CORK_BYTES
    cork_ms: float = CORK_MS
    tls_cert: str | None = None  # terminate TLS towards the client (PEM files); the upstream stays plain
    tls_key: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"`mode` {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.cork_bytes < 1 or not (math.isfinite(self.cork_ms) and 0 < self.cork_ms <= MAX_CORK_MS):  # NaN too
            raise UsageError(f"`cork_bytes` must be >= 1 and `cork_ms` a number of ms > 0 and <= {MAX_CORK_MS:g}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise UsageError("`tls_cert` and `tls_key` go together")

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.tls_cert is None:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"`tls_cert`/`tls_key`: cannot load: {exc}") from None
        # h2 by ALPN only for the modes that handle it (the relay then sees the client's preface, as over h2c)
        ctx.set_alpn_protocols(["h2", "http/1.1"] if self.mode in H2_MODES else ["http/1.1"])
        return ctx


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Upstream(asyncio.Protocol):
    def __init__(self, down: _Downstream) -> None:
        self.down = down
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.down.feed(data)
        except BufferLimitExceeded as exc:
            log.warning("relay: %s; closing", exc)
            self.down.abort()

    def eof_received(self) -> bool | None:
        self.down.upstream_finished()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.down.upstream_finished()

    def pause_writing(self) -> None:
        self.down.client_gate.pause()  # the upstream cannot take more: stop reading the client

    def resume_writing(self) -> None:
        self.down.client_gate.resume()


class _Downstream(asyncio.Protocol):
    def __init__(self, cfg: RelayConfig, live: set[_Downstream] | None = None) -> None:
        self.cfg = cfg
        self._live = live if live is not None else set()  # the relay's open connections: its close drops them
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self._pending: list[bytes] = []  # client bytes that arrived before the upstream connection
        self._closed = False
        self._connect_task: asyncio.Task[None] | None = None
        self.client_gate = ReadGate()  # reading from the client, paused while the upstream's buffer is full
        self.upstream_gate = ReadGate()  # reading from the upstream, paused while the client's buffer is full
        # The policy is chosen by the client's first bytes: HTTP/2's preface (h2c, or h2 after ALPN) or not. Until
        # then the upstream's bytes wait (an h2 server may send its SETTINGS before the client's preface is complete).
        self.policy: Policy | None = None
        self._sniffed = b""  # the client's first bytes, at most the preface's 24
        self._early: list[bytes] = []
        self._stall: asyncio.TimerHandle | None = None  # running while the client's buffer is full

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self._live.add(self)
        self.client_gate.attach(transport)
        _nodelay(transport)
        self._connect_task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await asyncio.wait_for(
                loop.create_connection(lambda: _Upstream(self), self.cfg.upstream_host, self.cfg.upstream_port),
                CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError) as exc:
            log.warning("relay: cannot reach upstream %s:%s: %s", self.cfg.upstream_host, self.cfg.upstream_port, exc)
            self._closed = True
            if self.transport is not None:
                self.transport.close()  # a clean close: the client sees the connection end before any response
            return
        if self._closed:
            assert upstream.transport is not None
            upstream.transport.close()
            return
        self.upstream = upstream
        assert upstream.transport is not None
        self.upstream_gate.attach(upstream.transport)
        for chunk in self._pending:
            upstream.transport.write(chunk)
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        try:
            if self.policy is None:
                self._sniffed += data
                h2 = sniff_h2(self._sniffed)
                if h2 is not None and not self._choose(h2):
                    return
            else:
                self.policy.observe_request(data)
        except BufferLimitExceeded as exc:  # e.g. h2 frames the buffer policy cannot read, or a held body too large
            log.warning("relay: %s; closing", exc)
            self.abort()
            return
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.write(data)
        else:
            self._pending.append(data)

    def _choose(self, h2: bool) -> bool:
        """The policy for this connection's protocol; False (and the connection closed) for a mode with no h2."""
        if h2 and self.cfg.mode not in H2_MODES:
            log.warning("relay: an HTTP/2 client, but mode %s reads HTTP/1.1 only; closing", self.cfg.mode)
            self.abort()
            return False
        loop = asyncio.get_running_loop()
        if h2 and self.cfg.mode == "buffer":
            self.policy = H2BufferPolicy(self._write)
        else:  # pass and cork are byte-level: the same over h2 (cork holds frames as TCP_CORK would)
            self.policy = make_policy(
                self.cfg.mode, self._write, loop.call_later, self.cfg.cork_bytes, self.cfg.cork_ms, self.response_done
            )
        self.policy.observe_request(self._sniffed)
        self._sniffed = b""
        early, self._early = self._early, []
        for chunk in early:
            self.policy.feed(chunk)
        return True

    def feed(self, data: bytes) -> None:
        """Upstream bytes: through the policy, or kept until the client's first bytes chose it."""
        if self.policy is None:
            self._early.append(data)
            if sum(map(len, self._early)) > MAX_EARLY_BYTES:
                raise BufferLimitExceeded(f"upstream sent over {MAX_EARLY_BYTES} bytes before the client's request")
        else:
            self.policy.feed(data)

    def eof_received(self) -> bool | None:
        if (
            self.upstream is not None
            and self.upstream.transport is not None
            and self.upstream.transport.can_write_eof()
        ):
            self.upstream.transport.write_eof()
        return True  # keep our write side open: the response may still be coming

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._live.discard(self)
        if self._stall is not None:
            self._stall.cancel()
        if self.policy is not None:
            self.policy.close()
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def pause_writing(self) -> None:
        self.upstream_gate.pause()
        if self._stall is None:
            self._stall = asyncio.get_running_loop().call_later(STALL_S, self._stalled)

    def resume_writing(self) -> None:
        self.upstream_gate.resume()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        self._stall = None
        log.warning("relay: the client took nothing for %.0f s of what is queued for it; dropped", STALL_S)
        self.abort()

    def upstream_finished(self) -> None:
        if self._closed:
            return
        if self.policy is None and not self._choose(sniff_h2(self._sniffed) is True):
            return
        assert self.policy is not None
        self.policy.finish()
        self._closed = True
        if self.transport is not None:
            self.transport.close()  # flushes what is queued, then closes

    def response_done(self) -> None:
        """The policy wrote a whole response that ends this connection: close both sides (what is queued for the
        client still goes out first)."""
        if self._closed:
            return
        self._closed = True
        if self.transport is not None:
            self.transport.close()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def abort(self) -> None:
        self._closed = True
        if self.policy is not None:
            self.policy.close()
        if self.transport is not None:
            self.transport.abort()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.abort()

    def _write(self, pieces: list[bytes]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            # One call: plain TCP sends the pieces as one write; TLS encrypts each as its own record and sends
            # the records together.
            self.transport.writelines(pieces)


def serve(cfg: RelayConfig, announce: Callable[[str], None], loop_name: str = "uvloop") -> None:
    """Run a relay until SIGINT/SIGTERM; `announce` gets the line a parent process waits for.

    A control is part of the instrument, like the stub: certification requires `pass` to add no more than the
    direct path's spread, so on a busy host it gets the stub's scheduling (SCHED_FIFO when permitted) rather than
    waiting a scheduler slice behind other work on every frame (measured: 1 in 3 loaded runs failed certification)."""
    Server(Config("relay", cfg.listen_host, cfg.listen_port, loop=loop_name), partial(_app, cfg)).run(announce)


def _app(cfg: RelayConfig, sock: socket.socket | None) -> ControlRelay:
    tighten_timer_slack()
    return ControlRelay(cfg, priority=raise_priority("auto"))


class ControlRelay:
    """A relay as a library object: `await start()` returns the port; `await close()` stops it. `priority`: the
    scheduling its process got (serve.priority), for its `listening on` line."""

    def __init__(self, cfg: RelayConfig, priority: str = "normal") -> None:
        self.cfg = cfg
        self.priority = priority
        self._server: asyncio.Server | None = None
        # Open connections: a kept-alive client's outlives its response (buffer answers each one), and
        # Server.close() leaves accepted connections open, so close() drops them.
        self._live: set[_Downstream] = set()

    @property
    def port(self) -> int:
        return bound_port(self._server)

    @property
    def url(self) -> str:
        return f"{'https' if self.cfg.tls_cert else 'http'}://{join_hostport(self.cfg.listen_host, self.port)}"

    def note(self) -> str:
        upstream = join_hostport(self.cfg.upstream_host, self.cfg.upstream_port)
        return f"mode={self.cfg.mode}, upstream {upstream}, priority {self.priority}"

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: _Downstream(self.cfg, self._live),
                self.cfg.listen_host,
                self.cfg.listen_port,
                reuse_address=True,
                ssl=self.cfg.ssl_context(),
            )
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {join_hostport(self.cfg.listen_host, self.cfg.listen_port)}: {exc.strerror}"
            ) from None
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self._live):  # kept-alive clients' connections, idle or not: the relay is going
                conn.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            await asyncio.sleep(0)  # the aborted transports' connection_lost, before the caller's loop closes
