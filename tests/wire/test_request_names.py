"""A request's header names lowercased once (wire/server.py Request.names): made by the HTTP/1.1 core as it parses,
made on construction otherwise, and what every lookup and the core's own checks read, whatever case a client writes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tokenpath.errors import RemoteProtocolError
from tokenpath.wire.limits import ServerLimits
from tokenpath.wire.server import Request, ServerConnection

LIMITS = ServerLimits(max_body_bytes=64, max_head_bytes=4096, max_pipelined=4)


def parsed(raw: bytes) -> Request:
    conn = ServerConnection(LIMITS)
    conn.receive_data(raw)
    request = conn.next_request()
    assert request is not None
    return request


def test_the_core_lowercases_each_name_once_in_order_and_lookups_read_them_in_any_case() -> None:
    request = parsed(
        b"POST /v1/x HTTP/1.1\r\nHOST: h\r\nX-Stainless-OS: Linux\r\nx-dup: first\r\nX-DUP: second\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    assert request.names == ("host", "x-stainless-os", "x-dup", "x-dup", "content-length")
    assert request.headers[1] == ("X-Stainless-OS", "Linux")  # the client's own spelling is what is forwarded
    assert request.header("x-stainless-os") == request.header("X-STAINLESS-OS") == "Linux"
    assert request.header("X-Dup") == "first"  # the first value, as find_header gives it
    assert request.header("authorization") is None
    assert request.without_body().names == request.names


def test_names_are_made_from_the_headers_whenever_a_request_is_built_otherwise() -> None:
    """Names are never given but by the parser: a request built by hand, or by dataclasses.replace with other
    headers of the same number, gets the names of its own headers (stale ones would let a header past the filters)."""
    headers = (("Host", "h"), ("Authorization", "Bearer k"))
    built = Request("GET", "/", "/", "", "2", True, headers)
    assert built.names == ("host", "authorization")
    assert built.header("AUTHORIZATION") == "Bearer k"
    other = replace(parsed(b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n"), headers=headers)
    assert other.names == ("host", "authorization")
    assert other.header("authorization") == "Bearer k"


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n", 400, "more than one Host"),  # two spellings
        (b"GET / HTTP/1.1\r\nhOsT: a\r\n\r\n", None, ""),  # one Host, any case
        (b"POST / HTTP/1.0\r\nTRANSFER-ENCODING: chunked\r\n\r\n0\r\n\r\n", 400, "Transfer-Encoding in an HTTP/1.0"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nCONTENT-LENGTH: 65\r\n\r\n", 413, "larger than 64"),  # at the head
        (b"GET / HTTP/1.1\r\nHost: a\r\nUPGRADE: foo\r\nConnection: upgrade\r\n\r\n", 400, "upgrade to foo"),
    ],
)
def test_the_cores_own_checks_read_the_lowercased_names(raw: bytes, status: int | None, message: str) -> None:
    conn = ServerConnection(LIMITS)
    if status is None:
        conn.receive_data(raw)
        assert conn.next_request() is not None
        return
    with pytest.raises(RemoteProtocolError, match=message) as info:  # the core's own refusal, not llhttp's
        conn.receive_data(raw)
    assert info.value.status_hint == status


def test_an_h2c_offers_headers_dropped_leave_the_names_matching_the_headers() -> None:
    """The names are made again when an h2c offer's headers are dropped: the Content-Length found after them is
    read at its new place (a stale index read past the shortened list)."""
    request = parsed(
        b"POST /a HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUPGRADE: h2c\r\n"
        b"http2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nX-After: 1\r\nContent-Length: 2\r\n\r\n{}"
    )
    assert request.names == tuple(k.lower() for k, _ in request.headers)
    assert "upgrade" not in request.names
    assert (request.header("x-after"), request.header("content-length"), request.body) == ("1", "2", b"{}")
