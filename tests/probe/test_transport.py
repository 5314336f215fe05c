from __future__ import annotations

import socket
import time

import pytest

from tokenpath.errors import ConnectError, DNSError, NetworkError, UsageError
from tokenpath.probe.transport import SEND_TIMEOUT_S, SocketTransport, TLSOptions, open_connection, parse_target


@pytest.mark.parametrize(
    ("url", "path", "port", "host_header"),
    [
        ("http://127.0.0.1:8000", "/v1/chat/completions", 8000, "127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1", "/v1/chat/completions", 8000, "127.0.0.1:8000"),
        ("http://h/openai/v1/", "/openai/v1/chat/completions", 80, "h"),
        ("https://h/v1/completions", "/v1/completions", 443, "h"),
        ("http://[::1]:9/v1/chat/completions?x=1", "/v1/chat/completions?x=1", 9, "[::1]:9"),
    ],
)
def test_parse_target(url: str, path: str, port: int, host_header: str) -> None:
    target = parse_target(url)
    assert (target.path, target.port, target.host_header) == (path, port, host_header)


@pytest.mark.parametrize("url", ["ftp://h", "http://", "h:80", "http://h:99999", "http://[::1"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(UsageError):
        parse_target(url)


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
