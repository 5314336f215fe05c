"""The one connect path to a member, for both of the gateway's upstream pools (gateway/upstream.py: HTTP/1.1,
gateway/h2upstream.py: HTTP/2), shaped like httpcore's `_async/connection.py`: one connection object (UpstreamLink)
does the TCP connect (TCP_NODELAY) within the connect timeout, TLS with SNI, the pool's CA and client certificate,
the last TLS session resumed, and then lets ALPN choose the protocol it carries: the pool names the protocols it
speaks, most wanted first (`{"h2": ..., "http/1.1": ...}`), and the link builds the one the member picked (in clear
text the first: HTTP/2 with prior knowledge, or HTTP/1.1; over TLS without ALPN, HTTP/1.1).

TLS is ours (gateway/tls.py, over MemoryBIO), so the link is the only place that sees ciphertext: the protocol above
it reads and writes plaintext, whatever the pool. A TLS failure is a connect failure while the handshake runs (failed
over before the first byte, `errors_total{reason="tls"}`); a member's close_notify is answered and the connection
closed at once (a stale keep-alive would otherwise meet a reset)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, cast

from tokenpath.errors import NetworkError
from tokenpath.gateway.failures import Failure, FailureKind, connect_failure
from tokenpath.gateway.tls import TLSClient, describe
from tokenpath.hostport import join_hostport

HTTP1 = "http/1.1"
H2 = "h2"


class AttemptFailed(NetworkError):
    """An attempt at a member failed before the request went out (connect, TLS, local resources)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(str(failure))
        self.failure = failure


@dataclass(slots=True)
class Origin:
    """A member as its pool connects to it, and what the pool's connections share: the TLS context (the pool's CA,
    client certificate and ALPN), the last TLS session (each new connection resumes it), the handshake counter."""

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    on_handshake: Callable[[bool], None] | None = None  # called with whether the session was resumed
    session: ssl.SSLSession | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        return join_hostport(self.host, self.port)

    @property
    def server_hostname(self) -> str:
        """SNI, and the name the member's certificate must carry."""
        return self.host


class Speaker(Protocol):
    """A protocol connection over a link (HTTP/1.1 or HTTP/2): the link hands it plaintext and news."""

    def received(self, data: bytes) -> None:
        """One read's plaintext."""

    def broken(self, failure: Failure) -> None:
        """TLS failed on the established connection (a bad record, an alert): it is being dropped."""

    def peer_closing(self) -> None:
        """The member's close_notify: it ends this connection (answered and closed by the link already)."""

    def lost(self, exc: Exception | None) -> None:
        """The connection is gone."""


SpeakerFactory = Callable[["UpstreamLink"], Speaker]


