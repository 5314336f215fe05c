"""Many streams at once on one event loop: the same TraceRecorder as the blocking probe, fed from
`data_received`, which is where asyncio hands over each recv().

Over TLS, asyncio's (and uvloop's) SSL protocol decrypts every record that one socket read brought in and hands
them to `data_received` in one call: one wake-up, one arrival, as the README defines it (tests/probe/
test_tls_arrivals.py holds both clients to it)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, cast

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.errors import ConnectError, ConnectTimeout, NetworkError, PeerError, TLSError
from tokenpath.hostport import join_hostport
from tokenpath.probe.trace import Trace, TraceRecorder
from tokenpath.wire.ending import STREAM_END, StreamEnd

R = TypeVar("R")
P = TypeVar("P", bound=asyncio.BaseProtocol)
R_co = TypeVar("R_co", covariant=True)


class Recorder(Protocol[R_co]):
    """What a stream's reads go to (sans-IO): TraceRecorder (every read and frame) or load.lean.LeanRecorder (what
    the load client needs). Both are told of each read the moment data_received is called."""

    @property
    def complete(self) -> bool: ...
    def on_read(self, t_ns: int, data: bytes) -> object: ...
    def on_eof(self, t_ns: int) -> None: ...
    def cut(self, exc: BaseException, t_ns: int) -> StreamEnd | None: ...  # the end an error gave the stream
    def result(self) -> R_co: ...


CLOSE_WAIT_S = 1.0  # how long a finished stream waits for its TLS close_notify before aborting
RecorderFactory = Callable[[str, int], Recorder[R]]  # (stream id, time the request was written) -> recorder


class ClosingProtocol(asyncio.Protocol):
    """A protocol that runs one stream (run_stream): it resolves the future it is made with, and sets `closed` when
    its transport is gone."""

    closed: asyncio.Future[None]


def open_stream(transport: asyncio.BaseTransport, first: bytes) -> asyncio.Transport:
    """A stream's connection, just made: its first bytes written (the request, the upgrade offer). Every client
    protocol that opens a connection here starts so (this module's and load/wsconn.py's). Nagle is off already (a
    client's small writes, its request, a WebSocket's pongs and close, go at once): uvloop and asyncio set
    TCP_NODELAY on every TCP transport they connect (tests/serve/test_nodelay.py), so no socket object per stream."""
    stream = cast(asyncio.Transport, transport)
    stream.write(first)
    return stream


class _StreamProtocol(ClosingProtocol, Generic[R]):
    def __init__(
        self, stream_id: str, request: bytes, clock: Clock, done: asyncio.Future[R], make: RecorderFactory[R]
    ) -> None:
        self._stream_id = stream_id
        self._request = request
        self._clock = clock
        self._done = done
        self._make = make
        self._recorder: Recorder[R] | None = None
        self._transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = done.get_loop().create_future()  # set when the transport is gone

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio writes what the kernel takes at once; a chat request is far below one socket buffer.
        sent = self._clock()  # before the write (probe/trace.py SENT_RULE)
        self._transport = open_stream(transport, self._request)
        self._recorder = self._make(self._stream_id, sent)

    def data_received(self, data: bytes) -> None:
        t = self._clock()
        assert self._recorder is not None
        try:
            self._recorder.on_read(t, data)
        except PeerError as exc:  # a broken response, a frame past its limit, an encoding it cannot decode
            self._fail(exc)
            return
        if self._recorder.complete and not self._done.done():
            self._done.set_result(self._recorder.result())
            assert self._transport is not None
            self._transport.close()

    def eof_received(self) -> bool | None:
        assert self._recorder is not None
        try:
            self._recorder.on_eof(self._clock())
        except PeerError as exc:  # cut short: the response, its last frame or its compressed stream
            self._fail(exc)
            return None
        if not self._done.done():
            self._done.set_result(self._recorder.result())
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            lost = PeerError(f"connection lost before the response ended: {exc or 'closed'}")
            self._fail(lost, exc or NetworkError("closed"))  # a reset (or a close with no EOF) under the stream
        if not self.closed.done():
            self.closed.set_result(None)
        self._transport = None  # it refers to this protocol: the cycle cut, both freed by reference counting

    def _fail(self, exc: Exception, cause: BaseException | None = None) -> None:
        """The stream failed with `exc`, which carries the end `cause` (itself by default) gave it."""
        if not self._done.done():
            if self._recorder is not None and STREAM_END.of(exc) is None:
                STREAM_END.attach(exc, self._recorder.cut(cause or exc, self._clock()))
            self._done.set_exception(exc)
        if self._transport is not None:
            self._transport.abort()


async def stream_once(
    host: str,
    port: int,
    request: bytes,
    stream_id: str,
    *,
    clock: Clock = monotonic_ns,
    timeout_s: float = 600.0,
    ssl_context: ssl.SSLContext | None = None,
) -> Trace:
    """Send `request` on a new connection (TLS with `ssl_context`) and record every read of the response."""
    return await stream_with(
        host, port, request, stream_id, TraceRecorder, clock=clock, timeout_s=timeout_s, ssl_context=ssl_context
    )


async def stream_with(
    host: str,
    port: int,
    request: bytes,
    stream_id: str,
    make: RecorderFactory[R],
    *,
    clock: Clock = monotonic_ns,
    timeout_s: float = 600.0,
    ssl_context: ssl.SSLContext | None = None,
) -> R:
    """Send `request` on a new connection (TLS with `ssl_context`); feed each read to the recorder `make` returns,
    until the response ends; its result. `timeout_s` covers all of it: connecting and the TLS handshake too
    (TimeoutError past it)."""
    return await run_stream(
        lambda done: _StreamProtocol(stream_id, request, clock, done, make), host, port, timeout_s, ssl_context
    )


async def run_stream(
    make: Callable[[asyncio.Future[R]], ClosingProtocol],
    host: str,
    port: int,
    timeout_s: float,
    ssl_context: ssl.SSLContext | None = None,
) -> R:
    """One stream on a new connection: the protocol `make` returns, given the future it resolves; its result.
    `timeout_s` covers all of it, connecting and the TLS handshake too (TimeoutError past it); the connection is
    closed (and waited for) however it ends. The probe's asyncio streams and the load client's WebSocket streams
    run here."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[R] = loop.create_future()
    deadline = loop.time() + timeout_s
    transport, protocol = await connect_protocol(lambda: make(done), host, port, timeout_s, ssl_context)
    # One timer that fails the future, not wait_for's waiter and callbacks (~14 against ~8 µs a stream, with the
    # await; asyncio.timeout ~16): the load client waits here once per stream.
    expire = loop.call_at(deadline, _time_out, done)
    try:
        return await done
    finally:
        expire.cancel()
        await close_and_wait(transport, protocol.closed)


