import pytest

from tokenpath.errors import UsageError
from tokenpath.hostport import join_hostport, parse_hostport, url_host


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("localhost:0", ("localhost", 0)),
        (":9000", ("127.0.0.1", 9000)),  # no host: the default
        ("[::1]:8080", ("::1", 8080)),
        ("[::]:443", ("::", 443)),
        ("[fe80::1%eth0]:80", ("fe80::1%eth0", 80)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
    ],
)
def test_parses_ipv4_names_and_bracketed_ipv6(value: str, expected: tuple[str, int]) -> None:
    assert parse_hostport(value, "--listen") == expected


@pytest.mark.parametrize(
    "value",
    [
        "8080",  # no colon: the port is missing
        "127.0.0.1",
        "127.0.0.1:",  # empty port
        "[::1]",
        "127.0.0.1:http",  # not a number
        "127.0.0.1:-1",
        "127.0.0.1:65536",  # out of range
        "::1:8080",  # IPv6 without brackets: ambiguous
        "[::1:8080",  # unclosed bracket
        "[127.0.0.1]:80",  # brackets around an IPv4 address
    ],
)
def test_refuses_what_is_not_host_port(value: str) -> None:
    with pytest.raises(UsageError, match=r"--listen .*expected HOST:PORT"):
        parse_hostport(value, "--listen")


def test_missing_host_where_one_is_required() -> None:
    with pytest.raises(UsageError, match="the host is missing"):
        parse_hostport(":8080", "[stub] listen", default_host=None)
    assert parse_hostport(":8080", "--listen", default_host="0.0.0.0") == ("0.0.0.0", 8080)


def test_min_port() -> None:
    with pytest.raises(UsageError, match="the port from 1 to 65535"):
        parse_hostport("127.0.0.1:0", "[stub] listen", min_port=1)


@pytest.mark.parametrize(
    ("host", "port", "joined"),
    [("127.0.0.1", 80, "127.0.0.1:80"), ("example.com", 443, "example.com:443"), ("::1", 8080, "[::1]:8080")],
)
def test_formats_with_brackets_for_ipv6(host: str, port: int, joined: str) -> None:
    assert join_hostport(host, port) == joined
    assert parse_hostport(joined, "x") == (host, port)  # round trip
    assert url_host(host) == joined.rpartition(":")[0]