class UpstreamLink(asyncio.Protocol):
    """One connection to a member: TCP, TLS when the pool has a context, and the protocol ALPN chose on top."""

    def __init__(self, origin: Origin, protocols: Mapping[str, SpeakerFactory]) -> None:
        self.origin = origin
        self.protocols = protocols
        self.tls = TLSClient(origin.tls, origin.server_hostname, origin.session) if origin.tls is not None else None
        self.transport: asyncio.Transport | None = None
        self.speaker: Speaker | None = None
        self.protocol = ""  # the one chosen: HTTP1 or H2
        # Resolved once the connection can carry a request (the protocol settles it: HTTP/1.1 at once, HTTP/2 on the
        # member's SETTINGS), or with why it never will.
        self.ready: asyncio.Future[Failure | None] = asyncio.get_running_loop().create_future()

    # for the speaker -------------------------------------------------------------------------------------------
    def settle(self, failure: Failure | None) -> None:
        if not self.ready.done():
            self.ready.set_result(failure)

    def write(self, data: bytes) -> None:
        """Plaintext out (encrypted here over TLS; ssl.SSLError if TLS is broken)."""
        assert self.transport is not None
        self.transport.write(self.tls.encrypt(data) if self.tls is not None else data)

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    @property
    def closed_by_peer(self) -> bool:
        """The member sent close_notify: only that ends a close-delimited body over TLS (RFC 9112 9.8)."""
        return self.tls is not None and self.tls.closed_by_peer

    def keep_session(self) -> bool:
        """Hand this connection's TLS session to the pool's next connections; False while there is none (TLS 1.3
        tickets arrive after the handshake)."""
        session = self.tls.session if self.tls is not None else None
        if session is None:
            return False
        self.origin.session = session
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # asyncio ---------------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is None:
            self._speak(next(iter(self.protocols)))  # prior knowledge: the pool's first choice
        else:
            self.transport.write(self.tls.start())

    def data_received(self, data: bytes) -> None:
        speaker = self.speaker
        tls = self.tls
        if tls is None and speaker is not None:
            speaker.received(data)  # the relay's path in clear text: one call, no copy
            return
        assert tls is not None
        assert self.transport is not None
        try:
            data, reply = tls.receive(data)
        except ssl.SSLError as exc:
            self._broken(Failure(FailureKind.TLS, f"TLS with {self.origin.where}: {describe(exc)}"))
            return
        transport = self.transport
        if reply:
            transport.write(reply)
        if speaker is None:
            if not tls.handshaken:
                return
            speaker = self._speak_alpn(tls.alpn)
            if speaker is None:
                return
        if tls.closed_by_peer and not transport.is_closing():
            # close_notify: the member is done with this connection (an idle timeout, a restart). Answer it and close
            # now, or the next request would go out on it and meet a reset.
            transport.write(tls.close_notify())
            transport.close()
            speaker.peer_closing()
        if data:
            speaker.received(data)

    def pause_writing(self) -> None:
        """The member reads slower than we write: a speaker that relays a client's bytes (gateway/wsupstream.py)
        stops reading that client; the HTTP speakers send only a request, whose body is already held."""
        paused = getattr(self.speaker, "writing_paused", None)
        if paused is not None:
            paused()

    def resume_writing(self) -> None:
        resumed = getattr(self.speaker, "writing_resumed", None)
        if resumed is not None:
            resumed()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.speaker is None:
            self.settle(Failure(FailureKind.CONNECT, f"{self.origin.where} closed during the TLS handshake"))
            return
        self.speaker.lost(exc)

    # internals -------------------------------------------------------------------------------------------------
    def _speak_alpn(self, alpn: str | None) -> Speaker | None:
        chosen = alpn or HTTP1  # a member that does not do ALPN speaks HTTP/1.1 (RFC 7301 3.2)
        if chosen not in self.protocols:
            offered = ", ".join(self.protocols)
            self._broken(Failure(FailureKind.TLS, f"{self.origin.where} chose {chosen} by ALPN (offered: {offered})"))
            return None
        return self._speak(chosen)

    def _speak(self, protocol: str) -> Speaker:
        self.protocol = protocol
        self.speaker = speaker = self.protocols[protocol](self)
        return speaker

    def _broken(self, failure: Failure) -> None:
        self.settle(failure)
        if self.speaker is not None:
            self.speaker.broken(failure)
        self.abort()


async def connect(origin: Origin, timeout_s: float, protocols: Mapping[str, SpeakerFactory]) -> Speaker:
    """A new connection to `origin`, ready for a request within `timeout_s` (TCP, TLS, and for HTTP/2 the member's
    SETTINGS), speaking the protocol the member chose of `protocols`. Raises AttemptFailed with the reason."""
    loop = asyncio.get_running_loop()
    link: UpstreamLink | None = None

    def factory() -> UpstreamLink:
        nonlocal link
        link = UpstreamLink(origin, protocols)
        return link

    async def attempt() -> Failure | None:
        await loop.create_connection(factory, origin.host, origin.port)
        assert link is not None
        return await link.ready

    try:
        failure = await asyncio.wait_for(attempt(), timeout_s)
    except TimeoutError:
        if link is not None:
            link.abort()
        what = "connect (and TLS handshake)" if origin.tls is not None else "connect"
        raise AttemptFailed(
            Failure(FailureKind.CONNECT_TIMEOUT, f"{what} to {origin.where} timed out after {timeout_s:g} s")
        ) from None
    except OSError as exc:
        raise AttemptFailed(connect_failure(exc, origin.where)) from None
    assert link is not None
    if failure is not None:
        link.abort()
        raise AttemptFailed(failure)
    assert link.speaker is not None
    if link.tls is not None and origin.on_handshake is not None:
        origin.on_handshake(link.tls.resumed)
    return link.speaker
