"""The probe over HTTP/3 (`probe --http3`): one stream on its own QUIC connection over UDP, TLS verified as for
HTTP/2 (`--cacert`, `--insecure`), on aioquic's sans-IO QuicConnection + H3Connection driven by the probe's own read
loop (probe/client.py read_until_done, over _H3Reads: the seam's QUIC side), so a read is what it is over TCP: one
wake-up of the client.

An arrival is one wake-up that read every datagram then readable (a batch) and completed at least one frame of the
stream; the same TraceRecorder as HTTP/1.1 and HTTP/2 (on_h2_read: a read that advanced this stream). QUIC keeps its
own timers (loss recovery, ACK delay, idle): each wait ends at the nearest of them and the probe's deadlines. The
handshake is timed apart (H3Figures.handshake_ms) and the request is written after it, so TTFB and TTFT count from
the request's last byte as over TCP. A head with no body after it (quic-go#5739) ends in IdleTimeout, a reset stream
or a closed connection in an error: never a short, fast stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import select
import socket
import ssl
from dataclasses import dataclass, field

from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection, QuicConnectionState
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamReset

from tokenpath.clock import Clock, ns_to_ms
from tokenpath.errors import (
    ConnectError,
    ConnectTimeout,
    DNSError,
    NetworkError,
    ProtocolViolation,
    TLSError,
    UsageError,
)
from tokenpath.probe.client import ProbeConfig, Woke, read_until_done, request_parts
from tokenpath.probe.h3figures import MAX_ARRIVALS_KEPT, STALL_CREDIT, H3Figures, H3Window
from tokenpath.probe.trace import Trace, TraceLimits, TraceRecorder
from tokenpath.probe.transport import Target
from tokenpath.wire.apis import SPECS
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.h2head import malformed, response_head
from tokenpath.wire.request import check_header

MAX_DATAGRAMS_PER_READ = 1024  # one wake-up reads what is readable, up to this; the rest is the next read's
RECV_BYTES = 65_535  # a UDP datagram's largest payload
# QUIC's TLS alerts are CRYPTO_ERROR 0x100 + alert (RFC 9001 4.8): the certificate ones say "not verified".
_CRYPTO_ERROR = range(0x100, 0x200)


def probe_h3(cfg: ProbeConfig, stream_id: str, clock: Clock, limits: TraceLimits, started: int) -> Trace:
    """One streamed request over HTTP/3; returns its trace (http_version "3"). `started` is when the probe began:
    --total-timeout counts from it, the handshake within --connect-timeout."""
    target = cfg.target
    if target.scheme != "https":
        raise UsageError("--http3 needs an https:// URL: QUIC is always TLS")
    deadline = started + int(cfg.total_timeout_s * 1e9)
    quic = QuicConnection(configuration=quic_configuration(cfg, target, cfg.h3_window))  # a bad --cacert first
    conn = _H3Client(cfg, target, clock, _udp_socket(target), quic)
    try:
        handshake_ns = conn.handshake(started + int(cfg.connect_deadline_s * 1e9))
        return conn.stream(stream_id, limits, deadline, handshake_ns)
    finally:
        conn.close()


def quic_configuration(cfg: ProbeConfig, target: Target, window: H3Window) -> QuicConfiguration:
    """The client's QUIC settings: h3 by ALPN, the certificate checked against --cacert (or the system's CAs) and
    the host, unless --insecure; the windows as stated."""
    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=list(H3_ALPN),
        server_name=target.host,
        max_stream_data=window.stream,
        max_data=window.connection,
        idle_timeout=max(cfg.idle_timeout_s, cfg.first_byte_timeout_s) + 5.0,  # our deadlines come first
    )
    if cfg.tls.insecure:
        config.verify_mode = ssl.CERT_NONE
    elif cfg.tls.cacert:
        cfg.tls.context()  # the bundle read now, as over TCP (aioquic reads it only in the handshake): UsageError
        config.load_verify_locations(cafile=cfg.tls.cacert)
    return config


def _udp_socket(target: Target) -> tuple[socket.socket, tuple[str, int]]:
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise DNSError(f"cannot resolve {target.host!r}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.connect(addr)  # only the server's datagrams reach us
    except OSError as exc:
        sock.close()
        raise ConnectError(f"cannot reach {target.hostport} over UDP: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock, (str(addr[0]), int(addr[1]))


@dataclass(slots=True)
class _StreamRead:
    """What one read did to the stream: its head, its DATA (joined), whether it ended."""

    head: ResponseHead | None = None
    chunks: list[bytes] = field(default_factory=list)  # joined once: a batch may hold a thousand packets
    data_events: int = 0
    ended: bool = False
    advanced: bool = False


@dataclass(slots=True)
class _H3Client:
    cfg: ProbeConfig
    target: Target
    clock: Clock
    udp: tuple[socket.socket, tuple[str, int]]
    quic: QuicConnection
    h3: H3Connection = field(init=False)
    sid: int = -1
    udp_reads: int = 0
    datagrams: int = 0
    terminated: ConnectionTerminated | None = None
    last_read_ns: int = 0  # when the latest read of datagrams returned
    head_done: bool = False  # the final response head has come

    def __post_init__(self) -> None:
        self.h3 = H3Connection(self.quic)

    @property
    def sock(self) -> socket.socket:
        return self.udp[0]

    def handshake(self, by_ns: int) -> int:
        """Connect; returns the handshake's time (ns). Past `by_ns`, ConnectTimeout; a refused certificate, TLSError."""
        t0 = self.clock()
        self.quic.connect(self.udp[1], now=t0 / 1e9)
        self.flush()
        while True:
            for event in self._events():
                if isinstance(event, HandshakeCompleted):
                    return self.clock() - t0
            if self.terminated is not None:
                raise self._handshake_error(self.terminated)
            if not self.wait_and_read(by_ns) and self.clock() >= by_ns:
                raise ConnectTimeout(
                    f"no QUIC handshake with {self.target.hostport} within `connect_timeout` "
                    f"{self.cfg.connect_deadline_s} s (no HTTP/3 on that UDP port?)"
                )

    def stream(self, stream_id: str, limits: TraceLimits, deadline: int, handshake_ns: int) -> Trace:
        cfg = self.cfg
        self.sid, sent = self._send_request(stream_id)
        rec = TraceRecorder(stream_id, sent, limits, api=cfg.api)
        self.udp_reads = self.datagrams = 0  # the stream's, not the handshake's
        reads = _H3Reads(self, rec)
        read_until_done(rec, reads, cfg, self.clock, deadline)  # probe/client.py's loop, over QUIC
        trace = rec.trace
        trace.http_version = "3"
        sent = trace.t_sent_ns
        arrivals = [r.t_ns for r in trace.reads if r.frames > 0][:MAX_ARRIVALS_KEPT]
        trace.h3 = H3Figures(
            window=str(cfg.h3_window),
            handshake_ms=round(ns_to_ms(handshake_ns), 3),
            udp_reads=self.udp_reads,
            datagrams=self.datagrams,
            data_events=reads.data_events,
            data_reads=reads.data_reads,
            flow_control_stalls=reads.stalls,
            min_credit=reads.min_credit,
            arrivals_ms=tuple(round(ns_to_ms(a - sent), 3) for a in arrivals),
        )
        return trace

    def close(self) -> None:
        if self.terminated is None:
            self.quic.close(error_code=0x100)  # H3_NO_ERROR: the server need not wait for more streams
            with contextlib.suppress(OSError):
                self.flush()
        self.sock.close()

    # --- one request ---

    def _send_request(self, stream_id: str) -> tuple[int, int]:
        """The request on a new stream, and when it was sent: before the datagrams' writes (trace.py SENT_RULE)."""
        cfg, target = self.cfg, self.target
        headers, body = request_parts(cfg, stream_id)
        fields = [("content-type", "application/json"), ("accept", SPECS[cfg.api].content_type), *headers]
        for name, value in fields:
            check_header(name, value)
        pseudo = [(":method", "POST"), (":scheme", "https"), (":authority", target.host_header)]
        head = [*pseudo, (":path", target.path), *((n.lower(), v) for n, v in fields)]
        sid = self.quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(n.encode(), v.encode()) for n, v in head], end_stream=False)
        self.h3.send_data(sid, json.dumps(body, separators=(",", ":")).encode(), end_stream=True)
        sent = self.clock()
        self.flush()
        return sid, sent

    # --- the socket and QUIC's timers ---

    def wait_and_read(self, by_ns: int) -> bool:
        """Wait for datagrams until `by_ns` or QUIC's next timer (run when it is due); feed a read's batch to QUIC.
        True when datagrams were read (their time in last_read_ns)."""
        while True:
            now = self.clock()
            timer = self.quic.get_timer()
            timer_ns = int(timer * 1e9) if timer is not None else None
            wake = min(by_ns, timer_ns) if timer_ns is not None else by_ns
            if wake > now:
                readable, _, _ = select.select([self.sock], [], [], (wake - now) / 1e9)
            else:
                readable = [self.sock]
            t = self.clock()
            batch = self._read_batch() if readable else []
            if batch:
                self.last_read_ns = t
                self.udp_reads += 1
                self.datagrams += len(batch)
                for datagram in batch:
                    self.quic.receive_datagram(datagram, self.udp[1], now=t / 1e9)
                return True
            if timer_ns is not None and t >= timer_ns:
                self.quic.handle_timer(now=t / 1e9)
                self.flush()
                return False
            if t >= by_ns:
                return False

    def _read_batch(self) -> list[bytes]:
        batch: list[bytes] = []
        while len(batch) < MAX_DATAGRAMS_PER_READ:
            try:
                batch.append(self.sock.recv(RECV_BYTES))
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:  # ICMP port unreachable: nothing listens on that UDP port (any more)
                if not batch:
                    raise self._unreachable() from None
                break
        return batch

    def flush(self) -> None:
        for data, _ in self.quic.datagrams_to_send(now=self.clock() / 1e9):
            try:
                self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                pass  # a full socket buffer drops it, as the network may: QUIC retransmits
            except ConnectionRefusedError:
                raise self._unreachable() from None

    def _unreachable(self) -> NetworkError:
        """ICMP port unreachable: before the request, nothing serves HTTP/3 there; after it, the server went away
        mid-stream (a cut, never a connect failure)."""
        if self.sid < 0:
            return ConnectError(f"nothing answers on UDP {self.target.hostport} (port unreachable)")
        return NetworkError(f"the server's UDP port {self.target.hostport} closed mid-stream (port unreachable)")

    def _events(self) -> list[object]:
        """QUIC's events since the last call, each also through H3 (its events appended after it)."""
        out: list[object] = []
        while (event := self.quic.next_event()) is not None:
            out.append(event)
            if isinstance(event, ConnectionTerminated):
                self.terminated = event
            out.extend(self.h3.handle_event(event))
        return out

    def stream_read(self) -> _StreamRead:
        got = _StreamRead()
        for event in self._events():
            if isinstance(event, HeadersReceived) and event.stream_id == self.sid:
                got.advanced = True
                if not self.head_done:  # interim heads (1xx) first; after the final head, a field block is trailers
                    got.head = self._head(event)
                    self.head_done = got.head is not None
                got.ended = got.ended or event.stream_ended  # trailers end it too
            elif isinstance(event, DataReceived) and event.stream_id == self.sid:
                got.advanced = True
                got.chunks.append(event.data)
                got.data_events += 1
                got.ended = got.ended or event.stream_ended
            elif isinstance(event, StreamReset) and event.stream_id == self.sid:
                raise NetworkError(f"the server reset the HTTP/3 stream (error code {event.error_code:#x})")
        return got

    def _head(self, event: HeadersReceived) -> ResponseHead | None:
        headers = [(bytes(n), bytes(v)) for n, v in event.headers]
        why = malformed(headers)
        if why is not None:
            raise ProtocolViolation(f"the server's HTTP/3 response head is malformed: {why}")
        status = next(int(v) for n, v in headers if n == b":status")
        if 100 <= status < 200:
            return None  # an interim response: the final head follows
        return dataclasses.replace(response_head(headers, "POST"), http_version="3")

    def credit(self) -> int:
        """The least flow-control credit the stream or the connection has left: what the server may still send
        before our next MAX_STREAM_DATA / MAX_DATA. (aioquic's state: its stream's receiver and _local_max_data.)"""
        quic = self.quic
        limit = quic._local_max_data
        conn_credit = limit.value - limit.used
        stream = quic._streams.get(self.sid)
        if stream is None:
            return conn_credit
        return min(conn_credit, stream.max_stream_data_local - stream.receiver.highest_offset)

    def raise_if_ended(self, rec: TraceRecorder) -> None:
        """The connection is ending before the stream did: a cut, named by its code and reason. aioquic reports
        ConnectionTerminated only after its closing period (3 PTO), so its state is read at once: DRAINING, the
        server closed it; CLOSING, we did, for a protocol error of the server's (aioquic's H3 layer checks heads)."""
        self._events()
        quic = self.quic
        term = quic._close_event
        if term is None or rec.complete:
            return
        said = f"{term.error_code:#x}{f' {term.reason_phrase!r}' if term.reason_phrase else ''}"
        frames = rec.trace.frame_count
        if quic._state is QuicConnectionState.CLOSING:
            raise ProtocolViolation(f"the server broke HTTP/3 ({said}); the client closed the connection")
        raise NetworkError(f"the QUIC connection ended before the HTTP/3 stream did ({frames} frames; {said})")

    def _handshake_error(self, term: ConnectionTerminated) -> ConnectError:
        said = f"{term.error_code:#x} {term.reason_phrase}".strip()
        if term.error_code in _CRYPTO_ERROR:
            return TLSError(f"the QUIC TLS handshake with {self.target.hostport} failed: {said}")
        return ConnectError(f"the QUIC handshake with {self.target.hostport} failed: {said}")


