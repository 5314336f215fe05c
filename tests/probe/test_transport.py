from __future__ import annotations

import socket
import time

import pytest

from tokenpath.errors import ConnectError, DNSError, NetworkError, UsageError
from tokenpath.probe.transport import SEND_TIMEOUT_S, SocketTransport, TLSOptions, open_connection, parse_target

# every character RFC 3986 allows in a path and a query, and well-formed %-escapes: sent as written
ALL_RFC3986 = "/a%20b/x;v=1,2/@:!$&'()*+=~_.-/completions?q=a/b?c&d=%2F%c3%a9"


@pytest.mark.parametrize(
    ("url", "path", "port", "host_header"),
    [
        ("http://127.0.0.1:8000", "/v1/chat/completions", 8000, "127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1", "/v1/chat/completions", 8000, "127.0.0.1:8000"),
        ("http://h/openai/v1/", "/openai/v1/chat/completions", 80, "h"),
        ("https://h/v1/completions", "/v1/completions", 443, "h"),
        ("http://[::1]:9/v1/chat/completions?x=1", "/v1/chat/completions?x=1", 9, "[::1]:9"),
        (f"http://h{ALL_RFC3986}", ALL_RFC3986, 80, "h"),
    ],
)
def test_parse_target(url: str, path: str, port: int, host_header: str) -> None:
    target = parse_target(url)
    assert (target.path, target.port, target.host_header) == (path, port, host_header)


@pytest.mark.parametrize("url", ["ftp://h", "http://", "h:80", "http://h:99999", "http://[::1"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(UsageError):
        parse_target(url)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h/v1/a b", "' ', a space or a control character"),
        ("http://h/v1/a\x00b", "'\\x00', a space or a control character"),
        ("http://h/v1/a\r\nX-Injected: 1", "'\\r', a space or a control character"),  # urlsplit would drop it
        ("http://h/v1/a\nb", "'\\n', a space"),
        ("http://h/v1/a\tb", "'\\t', a space"),
        ("http://h/v1/\u4e2d\u6587", "'\u4e2d', which is not ASCII: percent-encode its UTF-8 bytes (%E4%B8%AD)"),
        ("http://h/v1/caf\u00e9", "'\u00e9', which is not ASCII"),  # Latin-1 too: sent as one raw byte before
        ("http://h/v1?q=\u2603", "'\u2603', which is not ASCII"),
        ("http://b\u00fccher.example/v1", "write a host name in its IDNA form"),
        ("http://h/v1/%zz", "'%zz', which is not a %-escape"),
        ("http://h/v1/a%2", "'%2', which is not a %-escape"),
        ("http://h/v1?q=100%", "'%', which is not a %-escape"),
        ("http://h/v1/a|b", "'|', which RFC 3986 does not allow in a path or query: percent-encode it (%7C)"),
        ("http://h/v1/a\\b", "'\\\\', which RFC 3986 does not allow"),
        ('http://h/v1?q="x"', "'\"', which RFC 3986 does not allow"),
    ],
)
def test_a_url_is_refused_rather_than_sent_otherwise_than_written(url: str, says: str) -> None:
    """A request line carries the URL's path and query as they are: a space or a line break would forge another
    request, a non-Latin-1 character failed to encode (a traceback), and re-encoding them would probe another URL."""
    with pytest.raises(UsageError) as refused:
        parse_target(url)
    assert says in str(refused.value)
    assert str(refused.value).startswith(f"URL {url!r}: it has ")


def test_dns_failure_is_its_own_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    with pytest.raises(DNSError, match=r"cannot resolve 'nowhere\.invalid'"):
        open_connection(parse_target("http://nowhere.invalid"), connect_timeout_s=1, tls=TLSOptions())


def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connect is refused
        with pytest.raises(ConnectError, match="refused"):
            open_connection(parse_target(f"http://127.0.0.1:{port}"), connect_timeout_s=1, tls=TLSOptions())


def test_a_server_that_never_reads_ends_the_write_with_a_network_error_not_a_hang() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        transport = SocketTransport(ours)
        transport.send_timeout_s = 0.2
        started = time.monotonic()
        with pytest.raises(NetworkError, match="took nothing we sent"):
            transport.sendall(b"x" * (64 << 20))  # more than both socket buffers hold: the write must block
        assert time.monotonic() - started < 10  # bounded by the send timeout, not by the (absent) reader


def test_after_a_write_a_read_waits_only_as_long_as_it_asks() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        transport = SocketTransport(ours)
        transport.sendall(b"request")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            transport.recv(0.2)  # the socket is back in blocking mode under SO_RCVTIMEO, not the 30 s send timeout
        assert time.monotonic() - started < SEND_TIMEOUT_S / 2


@pytest.mark.parametrize("url", ["http://127.0.0.1:0/v1", "https://h:0"])
def test_port_0_is_refused_not_taken_for_the_default(url: str) -> None:
    """`parts.port or 80` read :0 as no port: `probe http://127.0.0.1:0/` probed port 80."""
    with pytest.raises(UsageError, match="port 0 is no port to connect to"):
        parse_target(url)
