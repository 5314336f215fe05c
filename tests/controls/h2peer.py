"""A paced h2c SSE server (the h2 library, in-process) and a blocking h2 client that counts reads per stream: the
two ends of a control relay over HTTP/2, before the stub's own h2 (serve/h2.py) is in the picture."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import cast

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, RequestReceived, StreamEnded, StreamReset

EVENT = b"data: " + b"x" * 52 + b"\n\n"  # 60 bytes, as certification's frames


class PacedH2Server(asyncio.Protocol):
    """Answers every request with `events` SSE frames `interval_ms` apart (fixed deadlines), keeping the connection."""

    def __init__(self, events: int, interval_ms: float) -> None:
        self.events, self.interval_s = events, interval_ms / 1000
        self.conn = H2Connection(H2Configuration(client_side=False, header_encoding="utf-8"))
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.conn.initiate_connection()
        self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        for event in self.conn.receive_data(data):
            if isinstance(event, RequestReceived):
                self.conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "text/event-stream")])
                loop = asyncio.get_running_loop()
                start = loop.time()
                for i in range(self.events):
                    loop.call_at(start + (i + 1) * self.interval_s, self._send, event.stream_id, i == self.events - 1)
        self.transport.write(self.conn.data_to_send())

    def _send(self, sid: int, last: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.conn.send_data(sid, EVENT, end_stream=last)
        self.transport.write(self.conn.data_to_send())


@dataclass
class StreamReads:
    data_reads: int = 0  # socket reads that carried DATA of the stream
    frames: int = 0  # SSE frames received
    first_data_s: float = 0.0  # from the request to the first DATA
    read_sizes: list[int] = field(default_factory=list)


class H2Client:
    """One h2 connection (h2c, or h2 by ALPN with `tls`), streams one after another on it."""

    def __init__(self, port: int, tls: ssl.SSLContext | None = None, timeout_s: float = 10.0) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
            if sock.selected_alpn_protocol() != "h2":
                raise ConnectionError(f"ALPN chose {sock.selected_alpn_protocol()!r}, not h2")
        self.sock = sock
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())

    def stream(self, deadline_s: float = 10.0) -> StreamReads:
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            sid, [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "t")], end_stream=True
        )
        self.sock.sendall(self.conn.data_to_send())
        start, reads = time.monotonic(), StreamReads()
        while time.monotonic() - start < deadline_s:  # bounded in time; every read is bounded by the socket timeout
            data = self.sock.recv(65_536)
            if not data:
                raise ConnectionError("the relay closed the connection")
            carried, ended = 0, False
            for event in self.conn.receive_data(data):
                if isinstance(event, DataReceived) and event.stream_id == sid:
                    carried += len(event.data)
                    reads.frames += event.data.count(b"\n\n")
                    self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, StreamEnded) and event.stream_id == sid:
                    ended = True
                elif isinstance(event, StreamReset):
                    raise ConnectionError(f"stream reset: {event.error_code}")
            if carried:
                reads.first_data_s = reads.first_data_s or time.monotonic() - start
                reads.data_reads += 1
                reads.read_sizes.append(carried)
            self.sock.sendall(self.conn.data_to_send())
            if ended:
                return reads
        raise TimeoutError(f"stream {sid} did not end within {deadline_s} s")

    def close(self) -> None:
        self.sock.close()
