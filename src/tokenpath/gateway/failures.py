"""Why an attempt at a member failed, as a kind the exchange decides on (fail over, retry fresh, 502 or 504, blame
the member or not) and a detail that goes to the log only: member URLs and OS errors never reach a client."""

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


def connect_failure(exc: OSError, where: str) -> Failure:
    if exc.errno in LOCAL_ERRNOS:
        return Failure(FailureKind.LOCAL_RESOURCES, f"connect to {where}: {exc.strerror or exc}")
    return Failure(FailureKind.CONNECT, f"connect to {where}: {exc.strerror or exc}")
