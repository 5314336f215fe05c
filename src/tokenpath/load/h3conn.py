"""HTTP/3 for the load client (`load --http3`): one QUIC connection per stream, each recorded as over HTTP/2.

One connection per stream, not N streams per connection: each stream's handshake is then its own figure (timed
apart from TTFT, as the probe times it), a lost packet or a flow-control stall of one stream never holds another's
arrivals (the figures stay per path, not per multiplexing), and it is what an agent's fresh client does. (Streams
sharing a connection, a browser's shape, would need the pool load/h2conn.py has for HTTP/2: not built.)

One asyncio DatagramProtocol per stream drives aioquic's sans-IO QuicConnection and H3Connection: every
`datagram_received` is handed to QUIC with its time, in that call, and QUIC's own timers (loss recovery, ACK delay,
idle) run from one loop timer re-armed after each datagram (no task per read). After the handshake the request goes
out and the recorder (load/lean.py H2LeanRecorder) starts; a datagram that brought DATA of the stream is an arrival
of it (asyncio hands datagrams over one by one: a datagram is a read here, where the blocking probe reads a batch).
A stream reset, the connection's end before the stream's, or no UDP answer is an error with its end (a cut), never a
short, fast stream (quic-go#5739: a head and then no body ends in our timeout).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamReset

from tokenpath.clock import Clock, monotonic_ns
from tokenpath.errors import (
    ConnectError,
    ConnectTimeout,
    DNSError,
    NetworkError,
    PeerError,
    ProtocolViolation,
    TLSError,
)
from tokenpath.hostport import join_hostport
from tokenpath.load.lean import H2LeanRecorder, LeanTrace
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.ending import STREAM_END
from tokenpath.wire.h2head import malformed, response_head

# QUIC's TLS alerts are CRYPTO_ERROR 0x100 + alert (RFC 9001 4.8): a certificate not verified is one of them.
CRYPTO_ERRORS = range(0x100, 0x200)
H3_NO_ERROR = 0x100  # our close once the stream is done: the server need not wait for more streams
RecorderFactory = Callable[[str, int], H2LeanRecorder]


@dataclass(frozen=True, slots=True)
class H3Request:
    """A request as HTTP/3 fields (pseudo-fields first) and its body."""

    fields: tuple[tuple[str, str], ...]
    body: bytes


def h3_request(
    authority: str, path: str, headers: list[tuple[str, str]], body: dict[str, object], accept: str
) -> H3Request:
    """The request probe/h3stream.py sends: POST, the format's Accept, the same header lines as over HTTP/1.1."""
    fields = [("content-type", "application/json"), ("accept", accept), *headers]
    pseudo = [(":method", "POST"), (":scheme", "https"), (":authority", authority), (":path", path)]
    head = (*pseudo, *((n.lower(), v) for n, v in fields))
    return H3Request(head, json.dumps(body, separators=(",", ":")).encode())


@dataclass(frozen=True, slots=True)
class H3StreamFigures:
    """A stream's QUIC figures, as plain data (they cross a process boundary in the worker's report)."""

    handshake_ns: int  # connect -> the handshake complete (the request is written after it)
    datagrams: int = 0  # datagrams received after the handshake
    data_reads: int = 0  # of those, the ones that brought DATA of the stream (its arrivals' reads)
    data_events: int = 0  # DATA events of the stream


StreamDone = asyncio.Future[tuple[LeanTrace, H3StreamFigures]]


