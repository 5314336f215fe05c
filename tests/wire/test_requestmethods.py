"""wire/requestmethods.py: the methods of pipelined requests in order, in any split, bodies skipped; bytes that are
not HTTP/1.1 requests stop the reading and keep what was read."""

from __future__ import annotations

from tokenpath.wire.requestmethods import RequestMethods

BODY = b'{"stream": true, "note": "GET / HTTP/1.1 in a body is no request"}'
PIPELINED = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(BODY), BODY)
    + b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    + b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
)


def test_methods_are_read_in_order_in_any_split_and_bodies_are_skipped() -> None:
    for size in (1, 2, 7, 64, len(PIPELINED)):
        methods = RequestMethods()
        for at in range(0, len(PIPELINED), size):
            methods.feed(PIPELINED[at : at + size])
        assert list(methods.methods) == ["POST", "HEAD", "POST", "GET"]
        assert not methods.broken


def test_bytes_that_are_not_requests_stop_the_reading_and_keep_what_was_read() -> None:
    upgrade = b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"
    for after_it in (upgrade, b"\x16\x03\x01 not http at all\r\n\r\n"):
        methods = RequestMethods()
        methods.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n" + after_it)
        methods.feed(b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")  # never read: past the break
        assert methods.broken
        assert methods.methods[0] == "GET"
        assert "POST" not in methods.methods
