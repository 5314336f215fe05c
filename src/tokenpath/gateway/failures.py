"""The gateway's failure vocabulary. FailureKind: why an attempt at a member failed, as a kind the exchange decides on
(fail over, retry fresh, 502 or 504, blame the member or not), with a detail that goes to the log only: member URLs
and OS errors never reach a client. Outcome: how a request ended other than normally, the one name for its metric
label and for the code its client reads. Between them, every `errors_total` reason but `upstream_<status>`."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import StrEnum


class FailureKind(StrEnum):
    CONNECT = "connect"  # refused, unreachable, reset while connecting
    CONNECT_TIMEOUT = "connect_timeout"
    TLS = "tls"  # handshake failed: certificate, hostname, protocol
    LOCAL_RESOURCES = "local_resources"  # out of file descriptors or ports here: not the member's fault
    FIRST_BYTE_TIMEOUT = "first_byte_timeout"
    UPSTREAM_5XX = "upstream_5xx"
    UPSTREAM_CLOSED = "upstream_closed"  # closed or reset before the response ended
    MALFORMED = "malformed_response"
    REFUSED_STREAM = "refused_stream"  # HTTP/2 GOAWAY or REFUSED_STREAM: not processed, safe to send elsewhere
    TOTAL_TIMEOUT = "total_timeout"
    INTERNAL = "internal"  # a bug in the gateway's own code while it handled the member's bytes: never the member's


MAX_BUG_CHARS = 300


def bug_text(exc: BaseException) -> str:
    """A bug of our own code as its log line and access line name it: the exception's class and message, bounded,
    never its repr (a UnicodeEncodeError's repr holds the whole string it failed on: a request head, a key in it)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_BUG_CHARS else text[:MAX_BUG_CHARS] + "..."


TIMEOUTS = frozenset({FailureKind.CONNECT_TIMEOUT, FailureKind.FIRST_BYTE_TIMEOUT, FailureKind.TOTAL_TIMEOUT})
NOT_THE_MEMBERS_FAULT = frozenset(
    {FailureKind.LOCAL_RESOURCES, FailureKind.REFUSED_STREAM, FailureKind.TOTAL_TIMEOUT, FailureKind.INTERNAL}
)
# errno values that say this host ran out of something, so another member would fail the same way
LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL})


@dataclass(frozen=True, slots=True)
class Failure:
    kind: FailureKind
    detail: str  # for the log and the operator; never sent to the client

    @property
    def is_timeout(self) -> bool:
        return self.kind in TIMEOUTS

    @property
    def members_fault(self) -> bool:
        return self.kind not in NOT_THE_MEMBERS_FAULT

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class Outcome(StrEnum):
    """How a request ended other than normally. The value is its `errors_total{reason}` label; `reply_code` is the
    code of the error body a client gets before the response head, `end_code` the code of the error frame that ends
    a stream after it. Where a code is not given it is the label; where they differ, all are written out."""

    reply_code: str
    end_code: str

    def __new__(cls, label: str, reply_code: str | None = None, end_code: str | None = None) -> Outcome:
        outcome = str.__new__(cls, label)
        outcome._value_ = label
        outcome.reply_code = reply_code or label
        outcome.end_code = end_code or label
        return outcome

    # an exchange's end, decided by its machine (exchange_state.py)
    ALL_MEMBERS_FAILED = "all_members_failed", "upstream_unavailable"
    LOCAL_RESOURCES = "local_resources", "overloaded"
    TOTAL_TIMEOUT = "total_timeout", "upstream_unavailable", "total_timeout"
    IDLE_TIMEOUT = "idle_timeout", "upstream_idle_timeout", "upstream_idle_timeout"
    CLIENT_STALLED = "client_stalled"
    UPSTREAM_LOST_MID_STREAM = "upstream_lost_mid_stream", "upstream_disconnected", "upstream_disconnected"
    UPSTREAM_TRUNCATED = "upstream_truncated"
    EVENT_TOO_LARGE = "event_too_large"
    UPSTREAM_MALFORMED = "upstream_malformed"
    CLIENT_GONE = "client_gone"  # the client never reads a code
    INTERNAL = "internal", "internal_error", "internal"  # a bug of ours
    SHUTDOWN = "shutdown"  # the drain deadline passed
    # a request refused at admission, before it is an exchange (app.py)
    OVERLOADED = "overloaded"
    BODIES_IN_FLIGHT = "bodies_in_flight", "overloaded"
    UNAUTHORIZED = "unauthorized", "invalid_api_key"
    JWKS_UNAVAILABLE = "jwks_unavailable", "auth_unavailable"


def connect_failure(exc: OSError, where: str) -> Failure:
    if exc.errno in LOCAL_ERRNOS:
        return Failure(FailureKind.LOCAL_RESOURCES, f"connect to {where}: {exc.strerror or exc}")
    return Failure(FailureKind.CONNECT, f"connect to {where}: {exc.strerror or exc}")
