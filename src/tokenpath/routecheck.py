"""Whether a reverse proxy routes yet: `python -m tokenpath.routecheck HOST:PORT PATH TIMEOUT_S [--tls]`
exits 0 once a GET of PATH through it gets any answer but the proxy's own "no route" 404, 1 at the deadline.

Traefik accepts connections before its file provider's routes are applied; until then every request gets Go's
http.NotFound. A process of its own (not a call in the runner) so that it runs where the proxy does: the runner's
`wrap` puts it into the proxy's network namespace.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import sys
import time

from tokenpath.hostport import parse_hostport

UNROUTED_BODY = b"404 page not found\n"  # Go's http.NotFound, Traefik's answer when no router matches
MAX_ANSWER = 64 << 10  # more than any "no route" page; the rest of a long answer is not needed to tell
RETRY_S = 0.02
IO_TIMEOUT_S = 2.0


def unrouted(answer: bytes) -> bool:
    """The proxy's own 404 for a path no router matches (an upstream's answer, whatever it is, means routed)."""
    return answer.startswith(b"HTTP/1.1 404 ") and answer.endswith(b"\r\n\r\n" + UNROUTED_BODY)


def request(hostport: str, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n".encode()


def ask(hostport: str, path: str, tls: bool) -> bytes:
    host, port = parse_hostport(hostport, "proxy")
    with socket.create_connection((host, port), IO_TIMEOUT_S) as raw:
        if tls:  # only asks whether a route exists: the certificate is the runner's own, not checked here
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            sock: socket.socket = ctx.wrap_socket(raw)
        else:
            sock = raw
        sock.settimeout(IO_TIMEOUT_S)
        sock.sendall(request(hostport, path))
        answer = b""
        while len(answer) < MAX_ANSWER and (chunk := sock.recv(MAX_ANSWER)):
            answer += chunk
        return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="routecheck")
    parser.add_argument("hostport")
    parser.add_argument("path")
    parser.add_argument("timeout_s", type=float)
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            if not unrouted(ask(args.hostport, args.path, args.tls)):
                return 0
            last = "its own 404 (no route)"
        except OSError as exc:
            last = str(exc)
        time.sleep(RETRY_S)
    print(f"not routed within {args.timeout_s:.0f} s: {last}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
