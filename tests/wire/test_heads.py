"""The bytes of the heads tokenpath writes (wire/framing.py response_head and request_head): a status line with the
status's reason phrase (none for a code HTTP names no phrase for), one line per header in order, `Connection: close`
when the connection ends, and the blank line."""

from __future__ import annotations

from http import HTTPStatus

import pytest

from tokenpath.wire.framing import request_head, response_head


@pytest.mark.parametrize("status", [200, 404, 429, 502, 103, 418, 599, 299, 1000])
def test_the_status_line_carries_the_phrase_http_names(status: int) -> None:
    phrase = HTTPStatus(status).phrase if status in {s.value for s in HTTPStatus} else ""
    head = response_head(status, [], keep_alive=True)
    assert head == f"HTTP/1.1 {status} {phrase}\r\n\r\n".encode()


def test_headers_in_order_then_close_then_the_blank_line() -> None:
    headers = [("Content-Type", "text/event-stream"), ("X-Note", "caf\xe9"), ("X-Note", "2")]
    assert response_head(200, iter(headers), keep_alive=False) == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Note: caf\xe9\r\nX-Note: 2\r\n"
        b"Connection: close\r\n\r\n"
    )
    assert response_head(204, headers[:1], keep_alive=True) == (
        b"HTTP/1.1 204 No Content\r\nContent-Type: text/event-stream\r\n\r\n"
    )


def test_a_request_head() -> None:
    assert request_head("POST", "/v1/chat?x=1", iter([("Host", "m"), ("Content-Length", "2")])) == (
        b"POST /v1/chat?x=1 HTTP/1.1\r\nHost: m\r\nContent-Length: 2\r\n\r\n"
    )
    assert request_head("GET", "/", []) == b"GET / HTTP/1.1\r\n\r\n"