class H3LoadStream(asyncio.DatagramProtocol):
    """One stream on its own QUIC connection: the handshake, the request, each datagram's events into the recorder."""

    def __init__(
        self,
        config: QuicConfiguration,
        request: H3Request,
        stream_id: str,
        make: RecorderFactory,
        done: StreamDone,
        clock: Clock = monotonic_ns,
    ) -> None:
        self._quic = QuicConnection(configuration=config)
        self._h3 = H3Connection(self._quic)
        self._request = request
        self._stream_id = stream_id
        self._make = make
        self._done = done
        self._clock = clock
        self._loop = done.get_loop()
        self._transport: asyncio.DatagramTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._recorder: H2LeanRecorder | None = None  # made when the request is written
        self._sid = -1
        self._started_ns = 0
        self._handshake_ns = 0
        self._head_done = False
        self._datagrams = 0
        self._data_reads = 0
        self._data_events = 0
        self.body_bytes = 0  # the stream's DATA bytes so far (a stream that never ends says how much it sent)
        self.handshaken: asyncio.Future[None] = self._loop.create_future()  # for the connect timeout's bound
        self.closed: asyncio.Future[None] = self._loop.create_future()

    # --- asyncio.DatagramProtocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)
        self._started_ns = self._clock()
        self._quic.connect(transport.get_extra_info("peername"), now=self._started_ns / 1e9)
        self._flush()

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        t = self._clock()
        self._quic.receive_datagram(data, addr, now=t / 1e9)
        if self._recorder is not None:
            self._datagrams += 1
        self._events(t)
        self._flush()

    def error_received(self, exc: Exception) -> None:
        if isinstance(exc, ConnectionRefusedError):  # ICMP port unreachable
            where = self._where
            if self._recorder is None:
                self._fail(ConnectError(f"nothing answers on UDP {where} (port unreachable)"))
            else:
                self._fail(NetworkError(f"the server's UDP port {where} closed mid-stream (port unreachable)"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self._done.done():
            self._fail(NetworkError(f"the UDP socket closed before the response ended: {exc or 'closed'}"))
        if not self.closed.done():
            self.closed.set_result(None)

    # --- QUIC --------------------------------------------------------------------------------------------------

    @property
    def _where(self) -> str:
        peer = self._transport.get_extra_info("peername") if self._transport is not None else None
        return join_hostport(str(peer[0]), int(peer[1])) if peer else "?"

    def _on_timer(self) -> None:
        self._timer = None
        t = self._clock()
        self._quic.handle_timer(now=t / 1e9)
        self._events(t)
        self._flush()

    def _flush(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        for data, _ in self._quic.datagrams_to_send(now=self._clock() / 1e9):
            transport.sendto(data)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        when = self._quic.get_timer()
        if when is not None and not self._done.done():
            # QUIC's clock is ours (CLOCK_MONOTONIC s); the loop's is its own: the delay is what they share.
            delay = max(0.0, when - self._clock() / 1e9)
            self._timer = self._loop.call_later(delay, self._on_timer)

    def _events(self, t: int) -> None:
        got_data: list[bytes] = []
        ended = False
        while (event := self._quic.next_event()) is not None:
            if isinstance(event, HandshakeCompleted):
                self._handshake_ns = t - self._started_ns
                if not self.handshaken.done():
                    self.handshaken.set_result(None)
                self._send_request()
            elif isinstance(event, ConnectionTerminated):
                self._terminated(event)
                return
            for h3 in self._h3.handle_event(event):
                if getattr(h3, "stream_id", None) != self._sid:
                    continue
                if isinstance(h3, HeadersReceived):
                    if not self._head_done:  # interim heads (1xx) first; after the final head, trailers
                        self._on_head(h3)
                    ended = ended or h3.stream_ended
                elif isinstance(h3, DataReceived):
                    got_data.append(h3.data)
                    self._data_events += 1
                    self.body_bytes += len(h3.data)
                    ended = ended or h3.stream_ended
            if isinstance(event, StreamReset) and event.stream_id == self._sid:
                self._fail(NetworkError(f"the server reset the HTTP/3 stream (error code {event.error_code:#x})"))
                return
        recorder = self._recorder
        if recorder is None or self._done.done():
            return
        try:
            if got_data:
                self._data_reads += 1
                recorder.on_data(t, got_data[0] if len(got_data) == 1 else b"".join(got_data))
            if ended:
                recorder.on_end(t)
                self._finish(recorder)
        except PeerError as exc:  # a frame past its limit, an encoding it cannot decode
            self._fail(exc)

    def _on_head(self, event: HeadersReceived) -> None:
        headers = [(bytes(n), bytes(v)) for n, v in event.headers]
        why = malformed(headers)
        if why is not None:
            self._fail(ProtocolViolation(f"the server's HTTP/3 response head is malformed: {why}"))
            return
        status = next(int(v) for n, v in headers if n == b":status")
        if 100 <= status < 200:
            return
        head: ResponseHead = dataclasses.replace(response_head(headers, "POST"), http_version="3")
        self._head_done = True
        assert self._recorder is not None
        self._recorder.on_head(head)

    def _send_request(self) -> None:
        sid = self._quic.get_next_available_stream_id()
        self._sid = sid
        fields = [(n.encode(), v.encode()) for n, v in self._request.fields]
        self._h3.send_headers(sid, fields, end_stream=False)
        self._h3.send_data(sid, self._request.body, end_stream=True)
        self._recorder = self._make(self._stream_id, self._clock())  # before the write, as over HTTP/2

    def _terminated(self, event: ConnectionTerminated) -> None:
        said = f"{event.error_code:#x} {event.reason_phrase}".strip()
        if self._recorder is None and event.error_code in CRYPTO_ERRORS:
            self._fail(TLSError(f"the QUIC TLS handshake with {self._where} failed: {said}"))
        elif self._recorder is None:
            self._fail(ConnectError(f"the QUIC handshake with {self._where} failed: {said}"))
        else:
            self._fail(NetworkError(f"the QUIC connection ended before the HTTP/3 stream did ({said})"))

    def _figures(self) -> H3StreamFigures:
        return H3StreamFigures(self._handshake_ns, self._datagrams, self._data_reads, self._data_events)

    def _finish(self, recorder: H2LeanRecorder) -> None:
        if not self._done.done():
            self._done.set_result((recorder.result(), self._figures()))
        self.close()

    def _fail(self, exc: Exception) -> None:
        if not self.handshaken.done():
            self.handshaken.set_exception(exc)
            self.handshaken.exception()  # retrieved: the stream's future carries it
        if not self._done.done():
            if self._recorder is not None and STREAM_END.of(exc) is None:
                STREAM_END.attach(exc, self._recorder.cut(exc, self._clock()))
            self._done.set_exception(exc)
        self.close()

    def close(self) -> None:
        """CONNECTION_CLOSE (H3_NO_ERROR), sent at once; then the socket goes."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            self._quic.close(error_code=H3_NO_ERROR)
            for data, _ in self._quic.datagrams_to_send(now=self._clock() / 1e9):
                transport.sendto(data)
            transport.close()


def _retrieve(future: asyncio.Future[tuple[LeanTrace, H3StreamFigures]]) -> None:
    if not future.cancelled():
        future.exception()


async def h3_stream(
    host: str,
    port: int,
    config: QuicConfiguration,
    request: H3Request,
    stream_id: str,
    make: RecorderFactory,
    *,
    clock: Clock = monotonic_ns,
    connect_timeout_s: float,
    timeout_s: float,
) -> tuple[LeanTrace, H3StreamFigures]:
    """One stream on a new QUIC connection: its trace and QUIC figures. The handshake within `connect_timeout_s`
    (ConnectTimeout), all of it within `timeout_s` (TimeoutError past it, saying so and how many body bytes came)."""
    loop = asyncio.get_running_loop()
    done: StreamDone = loop.create_future()
    done.add_done_callback(_retrieve)  # failed while the handshake was awaited: its error is raised from there
    deadline = loop.time() + timeout_s
    where = join_hostport(host, port)
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise DNSError(f"cannot resolve {host!r}: {exc.strerror}") from None
    addr = infos[0][4]
    try:
        transport, protocol = await loop.create_datagram_endpoint(
            lambda: H3LoadStream(config, request, stream_id, make, done, clock),
            remote_addr=(str(addr[0]), int(addr[1])),
        )
    except OSError as exc:
        raise ConnectError(f"cannot reach {where} over UDP: {exc.strerror or exc}") from None
    try:
        try:
            bound = min(connect_timeout_s, timeout_s)
            await asyncio.wait_for(asyncio.shield(protocol.handshaken), bound)
        except TimeoutError:
            raise ConnectTimeout(
                f"no QUIC handshake with {where} within {bound:g} s (no HTTP/3 on that UDP port?)"
            ) from None
        try:
            return await asyncio.wait_for(done, max(deadline - loop.time(), 0))
        except TimeoutError:  # a stream that never ends (a flood within the windows, a head then nothing): said so,
            # the count after the colon (the worker's FailureTally groups errors by what comes before it)
            raise TimeoutError(
                f"the HTTP/3 stream did not end within {timeout_s:g} s: {protocol.body_bytes} body bytes by then"
            ) from None
    finally:
        protocol.close()
        transport.close()
