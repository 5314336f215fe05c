"""Raw WebSocket peers for the gateway's tests: frames written and read by hand (so a test can send what no library
sends: unmasked, fragmented, compressed, oversized), a raw client's upgrade, and a scripted member (WsMember) that
records every frame it gets."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.helpers import accept_each
from tests.wssession import accept_101, offer_key

TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 1, 2, 8, 9, 10, 0
CREATE = {"type": "response.create", "model": "m", "input": "hi"}


@dataclass(frozen=True)
class Frame:
    fin: bool
    opcode: int
    payload: bytes
    rsv1: bool = False

    @property
    def close_code(self) -> int:
        assert self.opcode == CLOSE
        return int(struct.unpack("!H", self.payload[:2])[0]) if len(self.payload) >= 2 else 1005

    @property
    def close_reason(self) -> str:
        return self.payload[2:].decode("utf-8", "replace")


def frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bool = True, rsv1: bool = False) -> bytes:
    first = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        length = bytes([n])
    elif n < 1 << 16:
        length = bytes([126]) + struct.pack("!H", n)
    else:
        length = bytes([127]) + struct.pack("!Q", n)
    if not mask:
        return bytes([first]) + length + payload
    key = os.urandom(4)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) if n < 4096 else _mask_fast(payload, key)
    return bytes([first, length[0] | 0x80]) + length[1:] + key + masked


def _mask_fast(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    repeated = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")


def text(obj: Any, *, mask: bool = True) -> bytes:
    return frame(TEXT, json.dumps(obj).encode(), mask=mask)


def close(code: int, reason: str = "", *, mask: bool = True) -> bytes:
    return frame(CLOSE, struct.pack("!H", code) + reason.encode(), mask=mask)


class FrameReader:
    def __init__(self, sock: socket.socket, data: bytes = b"") -> None:
        self.sock = sock
        self.buf = bytearray(data)

    def _need(self, n: int) -> bool:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    def next(self) -> Frame | None:
        """The next frame, or None when the socket ended."""
        if not self._need(2):
            return None
        b0, b1 = self.buf[0], self.buf[1]
        n, at = b1 & 0x7F, 2
        if n == 126:
            if not self._need(4):
                return None
            n, at = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            if not self._need(10):
                return None
            n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
        key = b""
        if b1 & 0x80:
            if not self._need(at + 4):
                return None
            key, at = bytes(self.buf[at : at + 4]), at + 4
        if not self._need(at + n):
            return None
        payload = bytes(self.buf[at : at + n])
        del self.buf[: at + n]
        if key:
            payload = _mask_fast(payload, key) if payload else b""
        return Frame(bool(b0 & 0x80), b0 & 0x0F, payload, bool(b0 & 0x40))

    def frames(self) -> list[Frame]:
        """Every frame until the socket ends (or times out)."""
        out: list[Frame] = []
        with contextlib.suppress(OSError):
            while (f := self.next()) is not None:
                out.append(f)
        return out

    def until_close(self, within_s: float | None = None) -> list[Frame]:
        """Every frame up to the close (or the socket's end, or its timeout); with `within_s`, also up to that many
        seconds: a peer that keeps sending without ever closing (pings) cannot hold the test forever."""
        out: list[Frame] = []
        deadline = None if within_s is None else time.monotonic() + within_s
        with contextlib.suppress(OSError):
            while (f := self.next()) is not None:
                out.append(f)
                if f.opcode == CLOSE or (deadline is not None and time.monotonic() > deadline):
                    break
        return out


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def offer(path: str = "/v1/responses", extra: str = "") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    ).encode()


def upgrade(
    port: int, path: str = "/v1/responses", extra: str = "", timeout: float = 10
) -> tuple[int, bytes, socket.socket]:
    """A raw client's upgrade: (status, the head and any bytes after it, the socket)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(offer(path, extra))
    head, rest = read_head(sock)
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return status, head + b"\r\n\r\n" + rest, sock


def session(port: int, extra: str = "") -> tuple[socket.socket, FrameReader]:
    """A raw client's upgrade that must be a 101: its socket, and a reader of the frames that follow the head."""
    status, raw, sock = upgrade(port, extra=extra)
    assert status == 101, raw[:300]
    return sock, FrameReader(sock, raw.partition(b"\r\n\r\n")[2])


Script = Callable[[socket.socket, bytes, FrameReader], None]


@dataclass
class WsMember:
    """A scripted member: answers each upgrade with `script(conn, head, reader)` (answer_101 first, for a 101) and
    records the heads and the frames its script read."""

    script: Script
    tls: ssl.SSLContext | None = None  # a member over TLS (https://)
    heads: list[bytes] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        scheme = "https" if self.tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._listener.getsockname()[1]}"
        accept_each(self._listener, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:
                conn.close()
                return
        with conn, contextlib.suppress(OSError):
            conn.settimeout(20)
            head, rest = read_head(conn)
            self.heads.append(head)
            self.script(conn, head, RecordingReader(conn, rest, self.frames))
        self.done.set()

    def close(self) -> None:
        self._listener.close()


class RecordingReader(FrameReader):
    def __init__(self, sock: socket.socket, data: bytes, record: list[Frame]) -> None:
        super().__init__(sock, data)
        self.record = record

    def next(self) -> Frame | None:
        f = super().next()
        if f is not None:
            self.record.append(f)
        return f


def answer_101(conn: socket.socket, head: bytes) -> None:
    conn.sendall(accept_101(offer_key(head)))


def pong_member(first: bytes = b"") -> WsMember:
    """Answers 101, writes `first`, answers pings, records frames until the close, which it answers."""

    def script(conn: socket.socket, head: bytes, reader: FrameReader) -> None:
        answer_101(conn, head)
        if first:
            conn.sendall(first)
        for f in iter(reader.next, None):
            if f.opcode == PING:
                conn.sendall(frame(PONG, f.payload, mask=False))
            if f.opcode == CLOSE:
                conn.sendall(close(f.close_code, mask=False))
                return

    return WsMember(script)