@dataclass(slots=True)
class _H3Reads:
    """probe/client.py's ReadSource over QUIC: one wake-up's datagrams a read, QUIC's timers run between reads;
    what a read did to the stream into the recorder, its flow-control figures counted here."""

    conn: _H3Client
    rec: TraceRecorder
    data_events: int = 0
    data_reads: int = 0
    stalls: int = 0
    min_credit: int | None = None

    def next_read(self, now_ns: int, until_ns: int) -> Woke | None:
        conn = self.conn
        conn.raise_if_ended(self.rec)  # the connection ended after the last read (whose head was checked first)
        if not conn.wait_and_read(until_ns):
            conn.raise_if_ended(self.rec)
            return None
        t = conn.last_read_ns
        got = conn.stream_read()
        credit = conn.credit()
        if got.data_events:
            self.data_events += got.data_events
            self.data_reads += 1
            self.min_credit = credit if self.min_credit is None else min(self.min_credit, credit)
            if credit < STALL_CREDIT and not got.ended:
                self.stalls += 1
        conn.flush()  # ACKs and our MAX_STREAM_DATA / MAX_DATA, after the credit was read
        if not got.advanced:
            return Woke(t, 0)
        body = b"".join(got.chunks)
        return Woke(t, self.rec.on_h2_read(t, len(body), got.head, body, got.ended))

    def error_preview(self, deadline: int) -> str:
        return self.rec.body_preview.decode("utf-8", "replace")  # what the reads brought: QUIC reads on by itself
