"""Broken and hostile targets for the monitor, one behaviour per loopback port (tests/probe/hostile.py's servers,
plus the ones a long-running monitor meets that the probe's battery lacks: invalid UTF-8, a redirect loop, a TLS
peer that accepts TCP and never answers the handshake). Each behaviour's outcome is named in FLEET.

Run as one process serving them all, for the 100-target test (tests/e2e/test_monitor_reliability.py):

    python -m tests.monitor.hostile_fleet CERT KEY     # one `KIND URL` line per behaviour, then serves until killed
"""

from __future__ import annotations

import socket
import sys
import threading

from tests.probe.hostile import KINDS, Hostile, _read_request, server_context

INVALID_UTF8_FRAMES = (
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
    + b'data: {"choices":[{"delta":{"content":"\xff\xfe"}}]}\n\n' * 3  # not UTF-8: not JSON, not an event stream
    + b"data: [DONE]\n\n"
)


def invalid_utf8(conn: socket.socket) -> None:
    """A well-framed stream whose content frames are not UTF-8 (and a reason phrase that is not either)."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 \xff\xfe\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                 + INVALID_UTF8_FRAMES)  # fmt: skip


def redirect_loop(conn: socket.socket) -> None:
    """302 to the very URL asked for, with credentials and a token the message must not repeat: followed, it would
    never end; the probe follows no redirect."""
    _read_request(conn)
    port = conn.getsockname()[1]
    conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://user:pw@127.0.0.1:%d/v1/chat/completions?token=t0ken\r\n"
                 b"Content-Length: 0\r\n\r\n" % port)  # fmt: skip


def tls_stall(conn: socket.socket) -> None:
    """(raw TCP, for an https URL) takes the ClientHello and never answers it, until the client gives up."""
    while conn.recv(65536):
        pass


ALL = {**KINDS, "invalid_utf8": invalid_utf8, "redirect_loop": redirect_loop, "tls_stall": tls_stall}

# The fleet: kind -> (served over TLS, https URL on raw TCP, the outcome its probe must end with) under
# FLEET_TIMEOUTS (connect 2 s, total 3 s; first byte and idle 10 s, so the total's deadline is the one that ends the
# slow ones).
FLEET = {
    "endless_head": (False, False, "response_too_large"),
    "endless_event": (False, False, "response_too_large"),
    "invalid_utf8": (False, False, "invalid_utf8"),
    "huge": (False, False, "response_too_large"),  # a 10 GB Content-Length, sent as fast as it is read: past the
    # answer's bound (monitor_limits: 64 KB per token asked for), no longer parsed until the total timeout
    "tls_stall": (False, True, "connect_timeout"),
    "redirect_loop": (False, False, "http_status"),
    "flood": (True, False, "total_timeout"),  # TLS records of tiny frames, as fast as the fleet's one process sends
    "head_trickle": (False, False, "total_timeout"),
    "body_trickle": (False, False, "http_status"),
    "handshake_trickle": (False, True, "connect_timeout"),
}
# Outcomes a kind may also end with: ten floods share the fleet's one process (and its GIL), which sends a probe its
# answer's bound (monitor_limits: 2 MB for 32 tokens) within the total deadline on an idle host only.
ALSO = {"flood": {"response_too_large"}}
FLEET_TIMEOUTS = {"connect_timeout_s": 2, "total_timeout_s": 3, "first_byte_timeout_s": 10, "idle_timeout_s": 10}


def main(argv: list[str]) -> None:
    ctx = server_context(argv[0], argv[1])
    servers = []
    for kind, (tls, https, _) in FLEET.items():
        servers.append(Hostile(ALL[kind], tls=ctx if tls else None, https=https))
        print(kind, servers[-1].url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
