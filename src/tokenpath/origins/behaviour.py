"""What an origin does besides pacing, read off the wire: how it frames a stream for an HTTP/1.0 request (the
request stock nginx sends upstream), and the headers of stub/presets.py's ORIGIN_HEADERS it sends. The probe always
speaks HTTP/1.1; this is the one HTTP/1.0 request tokenpath writes, on the probe's transport seam."""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass

from tokenpath.errors import IdleTimeout, RemoteProtocolError, ResponseTooLarge, TotalTimeout
from tokenpath.probe.client import ProbeConfig, network_error, new_stream_id, request_bytes
from tokenpath.probe.transport import open_connection
from tokenpath.stub.presets import Http10Framing, OriginBehaviour, relevant_headers
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.framing import Framing

MAX_HTTP10_BODY_BYTES = 4 << 20  # a recording's whole file (stub/replay.py MAX_RECORDING_BYTES): its answer fits


@dataclass(frozen=True, slots=True)
class Http10Answer:
    """The head of an origin's answer to an HTTP/1.0 streaming request, and how its body was delimited."""

    status: int
    framing: Framing  # as the head said: chunked, close, or a Content-Length (a whole answer)
    headers: tuple[tuple[str, str], ...]
    body_bytes: int

    @property
    def behaviour(self) -> OriginBehaviour:
        """Chunked to HTTP/1.0, or not (close-delimited, or a whole answer with its length: either is held by a
        proxy that buffers what it cannot stream), and the headers a path acts on."""
        framing: Http10Framing = "chunked" if self.framing is Framing.CHUNKED else "close"
        return OriginBehaviour(framing, relevant_headers(list(self.headers)))


def http10_request(cfg: ProbeConfig, stream_id: str) -> bytes:
    """The probe's own request for `cfg`, its request line in HTTP/1.0 (Host stays: HTTP/1.0 allows it, and a
    virtual host needs it); `Connection: close`, as nginx sends upstream."""
    request = request_bytes(cfg, cfg.target, stream_id)
    line, sep, rest = request.partition(b"\r\n")
    assert line.endswith(b" HTTP/1.1"), line
    return line[: -len(b"1.1")] + b"1.0" + sep + rest


def http10_answer(cfg: ProbeConfig, timeout_s: float = 120.0) -> Http10Answer:
    """Send `cfg`'s streaming request in HTTP/1.0 and read the answer to its end (the origin closes it): the head's
    framing and headers. RemoteProtocolError for a body that is not delimited as its head says."""
    parser = ResponseParser("POST")
    transport = open_connection(cfg.target, connect_timeout_s=cfg.connect_deadline_s, tls=cfg.tls)
    deadline = time.monotonic() + timeout_s
    last_data = time.monotonic()
    body = 0
    try:
        try:
            transport.sendall(http10_request(cfg, new_stream_id()))
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as exc:
            raise network_error(exc) from None
        while not parser.complete:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TotalTimeout(f"no whole HTTP/1.0 answer from {cfg.target.origin} in {timeout_s:.0f} s")
            try:
                data = transport.recv(min(left, cfg.idle_timeout_s))
            except TimeoutError:
                if time.monotonic() - last_data >= cfg.idle_timeout_s:  # a server that holds: not for 120 s
                    raise IdleTimeout(
                        f"{cfg.target.origin} sent nothing for {cfg.idle_timeout_s:g} s of its HTTP/1.0 answer"
                    ) from None
                continue  # the deadline above decides
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as exc:  # as probe names it: no traceback
                raise network_error(exc) from None
            if not data:
                parser.feed_eof()
                break
            last_data = time.monotonic()
            body += len(parser.feed(data))
            if body > MAX_HTTP10_BODY_BYTES:  # a flood was read to the deadline: what a recording can hold, at most
                raise ResponseTooLarge(f"an HTTP/1.0 answer larger than {MAX_HTTP10_BODY_BYTES} bytes")
    finally:
        transport.close()
    head = parser.head
    if head is None:
        raise RemoteProtocolError(f"{cfg.target.origin} closed before a response head to an HTTP/1.0 request")
    return Http10Answer(head.status, head.framing, head.headers, body)
