"""What one HTTP/1.1 server connection accepts, defined once for every server in the package (stub, gateway)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 16 << 10  # request line + headers; nginx's large_client_header_buffers default is 4 x 8k
REQUEST_TIMEOUT_S = 30.0  # an idle connection, or one that has not sent a whole request by then, is closed
MAX_PIPELINED = 16  # requests queued behind a running response before the connection is refused more
LISTEN_BACKLOG = 4096  # connections a burst of clients can queue before accept() catches up
WRITE_BUFFER_HIGH = 64 << 10  # bytes queued for a slow client before the response's producer is paused


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int
    max_head_bytes: int = MAX_HEAD_BYTES
    max_pipelined: int = MAX_PIPELINED
    request_timeout_s: float = REQUEST_TIMEOUT_S
    write_buffer_high: int = WRITE_BUFFER_HIGH
    # Protocols a request may offer to upgrade to and be handed to the handler (the stub's "websocket"); any other
    # offer but h2c's (which is ignored) is refused 400, as before.
    upgrades: frozenset[str] = frozenset()
