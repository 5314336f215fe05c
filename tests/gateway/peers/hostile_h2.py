"""A hostile HTTP/2 member written on the `h2` library: a threaded clear-text (prior knowledge) server whose
answer to each request is a test's handler, free to send what no honest server does (an invalid `:status`,
upper-case field names, PUSH_PROMISE, floods of control frames, raw frames h2 would refuse to write).

Each accepted connection is a Session: the h2 state machine (server side, outbound validation off), a lock shared
by the reader and the handler threads, and a record of what the gateway did to it (RST_STREAM codes, GOAWAY
codes, how many streams it had open at once, whether it closed the connection)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import Frame, PingFrame, PushPromiseFrame, SettingsFrame

from tests.helpers import accept_each

SSE_OK = b'data: {"choices":[{"delta":{"content":"ok"}}]}\n\ndata: [DONE]\n\n'
Handler = Callable[["Session", int, dict[str, str]], None]


def ok(session: Session, stream_id: int, headers: dict[str, str]) -> None:
    """An honest answer: one content event and [DONE]."""
    session.respond(stream_id, SSE_OK)


class Session:
    def __init__(self, peer: HostileH2, sock: socket.socket) -> None:
        self.peer = peer
        self.sock = sock
        self.lock = threading.RLock()
        config = h2.config.H2Configuration(
            client_side=False, validate_outbound_headers=False, normalize_outbound_headers=False
        )
        self.conn = h2.connection.H2Connection(config)
        self.open_streams: set[int] = set()
        self.pending: dict[int, dict[str, str]] = {}  # requests whose body is still coming
        self.max_open = 0
        self.resets: list[tuple[int, int]] = []  # (stream id, error code) of each RST_STREAM the gateway sent
        self.goaways: list[int] = []  # error codes of the gateway's GOAWAY frames
        self.errors: list[str] = []  # protocol errors the gateway committed (h2's view)
        self.closed_by_gateway = threading.Event()
        self.reading = threading.Event()  # cleared: the reader stops reading (a member that leaves answers unread)
        self.reading.set()

    # writing -------------------------------------------------------------------------------------------------
    def send(self, act: Callable[[h2.connection.H2Connection], object] | None = None, raw: bytes = b"") -> None:
        """Run `act` on the state machine, then write what it queued, then `raw` (frames written by hand)."""
        with self.lock:
            if act is not None:
                try:
                    act(self.conn)
                except h2.exceptions.H2Error:  # the gateway closed or reset it meanwhile
                    return
            data = bytes(self.conn.data_to_send())
            if not self.peer.ack_settings:
                data = _without_settings_acks(data)
            with contextlib.suppress(OSError):
                self.sock.sendall(data + raw)

    def respond(
        self, stream_id: int, body: bytes = SSE_OK, status: str = "200", headers: list[tuple[str, str]] | None = None
    ) -> None:
        fields = [(":status", status), ("content-type", "text/event-stream"), *(headers or [])]
        self.send(lambda c: c.send_headers(stream_id, fields))
        self.send(lambda c: c.send_data(stream_id, body, end_stream=True))

    def stream_events(self, stream_id: int, count: int, interval_s: float) -> None:
        """A slow token stream: `count` content events, `interval_s` apart, then [DONE]."""
        self.send(lambda c: c.send_headers(stream_id, [(":status", "200"), ("content-type", "text/event-stream")]))
        for k in range(count):
            event = b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % k
            self.send(lambda c, event=event: c.send_data(stream_id, event))  # type: ignore[misc]
            time.sleep(interval_s)
        self.send(lambda c: c.send_data(stream_id, b"data: [DONE]\n\n", end_stream=True))

    def push_promise(self, stream_id: int, promised: int) -> bytes:
        """A PUSH_PROMISE frame h2 would refuse to write once the gateway said ENABLE_PUSH=0."""
        with self.lock:
            block = self.conn.encoder.encode(
                [(":method", "GET"), (":scheme", "http"), (":authority", "member"), (":path", "/pushed")]
            )
        frame = PushPromiseFrame(stream_id, promised_stream_id=promised, data=block, flags=["END_HEADERS"])
        return bytes(frame.serialize())

    # reading -------------------------------------------------------------------------------------------------
    def serve(self) -> None:
        with self.sock:
            self.send(lambda c: c.initiate_connection())
            while True:
                self.reading.wait()
                try:
                    data = self.sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self.closed_by_gateway.set()
                    return
                with self.lock:
                    try:
                        events = self.conn.receive_data(data)
                    except h2.exceptions.ProtocolError as exc:  # e.g. more streams than our SETTINGS allow
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                        events = []
                    self._note(events)
                self.send()

    def _note(self, events: list[h2.events.Event]) -> None:
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                assert event.stream_id is not None
                self.open_streams.add(event.stream_id)
                # Counted as RFC 9113 5.1.2 counts (h2's own state: a stream whose END_STREAM we sent is closed),
                # not by our handler threads, which leave open_streams a moment after the gateway may already
                # have opened the next stream.
                now_open = self.conn.open_inbound_streams
                self.max_open = max(self.max_open, now_open)
                self.peer.max_open = max(self.peer.max_open, now_open)
                headers = {k.decode(): v.decode() for k, v in event.headers or []}
                self.peer.requests += 1
                if event.stream_ended is not None:
                    self._start(event.stream_id, headers)
                else:
                    self.pending[event.stream_id] = headers
            elif isinstance(event, h2.events.StreamEnded):
                assert event.stream_id is not None
                waiting = self.pending.pop(event.stream_id, None)
                if waiting is not None:
                    self._start(event.stream_id, waiting)
            elif isinstance(event, h2.events.StreamReset):
                assert event.stream_id is not None
                self.resets.append((event.stream_id, int(event.error_code or 0)))
                self.open_streams.discard(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaways.append(int(event.error_code or 0))
            elif isinstance(event, h2.events.DataReceived):
                assert event.stream_id is not None
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)

    def _start(self, stream_id: int, headers: dict[str, str]) -> None:
        def run() -> None:
            try:
                self.peer.handler(self, stream_id, headers)
            finally:
                with self.lock:
                    self.open_streams.discard(stream_id)

        threading.Thread(target=run, daemon=True).start()


class HostileH2:
    """Listens on 127.0.0.1; `handler(session, stream_id, request_headers)` answers each request in a thread of its
    own (so streams of one connection run side by side). `settings` go in the server preface; with
    `ack_settings=False` the gateway's SETTINGS are never acknowledged."""

    def __init__(
        self,
        handler: Handler = ok,
        settings: dict[h2.settings.SettingCodes, int] | None = None,
        ack_settings: bool = True,
        on_connect: Callable[[Session], None] | None = None,
    ) -> None:
        self.handler = handler
        self.settings = settings or {}
        self.ack_settings = ack_settings
        self.on_connect = on_connect
        self.sessions: list[Session] = []
        self.requests = 0
        self.max_open = 0  # the most streams open at once on any one connection
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        accept_each(self.listener, self._admit)

    def _admit(self, sock: socket.socket) -> None:
        session = Session(self, sock)
        if self.settings:
            session.conn.local_settings = h2.settings.Settings(client=False, initial_values=self.settings)
            table = self.settings.get(h2.settings.SettingCodes.HEADER_TABLE_SIZE)
            if table is not None:  # h2 applies it to its decoder only when a change is acknowledged
                session.conn.decoder.max_allowed_table_size = table
        self.sessions.append(session)
        self._run(session)

    def _run(self, session: Session) -> None:
        if self.on_connect is not None:
            threading.Thread(target=self.on_connect, args=(session,), daemon=True).start()
        session.serve()

    def resets(self) -> list[tuple[int, int]]:
        return [r for s in self.sessions for r in s.resets]

    def close(self) -> None:
        self.listener.close()
        for session in self.sessions:
            with contextlib.suppress(OSError):
                session.sock.shutdown(socket.SHUT_RDWR)


def _without_settings_acks(data: bytes) -> bytes:
    """`data` is whole frames (h2's output): drop the SETTINGS frames flagged ACK."""
    out = bytearray()
    at = 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at : at + 3], "big")
        kind, flags = data[at + 3], data[at + 4]
        end = at + 9 + length
        if not (kind == 0x4 and flags & 0x1):
            out += data[at:end]
        at = end
    return bytes(out)


def pings(count: int) -> bytes:
    return bytes(PingFrame(0, opaque_data=b"\0" * 8).serialize()) * count


def empty_settings(count: int) -> bytes:
    return bytes(SettingsFrame(0).serialize()) * count


def frames(*items: Frame) -> bytes:
    return b"".join(bytes(f.serialize()) for f in items)
