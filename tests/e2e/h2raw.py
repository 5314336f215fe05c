"""A blocking HTTP/2 client on a real socket (the h2 library's state machine): what the e2e tests use to open streams,
hold windows closed, reset streams and send raw frames that a well-behaved client library never would."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings

CHAT = {"model": "tokenpath-stub", "messages": [{"role": "user", "content": "hi"}], "stream": True}


class RawH2:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        window: int | None = None,
        read_settings: bool = True,
        timeout_s: float = 10.0,
    ) -> None:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        if window is not None:  # the stream window every stream starts with (the connection's stays 65,535)
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.authority = f"{host}:{port}".encode()
        self.events: list[h2.events.Event] = []
        self.data: dict[int, bytearray] = {}
        self.ended: set[int] = set()
        self.resets: dict[int, int] = {}
        self.heads: dict[int, dict[bytes, bytes]] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.closed = False
        self.settings_seen = False  # the server's first SETTINGS arrived
        self.flush()
        if read_settings:
            self.wait(lambda: self.settings_seen, 5.0)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(
        self,
        body: dict[str, Any] | None = None,
        path: str = "/v1/chat/completions",
        token: str | None = None,
        flush: bool = True,
    ) -> int:
        """Opens a stream; flush=False leaves it queued, for several streams to leave in one write."""
        sid = self.conn.get_next_available_stream_id()
        raw = json.dumps(body if body is not None else CHAT).encode()
        headers = [(b":method", b"POST"), (b":path", path.encode()), (b":scheme", b"http"),
                   (b":authority", self.authority), (b"content-type", b"application/json"),
                   (b"content-length", str(len(raw)).encode())]  # fmt: skip
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        self.conn.send_headers(sid, headers)
        self.conn.send_data(sid, raw, end_stream=True)
        if flush:
            self.flush()
        return sid

    def pump(self, timeout_s: float, ack: Callable[[int], bool] = lambda sid: True) -> bool:
        """One read (up to `timeout_s`); DATA is acknowledged on the streams `ack` says. False: nothing came."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(1 << 16)
        except (TimeoutError, ssl.SSLWantReadError):
            return False
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            return False
        for event in self.conn.receive_data(data):
            self.events.append(event)
            if isinstance(event, h2.events.ResponseReceived) and event.stream_id is not None:
                self.heads[event.stream_id] = dict(event.headers or [])
            elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
                self.data.setdefault(event.stream_id, bytearray()).extend(event.data or b"")
                if ack(event.stream_id):
                    self.conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id is not None:
                self.ended.add(event.stream_id)
            elif isinstance(event, h2.events.StreamReset) and event.stream_id is not None:
                self.resets[event.stream_id] = int(event.error_code or 0)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = event
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self.settings_seen = True
        self.flush()
        return True

    def wait(
        self, done: Callable[[], bool], timeout_s: float = 20.0, ack: Callable[[int], bool] = lambda s: True
    ) -> bool:
        deadline = time.monotonic() + timeout_s
        while not done() and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.pump(min(left, 0.5), ack)
        return done()

    def close(self) -> None:
        self.sock.close()
