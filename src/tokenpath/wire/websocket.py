"""WebSocket (RFC 6455), sans-IO over wsproto: the server's answer to an upgrade offer, and one endpoint object for
either side that turns bytes into whole messages under limits.

    offer = websocket_key(request.headers)        # the Sec-WebSocket-Key of a valid offer, else OfferRefused
    head = switching_protocols(offer)             # the 101 head to write
    ws = WebSocketEndpoint.server(limits)         # frames only: the handshake was ours
    for event in ws.receive(data, t_ns): ...      # MessageReceived (text, whole), Closed; pongs, close replies queued
    sock.write(ws.data_to_send())

    ws = WebSocketEndpoint.client(host, target, headers, limits)   # wsproto's handshake (h11) and masking
    ws.data_to_send()                             # the upgrade request
    ws.receive(data, t_ns) -> Upgraded(status) | UpgradeRefused(status, headers, body) | MessageReceived ...

wsproto hands a frame's payload over as it arrives (a 2^63-byte frame header costs nothing until its bytes do), so the
message limit is checked on every piece; control frames are at most 125 bytes (wsproto's rule); a client's frames
must be masked and a server's not (wsproto's rule: a ParseFailed, answered with its close code). Pings are answered,
within a token bucket: a flood past it closes the connection (1008) instead of queueing pongs.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection, ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from tokenpath import errors
from tokenpath.wire.framing import find_header

__all__ = [
    "CLOSED_UNANSWERED",
    "CLOSE_GOING_AWAY",
    "CLOSE_NORMAL",
    "Closed",
    "MessageReceived",
    "OfferRefused",
    "PingReceived",
    "PongReceived",
    "UpgradeRefused",
    "Upgraded",
    "WebSocketEndpoint",
    "WebSocketLimits",
    "WsEvent",
    "accept_token",
    "is_websocket_offer",
    "switching_protocols",
    "websocket_key",
]

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 1.3
CLOSE_NORMAL = int(CloseReason.NORMAL_CLOSURE)
CLOSE_GOING_AWAY = int(CloseReason.GOING_AWAY)
CLOSE_ABNORMAL = int(CloseReason.ABNORMAL_CLOSURE)  # 1006: the socket ended without a close frame (never sent)
CLOSE_POLICY = int(CloseReason.POLICY_VIOLATION)
CLOSE_TOO_BIG = int(CloseReason.MESSAGE_TOO_BIG)
CLOSE_UNSUPPORTED = int(CloseReason.UNSUPPORTED_DATA)

# A response.create body is a POST /v1/responses body: the stub's MAX_BODY_BYTES holds it too.
MAX_MESSAGE_BYTES = 1 << 20
MAX_FRAGMENTS = 1024  # frames in one message: a message split into 1-byte frames costs a frame header per byte
PING_BURST = 100  # pings answered at once ...
PINGS_PER_S = 10  # ... and refilled at this rate; a flood past them closes with 1008 rather than queue pongs
MAX_UPGRADE_HEAD_BYTES = 64 << 10  # a refused upgrade's head and the body bytes kept of it
CLOSED_UNANSWERED = b"the connection closed without an answer"


@dataclass(frozen=True, slots=True)
class WebSocketLimits:
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_fragments: int = MAX_FRAGMENTS
    ping_burst: int = PING_BURST
    pings_per_s: float = PINGS_PER_S


class OfferRefused(errors.RemoteProtocolError):
    """An upgrade offer this server cannot take (the peer's malformed request): `status` (400, or 426 with the
    version it speaks), also its status hint."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message, status)
        self.status = status


