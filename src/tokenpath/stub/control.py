"""Asks a running stub for its audit, or anything else on its control plane (`exchange`). Over a plain socket
from a `connect` function, so a runner can reach a stub inside a network namespace with a socket made there."""

from __future__ import annotations

import json
import time

from tokenpath.audit import AuditReply
from tokenpath.errors import BadRequest, PeerError, ProtocolError, ResponseTooLarge
from tokenpath.probe.transport import SocketFactory, parse_target, tcp_connect
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.request import build_request

# A control-plane answer: a health's is a KB; an audit's with write logs holds ~50 bytes a write, so a load level's
# thousands of streams take tens of MB. Past this, no stub's.
MAX_ANSWER_BYTES = 256 << 20
MAX_HEALTH_BYTES = 1 << 20  # a health answer: its pacing and a few figures
TOTAL_TIMEOUTS = 5  # the whole exchange: this many read timeouts


def exchange(
    stub_url: str,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    timeout_s: float = 10.0,
    connect: SocketFactory = tcp_connect,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> tuple[int | None, bytes]:
    """One request to a stub's control plane over a socket from `connect`: (status, or None when it answered
    nothing; the whole body). Bounded: each read by `timeout_s`, the whole exchange by TOTAL_TIMEOUTS of it, the
    body by `max_bytes` (an answer that never ended filled memory to a MemoryError; one trickled a byte a second
    held diagnose's first check for a day). Raises OSError (TimeoutError) / ProtocolError for the caller to name."""
    target = parse_target(stub_url)
    headers = [("Content-Type", "application/json")] if body is not None else []
    request = build_request(method, target.host_header, path, body=body or b"", headers=headers)
    parser = ResponseParser()
    body_parts: list[bytes] = []
    size = 0
    deadline = time.monotonic() + TOTAL_TIMEOUTS * timeout_s
    with connect(target.host, target.port, timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(request)
        while not parser.complete:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no whole answer within {TOTAL_TIMEOUTS * timeout_s:g} s")
            sock.settimeout(min(timeout_s, left))
            data = sock.recv(1 << 20)
            if not data:
                parser.feed_eof()
                break
            body_parts.append(parser.feed(data))
            size += len(body_parts[-1])
            if size > max_bytes:
                raise ResponseTooLarge(f"an answer larger than {max_bytes} bytes")
    return (parser.head.status if parser.head is not None else None), b"".join(body_parts)


def fetch_audit(
    stub_url: str,
    stream_ids: list[str],
    *,
    with_log: bool = True,
    timeout_s: float = 10.0,
    connect: SocketFactory = tcp_connect,
) -> AuditReply:
    """The stub's bulk audit answer for these streams (its verdicts, and write logs unless `with_log` is False)."""
    path = f"/_tokenpath/audit?log={int(with_log)}"
    where = f"{parse_target(stub_url).origin}{path}"
    try:
        status, answer = exchange(
            stub_url, "POST", path, body=json.dumps({"ids": stream_ids}).encode(), timeout_s=timeout_s, connect=connect
        )
    except (OSError, ProtocolError) as exc:
        raise PeerError(f"cannot read the stub's audit at {where}: {exc}") from None
    if status is None:
        raise PeerError(f"the stub's audit at {where} answered nothing")
    if 400 <= status < 500:
        raise BadRequest(f"the stub's audit at {where} refused the request: HTTP {status}")
    if status != 200:
        raise PeerError(f"the stub's audit at {where} answered HTTP {status}")
    try:
        doc = json.loads(answer)
    except ValueError as exc:
        raise PeerError(f"the stub's audit at {where} is not JSON: {exc}") from None
    try:
        return AuditReply.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise PeerError(f"the stub's audit at {where} is not an audit answer ({type(exc).__name__}: {exc})") from None
