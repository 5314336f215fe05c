"""`HOST:PORT` both ways: one parser for every listen / connect address a user writes (flags, the gateway's and the
monitor's config, the experiment file, a Ray head, a URL a proxy announces) and one writer for every address
tokenpath prints or sends (URLs, Host headers, config lines). An IPv6 address is written in brackets,
`[::1]:8080`, and read only from them: `::1:8080` has no single meaning."""

from __future__ import annotations

from urllib.parse import urlsplit

from tokenpath.errors import UsageError

MAX_PORT = 65535


def check_port(port: int, where: str, *, min_port: int = 0) -> int:
    """A port given alone (a `--port` flag): in range, or a UsageError naming `where`."""
    if not min_port <= port <= MAX_PORT:
        raise UsageError(f"{where} {port}: a port from {min_port} to {MAX_PORT}")
    return port


def url_host(host: str) -> str:
    """The host as it stands before `:PORT` in a URL or a Host header: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def join_hostport(host: str, port: int) -> str:
    """`host:port`, `[v6]:port`."""
    return f"{url_host(host)}:{port}"


def parse_hostport(
    value: str, where: str, *, default_host: str | None = "127.0.0.1", min_port: int = 0
) -> tuple[str, int]:
    """`HOST:PORT` or `[IPv6]:PORT` → (host without brackets, port). An empty host (`:8080`) is `default_host`, or
    refused where it is None. `where` names the field or flag in the message (UsageError)."""
    expected = f"{where} {value!r}: expected HOST:PORT"
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(expected)
    if not min_port <= int(port) <= MAX_PORT:
        raise UsageError(f"{expected}, the port from {min_port} to {MAX_PORT}")
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]")) or ":" not in host[1:-1]:
            raise UsageError(f"{expected}; only an IPv6 address goes in brackets, [::1]:{port}")
        host = host[1:-1]
    elif ":" in host:
        raise UsageError(f"{expected}; an IPv6 address goes in brackets, [{host}]:{port}")
    if not host:
        if default_host is None:
            raise UsageError(f"{expected}; the host is missing")
        host = default_host
    return host, int(port)


def redacted(url: str) -> str:
    """A URL with any user:password@, query and fragment masked: a refusal or a log line that names it never prints
    a secret."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2])
    if parts.query:
        parts = parts._replace(query="***")
    if parts.fragment:
        parts = parts._replace(fragment="***")
    return parts.geturl()
