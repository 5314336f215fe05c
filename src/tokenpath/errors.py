"""One error tree for the whole package (httpcore's `_exceptions.py` shape).

    TokenpathError
    ├── UsageError            ours: a flag, a URL, a config value the caller must change
    ├── LocalProtocolError    ours: code in this package misused the HTTP core (a bug, never the peer's doing)
    ├── RuleBreached          a gate the user set (monitor --fail-on) was not met
    ├── PathHeld              diagnose: the path holds the stream (names the cause)
    ├── DiagnosisUnsure       diagnose: the runs disagree; no cause is named
    ├── PeerError             the other side: server, proxy or network
    │   ├── NetworkError          ConnectError (DNSError, TLSError), the connection reset
    │   ├── PeerTimeout           ConnectTimeout, FirstByteTimeout, IdleTimeout, TotalTimeout
    │   ├── RemoteProtocolError   bytes that are not valid HTTP (alias: ProtocolError)
    │   │   ├── ResponseTooLarge      a response head or one frame (SSE event, event-stream message, NDJSON line)
    │   │   │                         past its named limit
    │   │   └── StreamFormatError     a frame that breaks its streaming format (bad CRC, truncated message)
    │   ├── HTTPStatusError       a non-2xx answer (other than BadRequest's)
    │   ├── ContentTypeError      not the chosen API format's Content-Type (text/event-stream for SSE APIs)
    │   ├── ContentEncodingError  a Content-Encoding (gzip, br...) the client cannot decode
    │   ├── HTTP2Unavailable      --http2, and the server did not agree to HTTP/2
    │   └── BadRequest            the peer refused the request as malformed or too large (400, 413, 414, 422, 431)
    └── InstrumentError       the measuring setup itself: CertificationError, ServiceError, ProxyError, NetnsError

Each class carries the process exit code the CLI uses, so scripts can tell failures apart; the README's table is
generated from `exit_code_table()` (a test keeps the two equal). A peer's failure is never relabelled as a usage
error: exit 2 always means "change your input".
"""

from __future__ import annotations


class TokenpathError(Exception):
    exit_code = 1
    meaning = "an unexpected failure"


class UsageError(TokenpathError):
    """Bad input from the user: a flag, a URL, a config value."""

    exit_code = 2
    meaning = "bad input: a flag, URL, file or config value"


class LocalProtocolError(TokenpathError):
    """This package asked its HTTP core for something HTTP does not allow. Always a bug here."""

    exit_code = 1
    meaning = "a bug in tokenpath (please report it)"


class PeerError(TokenpathError):
    """The server, proxy or network did something we cannot measure through."""

    exit_code = 3
    meaning = ""  # abstract: its children say what happened


class NetworkError(PeerError):
    exit_code = 3
    meaning = "the connection failed or was reset"


class ConnectError(NetworkError):
    exit_code = 3
    meaning = "cannot connect (refused or unreachable)"


class DNSError(ConnectError):
    exit_code = 4
    meaning = "the host name does not resolve"


class TLSError(ConnectError):
    exit_code = 5
    meaning = "the TLS handshake failed (certificate, protocol)"


class HTTPStatusError(PeerError):
    """A non-2xx answer the request itself did not cause as far as HTTP says: 401, 403, 404, 429, 5xx..."""

    exit_code = 6
    meaning = "a non-2xx status other than those of exit 12 (the body's first bytes are shown)"


class ContentTypeError(PeerError):
    exit_code = 7
    meaning = "the response's Content-Type is not the chosen API format's (text/event-stream for SSE APIs)"


