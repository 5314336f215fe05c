"""Asks a running stub for its audit. Control plane, but over a plain socket from a `connect` function, so a
runner can reach a stub inside a network namespace with a socket made there."""

from __future__ import annotations

import json

from tokenpath.errors import BadRequest, PeerError, ProtocolError
from tokenpath.probe.transport import SocketFactory, parse_target, tcp_connect
from tokenpath.stub.audit import AuditReply
from tokenpath.wire.client import ResponseParser
from tokenpath.wire.request import build_request


def fetch_audit(
    stub_url: str,
    stream_ids: list[str],
    *,
    with_log: bool = True,
    timeout_s: float = 10.0,
    connect: SocketFactory = tcp_connect,
) -> AuditReply:
    """The stub's bulk audit answer for these streams (its verdicts, and write logs unless `with_log` is False)."""
    target = parse_target(stub_url)
    path = f"/_tokenpath/audit?log={int(with_log)}"
    body = json.dumps({"ids": stream_ids}).encode()
    request = build_request("POST", target.host_header, path, body=body, headers=[("Content-Type", "application/json")])
    where = f"{target.origin}{path}"
    try:
        with connect(target.host, target.port, timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(request)
            parser = ResponseParser()
            body_parts = []
            while not parser.complete:
                data = sock.recv(1 << 20)
                if not data:
                    parser.feed_eof()
                    break
                body_parts.append(parser.feed(data))
    except (OSError, ProtocolError) as exc:
        raise PeerError(f"cannot read the stub's audit at {where}: {exc}") from None
    if parser.head is None:
        raise PeerError(f"the stub's audit at {where} answered nothing")
    if 400 <= parser.head.status < 500:
        raise BadRequest(f"the stub's audit at {where} refused the request: HTTP {parser.head.status}")
    if parser.head.status != 200:
        raise PeerError(f"the stub's audit at {where} answered HTTP {parser.head.status}")
    try:
        doc = json.loads(b"".join(body_parts))
    except ValueError as exc:
        raise PeerError(f"the stub's audit at {where} is not JSON: {exc}") from None
    try:
        return AuditReply.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise PeerError(f"the stub's audit at {where} is not an audit answer ({type(exc).__name__}: {exc})") from None
