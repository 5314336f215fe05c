"""proxy.declared_body_bytes: what a request's body is held against max_body_bytes_in_flight, decided on its head."""

from __future__ import annotations

import pytest

from tokenpath.gateway.proxy import declared_body_bytes
from tokenpath.wire.server import Request

MAX = 1000


def head(method: str, version: str, *headers: tuple[str, str]) -> Request:
    return Request(method, "/v1/chat/completions", "/v1/chat/completions", "", version, True, tuple(headers))


@pytest.mark.parametrize(
    ("request_head", "expected"),
    [
        (head("POST", "1.1", ("Content-Length", "12")), 12),
        (head("POST", "1.1", ("Transfer-Encoding", "chunked")), MAX),  # known only at its end
        (head("POST", "1.1"), 0),  # HTTP/1.1 without either: no body
        (head("POST", "2", ("content-length", "12")), 12),
        (head("POST", "2"), MAX),  # HTTP/2: the body ends with END_STREAM, its length unknown until then
        (head("GET", "2"), 0),
        (head("HEAD", "2"), 0),
    ],
    ids=["h1-length", "h1-chunked", "h1-none", "h2-length", "h2-post-no-length", "h2-get", "h2-head"],
)
def test_declared_body_bytes(request_head: Request, expected: int) -> None:
    assert declared_body_bytes(request_head, MAX) == expected