@dataclass(frozen=True, slots=True)
class Upgraded:
    """The server answered 101 with the right Sec-WebSocket-Accept: messages follow."""

    status: int
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class UpgradeRefused:
    """The server (or a proxy in the path) answered the offer with anything but a valid 101."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes  # its first bytes (at most MAX_UPGRADE_HEAD_BYTES), for the message


@dataclass(frozen=True, slots=True)
class MessageReceived:
    text: str
    nbytes: int  # its UTF-8 payload bytes
    fragments: int


@dataclass(frozen=True, slots=True)
class PingReceived:
    answered: bool


@dataclass(frozen=True, slots=True)
class PongReceived:
    """The answer to a ping of ours (ping()): the peer is alive and reading."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """The connection's end as WebSocket saw it: `by_peer` (the peer's close frame, or its protocol error that we
    answered), the code and reason; 1006 when the socket ended without a close frame."""

    code: int
    reason: str
    by_peer: bool


WsEvent = Upgraded | UpgradeRefused | MessageReceived | PingReceived | PongReceived | Closed


def is_websocket_offer(headers: Iterable[tuple[str, str]]) -> bool:
    upgrade = find_header(list(headers), "upgrade")
    return upgrade is not None and "websocket" in {p.strip().lower() for p in upgrade.split(",")}


def websocket_key(method: str, headers: Iterable[tuple[str, str]]) -> str:
    """The offer's Sec-WebSocket-Key, checked as RFC 6455 4.2.1 asks; raises OfferRefused."""
    fields = list(headers)
    if method != "GET":
        raise OfferRefused(f"a WebSocket upgrade is a GET, not a {method}")
    connection = find_header(fields, "connection") or ""
    if "upgrade" not in {t.strip().lower() for t in connection.split(",")}:
        raise OfferRefused("a WebSocket upgrade needs `Connection: Upgrade`")
    version = find_header(fields, "sec-websocket-version")
    if version != "13":
        raise OfferRefused(f"WebSocket version {version!r} is not spoken here; 13 is", 426)
    key = find_header(fields, "sec-websocket-key") or ""
    try:
        raw = base64.b64decode(key, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise OfferRefused("Sec-WebSocket-Key must be 16 bytes in base64")
    return key


def accept_token(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + GUID).digest()).decode("ascii")