class ContentEncodingError(PeerError):
    """The response's encoding cannot be read, so its frames and arrivals cannot be counted and nothing is reported
    as measured. `reason` says which way (wire/contentcoding.py raises all four):

    - "unsupported": a coding the client does not decode (`Content-Encoding: compress`, a transfer coding other
      than chunked, or any coding the caller did not enable)
    - "corrupt": the body is not in the coding its header names (garbage, or a plain body labelled gzip)
    - "truncated": the body ended inside the compressed stream
    - "too_large": a decompression bomb: decoded output past a named limit (per read, in total, or per byte in)
    """

    exit_code = 15
    meaning = "the response has a Content-Encoding the client cannot decode (gzip, br...)"

    def __init__(self, message: str, reason: str = "unsupported") -> None:
        super().__init__(message)
        self.reason = reason


class PeerTimeout(PeerError):
    exit_code = 8
    meaning = ""  # abstract: its children say which timeout


class ConnectTimeout(ConnectError, PeerTimeout):
    exit_code = 3
    meaning = "connecting (TCP and the TLS handshake) took longer than --connect-timeout"


class FirstByteTimeout(PeerTimeout):
    exit_code = 8
    meaning = "no first byte within --first-byte-timeout"


class IdleTimeout(PeerTimeout):
    exit_code = 9
    meaning = "silence longer than --idle-timeout"


class TotalTimeout(PeerTimeout):
    exit_code = 13
    meaning = "the stream (connect, TLS, head and body) did not end within --total-timeout"


class RemoteProtocolError(PeerError):
    """Malformed HTTP from the peer (bad status line, broken chunked encoding, truncated body). `status_hint` is
    the status a server answers a malformed request with (h11's error_status_hint)."""

    exit_code = 10
    meaning = "malformed HTTP framing from the peer"

    def __init__(self, message: str, status_hint: int = 400) -> None:
        super().__init__(message)
        self.status_hint = status_hint


class ProtocolViolation(RemoteProtocolError):
    """The peer's bytes broke HTTP's rules, where a plain RemoteProtocolError is a response that ended early (a close
    before its last chunk or its Content-Length): a malformed head or chunk, bytes while no request was outstanding,
    a 101 to a request that asked for no upgrade, an HTTP/2 or HTTP/3 protocol error or flood. A stream that ended so
    is MALFORMED, never a cut (wire/ending.violation)."""

    exit_code = 10
    meaning = "the peer's bytes broke HTTP's rules (a malformed head or chunk, an HTTP/2 or HTTP/3 protocol error)"


class ResponseTooLarge(RemoteProtocolError):
    """A response head or one frame grew past its named limit (wire/client.py MAX_RESPONSE_HEAD_BYTES, wire/sse.py
    MAX_EVENT_BYTES, wire/eventstream.py MAX_MESSAGE_BYTES, wire/ndjson.py MAX_LINE_BYTES): the read ends there
    instead of holding whatever the peer sends."""

    exit_code = 10
    meaning = "a response head or one frame (SSE event, event-stream message, NDJSON line) larger than its limit"


