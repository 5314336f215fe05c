"""The headers that cross the gateway: which of a client's request headers go upstream (and which the gateway adds),
and which of a member's response headers go to the client. Pure functions of the headers, no I/O."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote_plus

from tokenpath.gateway.streamformat import CREDENTIAL_HEADERS, upstream_credential
from tokenpath.wire.apis import Api, spec_or_default
from tokenpath.wire.client import ResponseHead
from tokenpath.wire.framing import Framing
from tokenpath.wire.server import Request

Headers = list[tuple[str, str]]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "host",
        "authorization",
        "proxy-authorization",
        "expect",
    }
)
FORWARD_DROP = HOP_BY_HOP | {"x-forwarded-for", "x-forwarded-proto"}  # rewritten: the chain plus this client
RESPONSE_DROP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "trailer", "upgrade"}
)
REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# What nginx forwards by default (ignore_invalid_headers on, underscores_in_headers off): other names are dropped.
HEADER_NAME_OK = re.compile(r"[A-Za-z0-9-]+\Z")


def connection_tokens(headers: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The header names every Connection header lists (RFC 9110 7.6.1: hop-by-hop, never forwarded)."""
    return frozenset(t.strip().lower() for k, v in headers if k.lower() == "connection" for t in v.split(","))


def new_request_id() -> str:
    """The gateway's own request id: a UUID, the form servers that check the header expect (llama-cpp-python's
    server answers an empty 400 to any X-Request-Id that is not one; docs/findings.md §17)."""
    # str(uuid.uuid4()) spelled out: the same 16 random bytes and bits, without a UUID object and its checks per
    # request (tests/gateway/test_headers.py reads it back as a version-4 UUID).
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def client_request_id(value: str | None) -> str | None:
    """The client's request id, when it is one the gateway passes on (else the gateway makes its own)."""
    return value if value and REQUEST_ID_OK.match(value) else None


@dataclass(frozen=True, slots=True)
class Forwarding:
    """What the gateway adds to every request it forwards."""

    drop: frozenset[str]  # FORWARD_DROP and the request id header: ours replaces the client's
    request_id_header: str
    forwarded_proto: str  # the scheme the client reached us by
    pass_client_credentials: bool  # --no-auth: the upstream checks the client's key


def forwarded_target(target: str, api: Api | None, keyed: bool) -> str:
    """The client's origin-form target as it goes upstream. With the pool's key sent (`keyed`), without the query
    parameter its format takes a key in (Gemini's `?key=`): the client's own key must not ride beside the pool's, as
    its credential headers do not. The other parameters go as the client wrote them."""
    param = spec_or_default(api).key_query if keyed and api is not None else None
    path, sep, query = target.partition("?")
    if param is None or not sep:
        return target
    kept = [part for part in query.split("&") if unquote_plus(part.partition("=")[0]) != param]
    return f"{path}?{'&'.join(kept)}" if kept else path


def upstream_headers(
    forwarding: Forwarding, request: Request, request_id: str, api: Api | None, key: str | None
) -> Headers:
    """Headers sent upstream: the client's, minus hop-by-hop (and those its Connection headers name), names nginx
    ignores (anything but letters, digits and '-': `X_Forwarded_For` would reach a CGI-style backend as
    X-Forwarded-For) and (when the gateway checked them) its credentials, plus ours. The pool's `key` goes in the
    header the route's API takes it in; it replaces every credential header the client sent."""
    names = request.names  # lowercased once, by the core that parsed the request
    drop = forwarding.drop
    if "connection" in names:
        drop = drop | connection_tokens(request.headers)
    if key:
        drop = drop | CREDENTIAL_HEADERS  # the client's x-api-key must not ride along beside the pool's own
    headers = [
        pair
        for pair, name in zip(request.headers, names, strict=True)
        if name not in drop and HEADER_NAME_OK.match(pair[0])
    ]
    if request.peer:
        seen = request.header("x-forwarded-for")
        headers.append(("X-Forwarded-For", f"{f'{seen}, ' if seen else ''}{request.peer}"))
        headers.append(("X-Forwarded-Proto", forwarding.forwarded_proto))
    headers.append(("Content-Length", str(len(request.body))))
    headers.append((forwarding.request_id_header, request_id))
    client_credentials = request.header("authorization")
    if key:
        headers.append(upstream_credential(api, key))
    elif client_credentials and forwarding.pass_client_credentials:
        headers.append(("Authorization", client_credentials))
    return headers


@dataclass(frozen=True, slots=True)
class ForwardedHead:
    """A member's response head as it goes to the client."""

    headers: Headers  # end-to-end headers, and the request id
    length: int | None  # the body's Content-Length, when the upstream's framing makes it one
    content_type: str | None
    encoded: bool  # a Content-Encoding other than identity: the relay cannot see frames in the bytes


def forwarded_head(head: ResponseHead, request_id_header: str, request_id: str) -> ForwardedHead:
    headers: Headers = []
    length: int | None = None
    content_type: str | None = None
    encoded = False
    drop = RESPONSE_DROP | connection_tokens(head.headers)  # hop-by-hop, also those the upstream names
    for name, value in head.headers:
        lname = name.lower()
        if lname == "content-length" and head.framing in (Framing.LENGTH, Framing.NONE):  # else not the length
            length = int(value)
        elif lname == "content-type":
            content_type = value
        elif lname == "content-encoding" and value.strip().lower() != "identity":
            encoded = True
        if lname not in drop:
            headers.append((name, value))
    headers.append((request_id_header, request_id))
    return ForwardedHead(headers, length, content_type, encoded)
