from __future__ import annotations

import pytest

from tokenpath.errors import ProtocolError
from tokenpath.wire.client import ClientConnection, ResponseParser

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"9\r\ndata: 1\n\n\r\n"
    b"9\r\ndata: 2\n\n\r\n"
    b"0\r\n\r\n"
)


def feed_all(parser: ResponseParser, data: bytes, step: int | None = None) -> bytes:
    if step is None:
        return parser.feed(data)
    return b"".join(parser.feed(data[i : i + step]) for i in range(0, len(data), step))


@pytest.mark.parametrize("step", [None, 1, 3, 7])
def test_chunked_body_is_dechunked_in_any_split(step: int | None) -> None:
    parser = ResponseParser()
    assert feed_all(parser, CHUNKED, step) == b"data: 1\n\ndata: 2\n\n"
    assert parser.complete
    assert parser.head is not None
    assert parser.head.status == 200
    assert parser.head.content_type == "text/event-stream"


def test_content_length_body() -> None:
    parser = ResponseParser()
    body = parser.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nhello")
    assert body == b"hello"
    assert parser.complete
    assert parser.head is not None
    assert parser.head.status == 404


def test_close_delimited_body_completes_at_eof() -> None:
    parser = ResponseParser()
    body = parser.feed(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n")
    assert body == b"data: 1\n\n"
    assert not parser.complete
    parser.feed_eof()
    assert parser.complete


def test_eof_inside_chunked_body_is_an_error() -> None:
    parser = ResponseParser()
    parser.feed(CHUNKED[:-5])
    with pytest.raises(ProtocolError, match="chunked"):
        parser.feed_eof()


def test_eof_before_headers_is_an_error() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-")
    with pytest.raises(ProtocolError, match="headers"):
        parser.feed_eof()


def test_malformed_chunk_size() -> None:
    parser = ResponseParser()
    with pytest.raises(ProtocolError, match="malformed HTTP response body"):
        parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n")


def test_garbage_status_line() -> None:
    with pytest.raises(ProtocolError, match="status line"):
        ResponseParser().feed(b"SSH-2.0-OpenSSH_9.2\r\n")


def test_interim_100_continue_is_skipped() -> None:
    parser = ResponseParser()
    body = parser.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert parser.head is not None
    assert parser.head.status == 200
    assert body == b"ok"


def test_bytes_after_the_response_are_ignored() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert parser.feed(b"HTTP/1.1 200 OK\r\n") == b""


def test_a_callbacks_own_exception_is_raised_as_itself_never_as_the_peers_protocol_error() -> None:
    """The relay's Sink runs inside these callbacks: a bug there must not read as a malformed response (which
    would count against the member that sent a good one)."""

    def on_body(data: bytes) -> None:
        raise KeyError("planted")

    conn = ClientConnection("GET", on_body=on_body)
    with pytest.raises(KeyError, match="planted"):
        conn.receive_data(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")


def test_body_feed_is_receive_data_while_the_body_streams_and_nothing_else() -> None:
    """ClientConnection.body_feed: the parser's own feed, handed out only between the head and the end (the load
    client's per-read call); its errors mean what receive_data's do (parse_failed)."""
    pieces: list[bytes] = []
    conn = ClientConnection("GET", on_body=pieces.append)
    assert conn.body_feed() is None  # no head yet: the head's checks (its size, a 101) are receive_data's
    conn.receive_data(CHUNKED[:100])
    feed = conn.body_feed()
    assert feed is not None
    feed(CHUNKED[100:-5])
    assert conn.body_feed() is not None
    feed(CHUNKED[-5:])
    assert conn.complete
    assert b"".join(pieces) == b"data: 1\n\ndata: 2\n\n"
    assert conn.body_feed() is None  # after the end: later bytes are not this response's
    streaming = ClientConnection("GET")
    streaming.receive_data(CHUNKED[:100])
    streaming.detach()
    assert streaming.body_feed() is None


def test_a_body_feeds_parse_error_is_the_peers_malformed_body_as_receive_data_says() -> None:
    from tokenpath.wire.client import ParseError

    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    said: list[str] = []
    for fast in (False, True):
        conn = ClientConnection("GET", on_body=lambda data: None)
        conn.receive_data(head)
        feed = conn.body_feed() if fast else conn.receive_data
        assert feed is not None
        try:
            feed(b"zz\r\nxx\r\n")
        except ProtocolError as exc:
            said.append(str(exc))
        except ParseError as exc:
            with pytest.raises(ProtocolError, match="malformed HTTP response body") as raised:
                raise conn.parse_failed(exc) from None
            said.append(str(raised.value))
        assert conn.state.value == "error"
    assert said[0] == said[1]
