"""The probe over HTTP/2 (`probe --http2`): one stream on its own connection, h2c with prior knowledge in clear text
or h2 by ALPN over TLS (the transport insists on it), through the sans-IO core wire/h2client.py.

The same rules as over HTTP/1.1 (probe/client.py): the same request, deadlines, head checks and errors; the same
TraceRecorder, fed per read that advanced *this* stream (its head, its DATA, its end): an arrival is a socket read
that completed at least one frame of the stream. Reads that brought other frames only (SETTINGS, PING, WINDOW_UPDATE)
are the connection's, counted in `H2Figures.connection_reads`. The client's receive windows are the stated condition
`ProbeConfig.h2_window`; the trace carries the stream's DATA frames and its flow-control stalls (trace.H2Figures).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

from tokenpath.clock import Clock
from tokenpath.errors import HTTP2Unavailable, NetworkError, ProtocolError, ProtocolViolation
from tokenpath.probe.client import ProbeConfig, SocketReads, read_until_done, request_parts
from tokenpath.probe.trace import H2Figures, Trace, TraceLimits, TraceRecorder
from tokenpath.probe.transport import Target, Transport
from tokenpath.wire.apis import SPECS
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.h2client import H2ClientConnection
from tokenpath.wire.h2events import DataReceived, H2Event, HeadReceived, StreamEnded, StreamReset, error_name
from tokenpath.wire.request import check_header


def probe_h2(
    transport: Transport,
    cfg: ProbeConfig,
    target: Target,
    stream_id: str,
    clock: Clock,
    limits: TraceLimits,
    deadline: int,
) -> Trace:
    """One streamed request over HTTP/2 on a connected transport; returns its trace (http_version "2")."""
    conn = H2ClientConnection(authority=target.host_header, scheme=target.scheme, window=cfg.h2_window)
    headers, body = request_parts(cfg, stream_id)
    fields = [("Content-Type", "application/json"), ("Accept", SPECS[cfg.api].content_type), *headers]
    for name, value in fields:
        check_header(name, value)
    sid = conn.open_stream("POST", target.path, fields, json.dumps(body, separators=(",", ":")).encode())
    sent = clock()  # before the write (probe/trace.py SENT_RULE)
    transport.sendall(conn.data_to_send())  # the preface, our SETTINGS and the request: one write, as browsers do
    rec = TraceRecorder(stream_id, sent, limits, api=cfg.api)
    reads = SocketReads(transport, _H2Reads(transport, conn, sid, rec, clock), rec, clock)
    read_until_done(rec, reads, cfg, clock, deadline)
    conn.close()
    with contextlib.suppress(OSError):
        transport.sendall(conn.data_to_send())  # GOAWAY: the server need not wait for more streams
    flow = conn.flow(sid)
    trace = rec.trace
    trace.http_version = "2"
    trace.h2 = H2Figures(
        window=str(cfg.h2_window),
        data_frames=flow.data_frames,
        data_reads=flow.reads,
        flow_control_stalls=flow.stalls,
        stall_ms=round(flow.stall_ms, 3),
        min_window=flow.min_window if flow.data_frames else None,
        connection_reads=conn.reads,
    )
    return trace


@dataclass(slots=True)
class _H2Reads:
    """probe/client.py's reads, over HTTP/2: a read feeds the connection, answers what it must (SETTINGS and PING
    ACKs, WINDOW_UPDATEs as the read is consumed) and records what it did to stream `sid`."""

    transport: Transport
    conn: H2ClientConnection
    sid: int
    rec: TraceRecorder
    clock: Clock

    def feed(self, t_ns: int, data: bytes) -> int:
        advanced = self._receive(data, t_ns)
        return self.rec.on_h2_read(t_ns, *advanced[1:]) if advanced[0] else 0

    def closed(self, t_ns: int) -> None:
        _closed(self.conn, self.rec)

    def preview_feed(self, data: bytes) -> tuple[bytes, bool]:
        _, _, _, chunk, ended = self._receive(data, self.clock())
        return chunk, ended

    def _receive(self, data: bytes, t_ns: int) -> tuple[bool, int, ResponseHead | None, bytes, bool]:
        events = self.conn.receive(data, t_ns)
        out = self.conn.data_to_send()
        if out:
            self.transport.sendall(out)
        return _stream_read(events, self.sid)


def _stream_read(events: list[H2Event], sid: int) -> tuple[bool, int, ResponseHead | None, bytes, bool]:
    """What one read did to stream `sid`: (advanced, payload bytes, head, body, ended). A reset is an error."""
    advanced, head, body, ended = False, None, b"", False
    for event in events:
        if isinstance(event, HeadReceived) and event.stream_id == sid:
            advanced, head = True, event.head
        elif isinstance(event, DataReceived) and event.stream_id == sid:
            advanced, body = True, event.data  # one per stream per read
        elif isinstance(event, StreamEnded) and event.stream_id == sid:
            advanced, ended = True, True
        elif isinstance(event, StreamReset) and event.stream_id == sid:
            code = error_name(event.error_code)
            if not event.remote:
                why = f": {event.reason}" if event.reason else ""
                raise ProtocolViolation(f"the server broke HTTP/2 on the stream ({code}{why}); the client reset it")
            raise NetworkError(f"the server reset the HTTP/2 stream ({code})")
    return advanced, len(body), head, body, ended


def _closed(conn: H2ClientConnection, rec: TraceRecorder) -> None:
    """The peer closed the connection before the stream ended."""
    if conn.reads == 0:  # not a byte back: an HTTP/1.1-only server that closes on the preface
        raise HTTP2Unavailable(
            "the server closed the connection without answering the HTTP/2 preface (h2c prior knowledge); "
            "it speaks HTTP/1.1 only?"
        )
    goaway = conn.last_goaway
    said = ""
    if goaway is not None:
        said = f"; its GOAWAY: {error_name(goaway.error_code)}{f' ({goaway.reason})' if goaway.reason else ''}"
    raise ProtocolError(f"the connection closed before the HTTP/2 stream ended ({rec.trace.frame_count} frames{said})")
