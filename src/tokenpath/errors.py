"""One error tree for the whole package.

`UsageError` is ours (the caller asked for something impossible); `PeerError` and its children are the other
side's doing. Each error carries the process exit code the CLI uses, so scripts can tell failures apart.
"""


class TokenpathError(Exception):
    exit_code = 1


class UsageError(TokenpathError):
    """Bad input from the user: a flag, a URL, a config value."""

    exit_code = 2


class PeerError(TokenpathError):
    """The server, proxy or network did something we cannot measure through."""

    exit_code = 3


class ConnectError(PeerError):
    exit_code = 3


class DNSError(PeerError):
    exit_code = 4


class TLSError(PeerError):
    exit_code = 5


class HTTPStatusError(PeerError):
    exit_code = 6


class ContentTypeError(PeerError):
    exit_code = 7


class FirstByteTimeout(PeerError):
    exit_code = 8


class IdleTimeout(PeerError):
    exit_code = 9


class ProtocolError(PeerError):
    """Malformed HTTP framing (bad status line, broken chunked encoding, truncated body)."""

    exit_code = 10