class StreamFormatError(RemoteProtocolError):
    """A frame that breaks the rules of its streaming format: an AWS event-stream message with a bad prelude or
    message CRC, an impossible length or an unknown header type, a body that ends inside a message or an NDJSON
    line. The bytes cannot be split into frames, so nothing after them is measured."""

    exit_code = 10
    meaning = "a malformed streaming frame (bad CRC, unknown header type, truncated message or line)"

    def __init__(self, message: str, *, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated  # the body ended inside a frame: cut short, not a broken rule


ProtocolError = RemoteProtocolError  # the name most of the package reads


class BadRequest(PeerError):
    """The peer refused the request as malformed or too large: HTTP 400, 413, 414, 422 or 431 (BAD_REQUEST_STATUSES),
    the statuses our own server answers such a request with (wire/server.py's status hints). A client of ours
    raises it for those; every other non-2xx (401, 403, 404, 429, 5xx) is an HTTPStatusError: the request was
    well formed and the peer said no."""

    exit_code = 12
    meaning = "the peer refused the request as malformed or too large (HTTP 400, 413, 414, 422, 431)"


BAD_REQUEST_STATUSES = frozenset({400, 413, 414, 422, 431})


class HTTP2Unavailable(PeerError):
    """`--http2` was asked for and the server did not agree to it: over TLS its ALPN choice was not `h2`, in clear
    text (h2c with prior knowledge) its first bytes were not an HTTP/2 SETTINGS frame (an HTTP/1.1-only server
    answers the preface with a 400 or closes). Never a silent fallback to HTTP/1.1: the condition was HTTP/2."""

    exit_code = 18
    meaning = "--http2 asked for, and the server did not agree to HTTP/2 (ALPN, or h2c prior knowledge)"


class RuleBreached(TokenpathError):
    """A `--fail-on` rule of `monitor --once` or `load` was breached: the measurement worked, the path failed the
    gate."""

    exit_code = 14
    meaning = "a --fail-on rule was breached (monitor --once, load)"


class PathHeld(TokenpathError):
    """`diagnose` named a cause that holds the stream (buffering, bursts, compression without a flush, the first
    bytes held): the measurement worked, the path holds tokens. A finding, not an error: diagnose ends with this
    exit code and prints no error line."""

    exit_code = 16
    meaning = "diagnose: the path holds the stream (whole response, bursts, compression, the first bytes)"


class DiagnosisUnsure(TokenpathError):
    """`diagnose` could not name one cause: its runs disagreed (the verdict says which signals). A finding, not an
    error, as PathHeld."""

    exit_code = 17
    meaning = "diagnose: the runs disagree, so no cause is named (unsure); timeouts: cuts no one limit explains"


class PathCut(TokenpathError):
    """`diagnose` saw the path end a stream before its end (an idle or total limit, named with its measured value
    and the line that lifts it). A finding, not an error, as PathHeld."""

    exit_code = 19
    meaning = "diagnose: the path cut the stream (which limit, its value, the line or keep-alives that lift it)"


class UpgradeNotCarried(TokenpathError):
    """`diagnose --transport websocket` saw the path answer the WebSocket upgrade with something other than 101: a
    client of the WebSocket mode falls back to SSE after its retries (the cost and the line that carries the upgrade
    are named). A finding, not an error, as PathHeld."""

    exit_code = 21
    meaning = "diagnose --transport websocket: the path does not carry the upgrade (its fix line, the fallback's cost)"


class InstrumentError(TokenpathError):
    """The measuring setup failed: nothing measured through it can be reported."""

    exit_code = 20
    meaning = "the instrument failed (a service, proxy, namespace or certification)"


class CertificationError(InstrumentError):
    exit_code = 11  # since the matrix first shipped; kept so scripts that test for it keep working
    meaning = "certification failed: the controls were not seen as declared"


class ServiceError(InstrumentError):
    exit_code = 22
    meaning = "a service tokenpath started (stub, gateway, relay) failed"


class ProxyError(InstrumentError):
    exit_code = 23
    meaning = "a proxy under test could not be installed, configured or started"


class NetnsError(InstrumentError):
    exit_code = 24
    meaning = "a network namespace or veth link could not be set up"


def _tree(cls: type[TokenpathError]) -> list[type[TokenpathError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        if sub.__module__ == __name__:
            out.extend(c for c in _tree(sub) if c not in out)
    return out


def exit_code_table() -> str:
    """The README's exit-code table, one row per code, from the classes above."""
    rows: dict[int, list[type[TokenpathError]]] = {}
    for cls in _tree(TokenpathError):
        rows.setdefault(cls.exit_code, []).append(cls)
    lines = ["| exit | errors | meaning |", "|---:|---|---|", "| 0 | | success |"]
    for code in sorted(rows):
        classes = rows[code]
        names = ", ".join(f"`{c.__name__}`" for c in classes)
        meanings = "; ".join(dict.fromkeys(c.meaning for c in classes if c.meaning))
        lines.append(f"| {code} | {names} | {meanings} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(exit_code_table())