def switching_protocols(key: str, headers: Iterable[tuple[str, str]] = ()) -> bytes:
    """The 101 head that accepts an offer (no extension, no subprotocol: permessage-deflate is never agreed)."""
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {accept_token(key)}",
        *(f"{k}: {v}" for k, v in headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class WebSocketEndpoint:
    """One side of a WebSocket connection: bytes in, whole text messages out; what it must answer (pongs, the close
    reply, a close for a limit) is queued for data_to_send()."""

    def __init__(self, conn: Connection | WSConnection, limits: WebSocketLimits, upgraded: bool) -> None:
        self._conn = conn
        self.limits = limits
        self.upgraded = upgraded  # False on a client until the 101 arrives
        self._out = bytearray()
        self._parts: list[str] = []
        self._bytes = 0
        self._fragments = 0
        self._tokens = float(limits.ping_burst)
        self._refilled_ns: int | None = None
        self._rejected: tuple[int, tuple[tuple[str, str], ...]] | None = None
        self._reject_body = bytearray()
        self.closed: Closed | None = None
        self.pongs = 0  # pongs the peer sent (answers to our pings: a client's keep-alive, probe --ws-ping-s)

    @classmethod
    def server(cls, limits: WebSocketLimits) -> WebSocketEndpoint:
        """After our own 101 (switching_protocols): frames only."""
        return cls(Connection(ConnectionType.SERVER), limits, upgraded=True)

    @classmethod
    def client(
        cls, host: str, target: str, headers: Iterable[tuple[str, str]], limits: WebSocketLimits
    ) -> WebSocketEndpoint:
        """The upgrade request is queued at once; wsproto checks the 101 (its Sec-WebSocket-Accept) and masks."""
        conn = WSConnection(ConnectionType.CLIENT)
        ws = cls(conn, limits, upgraded=False)
        ws._out += conn.send(
            Request(
                host=host, target=target, extra_headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
            )
        )
        return ws

    # output -----------------------------------------------------------------------------------------
    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def send_text(self, text: str) -> bytes:
        """One whole text message's frame (a server's is unmasked, so the same text is the same bytes)."""
        return self._conn.send(TextMessage(data=text))

    def ping(self, payload: bytes = b"") -> bytes:
        """Our ping (a client's is masked; a PongReceived comes back, counted in `pongs`); nothing once the connection
        is closing or closed."""
        if self._conn.state is not ConnectionState.OPEN:
            return b""
        return self._conn.send(Ping(payload=payload))

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> bytes:
        """Our close frame (nothing once the connection is closing or closed)."""
        if self._conn.state is not ConnectionState.OPEN and self._conn.state is not ConnectionState.REMOTE_CLOSING:
            return b""
        if self.closed is None:
            self.closed = Closed(code, reason, by_peer=False)
        return self._conn.send(CloseConnection(code=code, reason=reason or None))

    # input ------------------------------------------------------------------------------------------
    def receive(self, data: bytes, t_ns: int) -> list[WsEvent]:
        """The events these bytes complete; b"" is the socket's end."""
        if self.closed is not None and self._conn.state is ConnectionState.CLOSED:
            return []
        out: list[WsEvent] = []
        if not data and not self.upgraded and self._rejected is None:  # the peer hung up on the offer
            self.closed = Closed(CLOSE_ABNORMAL, "", by_peer=True)
            return [UpgradeRefused(0, (), CLOSED_UNANSWERED)]
        try:
            self._conn.receive_data(data if data else None)
            for event in self._conn.events():
                self._handle(event, t_ns, out)
                if isinstance(event, CloseConnection) or self._limit_closed(out):
                    break  # nothing after a close is read
        except LocalProtocolError:
            return out
        except RemoteProtocolError as exc:  # a client's handshake: a malformed answer, a 101 with a wrong accept
            if self.upgraded:
                raise
            self.closed = Closed(CLOSE_ABNORMAL, str(exc), by_peer=True)
            return [*out, UpgradeRefused(0, (), str(exc).encode())]  # 0: no valid answer (wsproto's hint is a guess)
        if not data and self._rejected is not None:
            out.append(UpgradeRefused(*self._rejected, bytes(self._reject_body)))
            self._rejected = None
        return out

    def pending_refusal(self) -> UpgradeRefused | None:
        """A refused upgrade whose body is still arriving: its head and the body so far (the caller may not wait)."""
        if self._rejected is None:
            return None
        return UpgradeRefused(*self._rejected, bytes(self._reject_body))

    def _limit_closed(self, out: list[WsEvent]) -> bool:
        return bool(out) and isinstance(out[-1], Closed) and not out[-1].by_peer

    def _handle(self, event: Event, t_ns: int, out: list[WsEvent]) -> None:
        if isinstance(event, AcceptConnection):
            self.upgraded = True
            out.append(Upgraded(101, tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in event.extra_headers)))
        elif isinstance(event, RejectConnection):
            headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers)
            if event.has_body:
                self._rejected = (event.status_code, headers)
            else:
                out.append(UpgradeRefused(event.status_code, headers, b""))
        elif isinstance(event, RejectData):
            if self._rejected is not None:
                room = MAX_UPGRADE_HEAD_BYTES - len(self._reject_body)
                self._reject_body += event.data[: max(room, 0)]
                if event.body_finished or room <= 0:
                    out.append(UpgradeRefused(*self._rejected, bytes(self._reject_body)))
                    self._rejected = None
        elif isinstance(event, TextMessage):
            self._piece(event, out)
        elif isinstance(event, BytesMessage):
            self._close_for(CLOSE_UNSUPPORTED, "binary messages are not spoken here", out)
        elif isinstance(event, Ping):
            answered = self._take_ping_token(t_ns)
            if not answered:
                self._close_for(CLOSE_POLICY, "ping flood", out)
                return
            self._out += self._conn.send(event.response())
            out.append(PingReceived(answered=True))
        elif isinstance(event, Pong):
            self.pongs += 1
            out.append(PongReceived(bytes(event.payload)))
        elif isinstance(event, CloseConnection):
            self._closed_by_peer(event, out)

    def _piece(self, event: Message[str], out: list[WsEvent]) -> None:
        self._parts.append(event.data)
        self._bytes += len(event.data.encode("utf-8"))
        if event.frame_finished:
            self._fragments += 1
        if self._bytes > self.limits.max_message_bytes:
            self._close_for(CLOSE_TOO_BIG, f"a message over {self.limits.max_message_bytes} bytes", out)
        elif self._fragments > self.limits.max_fragments:
            self._close_for(CLOSE_POLICY, f"a message in over {self.limits.max_fragments} frames", out)
        elif event.message_finished:
            out.append(MessageReceived("".join(self._parts), self._bytes, self._fragments))
            self._parts.clear()
            self._bytes = 0
            self._fragments = 0

    def _closed_by_peer(self, event: CloseConnection, out: list[WsEvent]) -> None:
        code, reason = int(event.code), event.reason or ""
        if self._conn.state is ConnectionState.OPEN:  # the peer broke the protocol (wsproto's ParseFailed): we close
            self._close_for(code, reason, out)
            return
        if self._conn.state is ConnectionState.REMOTE_CLOSING:
            # The peer's close (or its protocol error, which wsproto reports as one with the code to answer).
            self._out += self._conn.send(event.response())
        if self.closed is None:
            self.closed = Closed(code, reason, by_peer=True)
        out.append(Closed(code, reason, by_peer=True))

    def _close_for(self, code: int, reason: str, out: list[WsEvent]) -> None:
        """A limit: our close frame, then nothing more is read."""
        self._parts.clear()
        self._out += self.close(code, reason)
        out.append(Closed(code, reason, by_peer=False))

    def _take_ping_token(self, t_ns: int) -> bool:
        if self._refilled_ns is not None:
            elapsed_s = (t_ns - self._refilled_ns) / 1e9
            self._tokens = min(float(self.limits.ping_burst), self._tokens + elapsed_s * self.limits.pings_per_s)
        self._refilled_ns = t_ns
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