def _time_out(done: asyncio.Future[Any]) -> None:
    if not done.done():
        done.set_exception(TimeoutError())


async def connect_protocol(
    factory: Callable[[], P], host: str, port: int, timeout_s: float, ssl_context: ssl.SSLContext | None = None
) -> tuple[asyncio.Transport, P]:
    """A new connection to host:port with `factory`'s protocol (TLS with `ssl_context`, the host its server name),
    within `timeout_s`, the handshake included; the network's failures as tokenpath's errors (the load client's
    HTTP/1.1, HTTP/2 and WebSocket connections all open here)."""
    loop = asyncio.get_running_loop()
    try:
        # In this task (~12 µs with the connect's await; wait_for ran it in a task of its own: ~19)
        async with asyncio.timeout(timeout_s):
            transport, protocol = await loop.create_connection(
                factory, host, port, ssl=ssl_context, server_hostname=host if ssl_context is not None else None
            )
    except ssl.SSLError as exc:
        raise TLSError(f"TLS handshake with {join_hostport(host, port)} failed: {exc.reason or exc}") from None
    except TimeoutError:
        raise ConnectTimeout(
            f"connecting to {join_hostport(host, port)} (and TLS) took longer than {timeout_s} s"
        ) from None
    except OSError as exc:
        raise ConnectError(f"cannot connect to {join_hostport(host, port)}: {exc.strerror or exc}") from None
    return transport, protocol


async def close_and_wait(transport: asyncio.Transport, closed: asyncio.Future[None]) -> None:
    """Close, and return once the transport is gone: over TLS a close is a close_notify exchange that takes loop
    iterations, and a caller that closes its loop right after a stream would otherwise strand the transport (uvloop
    then refuses to close the loop: EBUSY). A peer that never answers the close_notify gets an abort (which ends
    the transport at once). One timer per stream, no task: this runs once for every stream the load client makes."""
    transport.close()
    if closed.done():
        return
    abort = asyncio.get_running_loop().call_later(CLOSE_WAIT_S, transport.abort)
    try:
        await closed
    finally:
        abort.cancel()


class _Drain(asyncio.Protocol):
    def __init__(self, request: bytes, done: asyncio.Future[int]) -> None:
        self._request = request
        self._done = done
        self._frames = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(self._request)

    def data_received(self, data: bytes) -> None:
        # A byte drain, not a reader: a cheap sanity count of data lines (split-unsafe); the stub's audit measures.
        self._frames += data.count(b"data: ")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(self._frames)


async def drain_once(host: str, port: int, request: bytes, *, timeout_s: float = 600.0) -> int:
    """Send `request` and read until the server closes, counting `data: ` lines and timing nothing.

    For runs where only the stub's audit matters: on a small machine a parsing client takes CPU the stub needs.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    try:
        await loop.create_connection(lambda: _Drain(request, done), host, port)
    except OSError as exc:
        raise ConnectError(f"cannot connect to {join_hostport(host, port)}: {exc.strerror or exc}") from None
    return await asyncio.wait_for(done, timeout_s)
